// Package agent is the TCKCLK/2 clock agent (SPEC §2): it polls verified
// synchronisation sources (agent/source/...), selects the healthy one with
// the lowest uncertainty, and answers one signed sample per TCP connection.
//
// # Server invariants (SPEC §1.1, §2.1)
//
// One exchange per connection: the server reads with a fixed 257-byte
// buffer up to the first LF, issues no read after it (bytes after the LF
// that arrived in the same segment are discarded, never answered), answers
// only what protocol.ParseRequest accepts, writes one line and closes.
// Anything else is reset without a byte and counted under its SPEC §1.5
// reason. A connection must deliver its line within read_timeout_ms
// (default 2 s, at most 10 s); at most max_conns are held, further ones are
// reset at once. A connection the agent drops unanswered always ends with a
// TCP reset (SO_LINGER 0), never a FIN: a node whose request was not read
// yet sees "connection reset" (io, an incomplete exchange it tries again
// within its burst, SPEC §3.1), where a clean EOF before any byte would read
// as a missing LF, format (§1.1) — a lying agent's reason (§3.4). The
// answered connection alone ends with a FIN after its line. A held
// connection costs one goroutine (2 KiB stack) and its socket; it takes a
// pooled fixed buffer only when the socket is readable and reads the first
// bytes straight into it (a read that finds nothing gives the buffer back
// before waiting again), so silent connections hold no buffer and an
// exchange costs no extra syscall. Nothing grows with what clients send. Shutdown stops accepting (the kernel resets
// connections still in the listen queue), fails /readyz and lets held
// connections finish their exchange; those still held at
// shutdown_timeout_ms are reset.
//
// # Uncertainty model (SPEC §2.1)
//
// Each source yields, at a local instant At, an offset (true − local), a base
// uncertainty B bounding |local(At) + offset − true(At)|, and the age A0 the
// underlying measurement already had at At. At a later local instant now:
//
//	age            = A0 + (now − At)                                (monotonic)
//	step           = |Δwall − Δmono| since At                       (a step of the local clock)
//	uncertainty_ms = ceil_ms(B + max_drift_ppm × age + step)   (summed in ns; never 0 when synced)
//	reference_ms   = floor_ms(now + offset)
//	source_age_ms  = ceil_ms(age)
//
// The terms are summed in ns and the sum rounded up once (rounding each
// term up on its own would add up to 2 ms for nothing); max_drift_ppm defaults to 50 (ClockBound's advice with
// chrony's maxclockerror 50). The drift term assumes that between the
// measurement and now nothing slews the local clock faster than
// max_drift_ppm: true for chrony and kernel (the daemon's own correction is
// in B), and for ntp and ptp on a free-running clock; where another daemon
// disciplines the clock, prefer the chrony source or raise max_drift_ppm.
// Steps are caught by the step term. A sample is usable while age ≤
// max_source_age_ms; otherwise the agent answers synced=0. The base B of
// each source:
//
//   - chrony: ClockBound's |system time offset| + root_delay/2 +
//     root_dispersion, from the tracking report; offset = the system time
//     offset; A0 = the time since chronyd's last clock update (ref time).
//     chrony's own refid 7F7F0101 (its free-running local clock) is not a
//     source unless --dev.
//   - ntp: for each server, root distance (root_delay/2 + root_dispersion)
//     plus the measurement's own error (rtt/2, whatever the path asymmetry,
//     and the server's precision). The intervals
//     [offset ± bound] go through an intersection (Marzullo) step; servers
//     outside the best intersection are falsetickers and dropped; at least
//     min_truechimers (default a majority of the configured servers) must
//     agree. The answer is the truechimer with the smallest bound, its own
//     offset and bound. A0 = 0.
//   - ptp: |master offset| + mean path delay (the bound on path asymmetry) +
//     the grandmaster's clockAccuracy; offset = −master offset (ptp4l reports
//     local − master); A0 = now − the last sync ingress time. Software
//     timestamping only (the offset must be of the system clock).
//   - kernel: maxerror from adjtimex (which the kernel grows by 500 ppm/s by
//     itself); offset 0; A0 = 0.
//   - dev (--dev only): the host clock, B = 1 ms, offset 0. Loopback only,
//     signed with dev_key, labelled in logs, /readyz, /v1/status and metrics.
//
// A poll that gets no answer (unreachable) keeps the previous sample usable,
// its bound growing, until it is older than max_source_age_ms; a source that
// answers that it is unsynchronised (leap 3, STA_UNSYNC, too few
// truechimers, a local refid, garbage) loses its sample at once.
//
// # Hazards
//
// The MAC gives origin and integrity, not confidentiality: the TCKCLK/2 port
// belongs on a trusted private network. Without --dev the agent never
// answers synced=1 from its own clock. The secret is never logged, printed
// or put in an error.
package agent
