// Package clockhealth is the node's fail-closed clock contract (SPEC §3):
// a prober that proves, through a TCKCLK/2 agent, that the local wall clock
// is within Δ/2 of a trusted reference; the running error bound between
// samples; a latch that, once FAILED, never returns to healthy; the
// `retired` marker; and the readiness stages of SPEC §3.5.
//
// Time is injected (WallClock, MonoClock); the package calls no time.Now in
// its logic, so tests step and skew clocks at will.
package clockhealth
