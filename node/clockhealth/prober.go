package clockhealth

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// exchange is the outcome of one TCKCLK/2 exchange with one agent.
type exchange struct {
	agent int // index into Monitor.agents
	err   *protocol.Error
	s     SampleStatus
	w1    int64 // wall ns when the LF arrived
	m1    int64 // monotonic ns when the LF arrived (t_sample)
}

// unreachable reports whether the agent could not be reached (SPEC §3.1):
// such agents are counted and fail the round only when none answers. Every
// other reason is an invalid or dishonest answer and fails the node at once.
func (x *exchange) unreachable() bool {
	if x.err == nil {
		return false
	}
	switch x.err.Reason {
	case protocol.ReasonConnect, protocol.ReasonTimeout, protocol.ReasonIO:
		return true
	}
	return false
}

// ioReason classifies a write or deadline-setting error as timeout or io.
func ioReason(what string, err error) *protocol.Error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return protocol.Wrap(protocol.ReasonTimeout, what, err)
	}
	return protocol.Wrap(protocol.ReasonIO, what, err)
}

func asProtocolError(err error, fallback protocol.Reason) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	return protocol.Wrap(fallback, "", err)
}

// exchangeOne runs one exchange (SPEC §1.1, §3.1) under its own deadline and
// applies the sample checks of SPEC §3.3 in order. It reads at most 257
// bytes of line plus one byte while waiting for EOF.
func (m *Monitor) exchangeOne(ctx context.Context, idx int, nonce protocol.Nonce) (x exchange) {
	addr := m.agents[idx].addr
	x.agent = idx
	x.s.Agent = addr
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()

	_, m0 := m.readClocks()
	conn, err := m.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		x.err = protocol.Wrap(protocol.ReasonConnect, "dial "+addr, err)
		return x
	}
	defer conn.Close()
	// The exchange deadline covers the write, the line and the EOF after it;
	// cancelling ctx (Close) cuts it short through the same deadline.
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		x.err = ioReason("setting the exchange deadline", err)
		return x
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()

	var req [protocol.RequestLen]byte
	if _, err := conn.Write(protocol.AppendRequest(req[:0], protocol.Request{Nonce: nonce})); err != nil {
		x.err = ioReason("writing the request", err)
		return x
	}
	lr := protocol.NewLineReader(conn)
	line, err := lr.ReadLine()
	w1, m1 := m.readClocks() // SPEC §1.1: timestamps when the LF arrives
	x.w1, x.m1 = w1, m1
	x.s.AtUnixMs = w1 / 1e6
	if err != nil {
		x.err = asProtocolError(err, protocol.ReasonIO)
		return x
	}
	resp, err := protocol.ParseVerify(line, nonce, m.keys)
	if err != nil {
		x.err = asProtocolError(err, protocol.ReasonFormat)
		if x.err.Reason == protocol.ReasonMAC && m.devHint != nil {
			if _, derr := protocol.ParseVerify(line, nonce, m.devHint); derr == nil {
				x.err = protocol.Wrap(protocol.ReasonMAC, "MAC does not verify under the secret, but is valid under dev_key: the agent is a "+
					"--dev development reference; point clock.agent_addr at a real agent, or (development only) set clock.dev_reference: true", x.err)
			}
		}
		return x
	}
	if err := lr.ExpectEOF(); err != nil {
		x.err = asProtocolError(err, protocol.ReasonIO)
		return x
	}
	rtt := m1 - m0
	if rtt < 0 { // a monotonic clock never goes back; be safe anyway
		rtt = 0
	}
	x.err = m.checkSample(&x.s, &resp, uint64(rtt), w1)
	return x
}

// aLongTimeAgo is a deadline in the past, to abort blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// checkSample fills s and applies the sample checks of SPEC §3.3 in their
// listed order: unsynced, source_age, uncertainty (including synced=1 with
// u=0), rtt, offset (including arithmetic overflow), bound.
func (m *Monitor) checkSample(s *SampleStatus, r *protocol.Response, rttNs uint64, w1 int64) *protocol.Error {
	s.ReferenceUnixMs = r.ReferenceUnixMs
	s.UncertaintyMs = r.UncertaintyMs
	s.SourceAgeMs = r.SourceAgeMs
	eb, rttMs, offMs, ok := protocol.ErrorBound(protocol.Sample{
		RTTNs: rttNs, UncertaintyMs: r.UncertaintyMs, W1UnixNs: w1, ReferenceUnixMs: r.ReferenceUnixMs,
	})
	s.RTTMs, s.OffsetMs, s.ErrorBoundMs = rttMs, offMs, eb
	c := &m.cfg
	switch {
	case !r.Synced:
		return protocol.Errorf(protocol.ReasonUnsynced, "agent reports synced=0")
	case r.SourceAgeMs > c.MaxSourceAgeMs:
		return protocol.Errorf(protocol.ReasonSourceAge, "source_age_ms %d > max_source_age_ms %d", r.SourceAgeMs, c.MaxSourceAgeMs)
	case r.UncertaintyMs == 0:
		return protocol.Errorf(protocol.ReasonUncertainty, "synced=1 with uncertainty_ms 0 (an honest bound is never zero)")
	case r.UncertaintyMs > c.MaxUncertaintyMs:
		return protocol.Errorf(protocol.ReasonUncertainty, "uncertainty_ms %d > max_uncertainty_ms %d", r.UncertaintyMs, c.MaxUncertaintyMs)
	case rttMs > c.MaxRTTMs:
		return protocol.Errorf(protocol.ReasonRTT, "rtt %d ms > max_rtt_ms %d", rttMs, c.MaxRTTMs)
	case !ok:
		return protocol.Errorf(protocol.ReasonOffset, "|w1 − R| or the error bound overflows u64 (R=%d)", r.ReferenceUnixMs)
	case offMs > c.MaxOffsetMs:
		return protocol.Errorf(protocol.ReasonOffset, "|w1 − R| = %d ms > max_offset_ms %d", offMs, c.MaxOffsetMs)
	case eb > m.halfDelta:
		return protocol.Errorf(protocol.ReasonBound, "error bound %d ms > Δ/2 = %d ms", eb, m.halfDelta)
	}
	return nil
}

// round probes every agent once, concurrently, each under its own deadline,
// and returns the exchanges in configuration order. Nonces are drawn here,
// one fresh nonce per exchange, so the random source is read by one goroutine.
func (m *Monitor) round(ctx context.Context) ([]exchange, error) {
	nonces := make([]protocol.Nonce, len(m.agents))
	for i := range nonces {
		n, err := protocol.NonceFrom(m.rand)
		if err != nil {
			return nil, err
		}
		nonces[i] = n
	}
	out := make([]exchange, len(m.agents))
	if len(m.agents) == 1 {
		out[0] = m.exchangeOne(ctx, 0, nonces[0])
		return out, nil
	}
	var wg sync.WaitGroup
	for i := range m.agents {
		wg.Go(func() {
			x := m.exchangeOne(ctx, i, nonces[i])
			if x.err != nil && !x.unreachable() && ctx.Err() == nil {
				// SPEC §3.1: a lying agent fails the node at once, not
				// when the slowest agent of the round has answered.
				m.mu.Lock()
				e, first := m.latchLocked(x.err, m.agents[i].addr)
				m.mu.Unlock()
				if first {
					m.afterFail(e)
				}
			}
			out[i] = x
		})
	}
	wg.Wait()
	return out, nil
}
