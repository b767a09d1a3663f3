// Package clockhealthtest holds the test fakes of node/clockhealth: a manual
// wall+monotonic clock, manual tickers, an in-process TCKCLK/2 agent on a
// real 127.0.0.1 listener whose every reply a test scripts, and a net.Pipe
// dialer that feeds arbitrary bytes to the prober's read path. Tests and
// fuzz targets only; production code never imports it.
package clockhealthtest
