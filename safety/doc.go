// Package safety checks histories of ticket operations against the
// promises of SPEC §4: mutual exclusion, fencing and fail-closed.
//
// A History is what a workload recorded: every Grant, Renew, Release, Get
// and administrator's Revoke with its call and return instants on one monotonic clock, the node
// it went to, its outcome (ok, refused, unknown) and the injected clock
// offsets; and every write to the fencing register. Check runs
//
//   - a porcupine model per ticket, in which an operation with an unknown
//     outcome forks into applied and not applied, and expiry is uncertain:
//     a lease may end no earlier than its client-side deadline (send time
//   - lease × (1 − 500 ppm)) and a Renew may succeed no later than the
//     server-side expiry's upper bound (return + lease + 2Δ + rate error);
//   - direct checks: no two holders' client-side hold intervals overlap,
//     tokens strictly increase per ticket (and no token is issued twice),
//     no write with a stale token is accepted by the register, no
//     server-side expiry moves except by Renew, and no grant is renewed
//     after a revoke of it returned.
//
// A revoked ticket (SPEC §4) stays held in the model until it may have
// expired (its Early) or its holder releases it; no Renew of it succeeds.
//
// A porcupine Unknown (timeout) is a violation, never a pass. On any
// violation Check writes the HTML visualisation and the history as JSON.
//
// Hazards: the checker is only as good as the recorded times. Call must be
// read before the request is sent and Return after the answer arrived, on
// the same clock the clients' deadlines are computed with.
package safety
