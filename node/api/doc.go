// Package api is the ticketing node's HTTP API (SPEC §4.1): routing, strict
// JSON decoding, input validation, bearer-token and admin-token checks,
// Prometheus metrics, and the JSON wire types that the Go client
// (node/api/client) shares.
//
// Invariants:
//   - Every answer other than /metrics is JSON; every error is
//     {"error": code, "message": text} (503 adds the stage and reason;
//     429 the reason: node_cap, caller_share or node_share).
//   - A request that passes the token check marks its connection
//     authenticated (node/api/connlimit); the health listener
//     (Options.HealthOnly) serves /livez, /readyz and /metrics alone.
//   - Bad input (path, method, body, fields, types, fractions, unknown
//     fields, bodies over 64 KiB) is a 4xx that reaches no Backend method,
//     so it changes nothing.
//   - Tokens are compared in constant time and never logged or echoed.
//
// POST /v1/batch (an addition beside SPEC §4.1) carries up to MaxBatchOps
// grant, renew and release ops:
//
//	POST /v1/batch  {"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30},
//	                        {"op":"renew","name":"b","holder":"h","token":7,"lease_s":30},
//	                        {"op":"release","name":"c","holder":"h","token":9}]}
//	  200 {"results":[{"status":200,"body":{...grant...}},
//	                  {"status":409,"body":{"error":"wrong_token",...}},
//	                  {"status":200,"body":{...released...}}]}
//
// Each op takes its single endpoint's body fields plus "op" and "name",
// is validated as that endpoint validates, goes through the same
// Backend.Write (one Raft entry, its own clock check, forwarded from a
// follower) and gets in "results", in order, exactly the status and JSON
// body that endpoint would answer. The ops run concurrently: their order
// of application is unspecified. A bad op (a field it does not take, a
// bad value, wait_ms: a blocking grant is a request of its own) is its own
// 400 and changes nothing; a malformed body, no ops, or more than
// MaxBatchOps is a 400 for the whole request, a body over MaxBatchBody a
// 413. Reads are not batched. A body in the shape the Go client writes
// (flat ops of plain strings and canonical integers) is read by a one-pass
// scanner (batchscan.go); at the first byte outside it, encoding/json
// reads the body again, so every refusal keeps its wording
// (FuzzBatchDecoders holds the two readings to the same answers).
//
// POST /v1/tickets/{name}/revoke (SPEC §4, admin token; no body or
// {"token":N}) revokes the grant held now (or the one with token N): 200
// with the ticket as GET shows it ("revoked": true, its expiry unchanged),
// also for a ticket already revoked; 404 not_found when nobody holds it;
// 409 wrong_token when another grant holds it. Its holder's renew (and
// its own grant) is then a 409 "revoked"; its release still frees it.
// Revoke is not a batch op.
//
// The handler holds no ticket state: a Backend (the node) proposes writes
// through Raft and serves linearizable reads.
package api
