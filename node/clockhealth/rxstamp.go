package clockhealth

import (
	"io"

	"github.com/tckclk/tckclk/protocol"
)

// Receive timestamps (SPEC §1.1: the client takes w1, m1 "when the LF
// arrives"). A clock read after the read returns is late by whatever held
// the process between the segment's arrival and the read — a scheduler
// stall, or a CPU quota's throttled period of up to a few hundred ms — and
// that lateness lands twice in e_ns: in rtt and in |w1 − R|. On Linux the
// kernel stamps each received segment (SO_TIMESTAMPNS_NEW, CLOCK_REALTIME,
// taken in the softirq that delivers it) and hands the stamp of the last
// segment a recvmsg read back as a control message; the segment that
// carried the LF is exactly "when the LF arrives".
//
// The stamp is a wall reading only. The monotonic m1 is derived from the
// (w_read, m_read) pair read right after the read: m1 = m_read − (w_read −
// w1). That is sound only while the wall clock ran with the monotonic one
// over the whole exchange, so the stamp is used only when
//   - w0 ≤ w1_kernel ≤ w_read (a stamp from another clock or time is never
//     taken), and
//   - |(w_read − w0) − (m_read − m0)| ≤ 1 ms: no step (SPEC §3.2's step
//     threshold) anywhere from before connecting to after the read.
// Otherwise the exchange keeps the user-space reading (w_read, m_read), as
// without kernel stamps, and a step during it stays in |w1 − R| (and a
// rollback in the evaluation that installs the sample). The residual
// |(w_read − w0) − (m_read − m0)| (at most 1 ms) is added to the sample's
// e_ns: any divergence of the two clocks between the LF's arrival and the
// read, which the pair (w1_kernel, m1) no longer shows to the running
// bound, is counted instead of hidden.

// Values of clock_rx_timestamps_total's source label.
const (
	RxSourceKernel = "kernel" // w1, m1 from the kernel's receive timestamp of the segment carrying the LF
	RxSourceUser   = "user"   // w1, m1 read in user space after the read returned
)

// kernelSample derives an exchange's (w1, m1) from the kernel's receive
// timestamp wK (Unix ns; 0: none) and the clock pairs (w0, m0), read before
// connecting, and (wRead, mRead), read after the read that returned the LF.
// ok is false when the stamp may not be used (see above); residual is
// |(wRead − w0) − (mRead − m0)|, which the caller adds to e_ns.
func kernelSample(w0, m0, wRead, mRead, wK int64) (w1, m1 int64, residual uint64, ok bool) {
	if wK <= 0 || wK < w0 || wK > wRead {
		return 0, 0, 0, false
	}
	dWall, dMono := wRead-w0, mRead-m0
	if protocol.IsStep(dWall, dMono) {
		return 0, 0, 0, false
	}
	return wK, mRead - (wRead - wK), protocol.AbsDiff(dWall, dMono), true
}

// stampedConn is an agent connection read with recvmsg so that each read
// also returns the kernel's receive timestamp of the last segment it read.
type stampedConn interface {
	io.Reader
	// LastStamp is the receive timestamp (Unix ns) of the last segment the
	// previous Read returned data from; 0 when it carried none.
	LastStamp() int64
}
