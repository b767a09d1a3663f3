// Package secret loads the clock-agent HMAC secret of SPEC §1.4 (and other
// secrets read from files) with the checks an operator relies on: at least
// 32 bytes, a file readable by its owner only, exactly one source, a single
// trailing LF dropped and no more.
//
// Invariant: secret bytes never reach a log line, an error message or a
// printed config; Secret's String and Format methods print "[redacted]".
package secret
