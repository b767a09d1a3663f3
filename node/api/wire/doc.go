// Package wire holds the request and response bodies of the ticketd HTTP
// API (SPEC §4.1): what a client and the server agree on, and nothing else.
//
// Invariants: standard library only (TestStdlibOnly), so a client program
// that imports node/api/client pulls in no Prometheus, Raft or protobuf; JSON
// names are the SPEC's and never change meaning (scripts depend on them).
package wire
