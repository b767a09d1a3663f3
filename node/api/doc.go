// Package api is the ticketing node's HTTP API (SPEC §4.1): routing, strict
// JSON decoding, input validation, bearer-token and admin-token checks,
// Prometheus metrics, and the JSON wire types that the Go client
// (node/api/client) shares.
//
// Invariants:
//   - Every answer other than /metrics is JSON; every error is
//     {"error": code, "message": text} (503 adds the stage and reason).
//   - Bad input (path, method, body, fields, types, fractions, unknown
//     fields, bodies over 64 KiB) is a 4xx that reaches no Backend method,
//     so it changes nothing.
//   - Tokens are compared in constant time and never logged or echoed.
//
// The handler holds no ticket state: a Backend (the node) proposes writes
// through Raft and serves linearizable reads.
package api
