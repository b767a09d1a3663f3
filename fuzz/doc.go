// Package fuzz holds the native Go fuzz targets for every parser that reads
// bytes from the network or from disk (DESIGN §11): the TCKCLK/2 request and
// response parsers, the bounded line reader, and the decoders of the node's
// log entries, snapshots and configuration. Each target checks that nothing
// panics, that accepted input re-encodes byte-identically, and — where a
// second, deliberately naive parser exists — that both agree.
//
// Run every target for a while with fuzz/run.sh DURATION (see README).
package fuzz
