// Package source defines what the agent needs from a synchronisation source
// (SPEC §2.2): a small Source interface whose Poll returns one verified
// Sample — an offset of the local clock to true time, an honest uncertainty
// at the instant of the measurement, and the age of the underlying data —
// or an *Error with a Reason saying why the source is unhealthy.
//
// The implementations live in the sub-packages ntp, chrony, ptp and kernel.
//
// Invariants: a Sample returned with a nil error has Uncertainty > 0 and is
// never the local clock reporting itself; Poll never panics on garbage from
// the source; a transport failure has ReasonUnreachable, anything else the
// source says or sends that cannot be trusted has another Reason.
package source
