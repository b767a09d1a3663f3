// Package conformance holds the catalogue of TCKCLK/2 agent conformance checks
// (SPEC §7) and runs it against any agent over TCP, as a black box: it knows
// only the agent's address and the clock secret.
//
// Every check is data: an ID numbered by the SPEC section it enforces
// ("1.2-3"), the section, a level (MUST or SHOULD), a one-line requirement and
// a run function. A MUST that does not hold is FAIL, a SHOULD is WARN. A check
// that cannot observe what it checks (no response, a response it cannot
// read) fails: the suite never passes on missing evidence.
//
// Invariants:
//   - Every read is bounded in bytes (captureLimit per connection) and in time
//     (the run's --timeout, or the 10 s of SPEC §2.1 for silent clients), so a
//     target that floods, stalls or resets gets FAIL with the reason and never
//     hangs or crashes the suite.
//   - With Dev the MAC is verified with dev_key and only with it (SPEC §1.3);
//     without Dev a development reference fails the MAC check.
//   - The secret never appears in a report, a log line or an error.
//
// Hazards: checks send real traffic, including 100 concurrent connections and
// connections held open for up to 10 s; point the suite only at an agent you
// are allowed to test.
package conformance
