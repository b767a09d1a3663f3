// Package clockhealth is the node's fail-closed clock contract (SPEC §3):
// a prober that proves, through TCKCLK/2 agents, that the local wall clock
// is within Δ/2 of a trusted reference; the running error bound between
// samples; and a latch that, once FAILED, never returns to healthy. It
// measures and latches, nothing else: the node reads Failed() on its own
// goroutine and decides what a failure means (markers, leadership, Raft).
//
// Use: New(Options) → Start → ClockCheck(ctx) (3 consecutive healthy
// samples) → Check() before every Grant, Renew and Expire the node
// proposes, and the node's run loop waits on Failed() → Close. With no agent
// configured (single node) the monitor watches the host clock only: the
// clock stages are skipped and Status says so.
//
// Invariants:
//   - Every failure carries exactly one SPEC §1.5 reason. Per exchange:
//     connect, timeout, io, then the wire checks (size … mac), then the
//     sample checks unsynced, source_age, uncertainty (u = 0 with synced=1
//     included), rtt, offset, bound. Per evaluation: bound (no step seen),
//     stale, rollback, then step (a bound pushed past Δ/2 while
//     |Δwall − Δmono| > 1 ms since the sample).
//   - A probe round is a burst per agent (SPEC §3.1): up to clock.burst
//     exchanges, one after another, until one is within every limit. Only
//     slow exchanges (rtt over, or offset/bound over only by the exchange's
//     delay) and incomplete ones (connect, timeout, io) are tried again;
//     any other failure latches at once, wherever it falls in the burst.
//     A round never runs past the staleness window's end (roundBudget).
//   - w1, m1 are "when the LF arrives" (SPEC §1.1): with
//     Options.KernelRxTimestamps (Linux, the system clock) the kernel's
//     receive timestamp of the LF's segment, so a stall of the node between
//     the arrival and its read is in neither rtt nor |w1 − R|; an exchange
//     whose wall clock moved against the monotonic one by more than 1 ms
//     keeps the clocks read after the read (rxstamp.go).
//   - e_ns and the running bound are summed in ns and rounded up to ms once
//     per evaluation (bound.go), never term by term.
//   - FAILED is a latch: the first failure wins, nothing clears it.
//   - Every evaluation (Check, Status, the watchdog, a new sample)
//     reads both clocks under one mutex, so "between two evaluations"
//     (rollback) compares readings in the order they were taken. A wall
//     read is bracketed by two monotonic reads and retried while the bracket
//     is wider than 100 µs, so a thread descheduled between the reads (seen
//     on this loaded 2-core host: 280–600 ms) never looks like a step.
//   - Time is injected (WallClock, MonoClock, TickerFunc, Dialer); the logic
//     calls no time.Now. Check does not allocate on its healthy path.
//
// Hazards: no code outside this package runs on the goroutine that
// latches (possibly an HTTP handler calling Check): a failure's fsyncs and
// Raft work happen on the node's goroutine after Failed() closes. Host mode trusts the host clock's rate; it detects steps and
// rollbacks, not a clock that is simply wrong.
package clockhealth
