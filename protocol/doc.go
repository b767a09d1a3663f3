// Package protocol implements TCKCLK/2 (SPEC §1, §3.1–3.2): request and
// response encoding, the strict parser, the HMAC-SHA-256 sample MAC, the
// bounded line reader and the saturating error-bound arithmetic shared by the
// agent, the node and the conformance suite.
//
// Invariants:
//   - Every rejected exchange carries exactly one Reason (SPEC §1.5), decided
//     by the fixed check order size → bytes → fields → magic → version →
//     grammar → nonce → MAC. Callers use ReasonOf / errors.As, never strings.
//   - Anything ParseRequest or ParseResponse accepts re-encodes byte-for-byte
//     to the input (the grammar is canonical).
//   - ParseResponse and ParseVerify (and Challenge.ParseVerify, which
//     compares the nonce field with the request's text instead of decoding
//     it) read a valid line once, on an accept-only path (fastpath.go);
//     whatever it doubts goes through the ordered checks, which alone name
//     reasons. TestParseVerifyFastAgrees, TestChallengeAgrees,
//     TestFastPathAgrees and the fuzz targets FuzzParseResponse and
//     FuzzParseVerify keep the two in agreement.
//   - A Key holds prepared SHA-256 pad states and never changes: safe for
//     concurrent use without locks, no allocation per MAC.
//   - Bound arithmetic saturates; an overflow is reported, never wrapped.
//
// Hazards: the MAC gives origin and integrity, not confidentiality. The
// package imports the standard library only (dep_test.go enforces it) and does
// no I/O beyond io.Reader.
package protocol
