// Package ctl is ticketctl (SPEC §8) as a library: the command dispatch,
// the flags of each command, the calls to node/api/client and the printing
// of answers as tables or JSON. cmd/ticketctl only wires a process to Main.
//
// Invariants: it imports the standard library, node/api/client and
// node/api/wire only (TestDependsOnClientOnly), so the command line client
// stays as light as the Go client. Numbers in flags are plain decimal (the
// wire's rule: no sign, leading zero, base prefix, underscore or exponent).
// Exit status: 0 ok, 1 the server refused or could not be reached, 2 bad
// usage.
//
// Hazard: the local deadline printed for grant and renew is ticketctl's own
// send time + the remaining lease × (1 − 500 ppm); a script must count it
// from when it ran ticketctl, on the same host, and never from a server
// time.
package ctl
