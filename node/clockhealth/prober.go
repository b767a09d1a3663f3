package clockhealth

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// class is what one exchange means for its round (SPEC §3.1).
type class uint8

const (
	classOK         class = iota // within every limit: the burst keeps it and stops
	classSlow                    // rtt over max_rtt_ms, or offset/bound over only by the exchange's delay: tried again
	classIncomplete              // connect, timeout, io: tried again
	classFatal                   // invalid, dishonest or out of limits whatever the delay: fails the node at once
)

// exchange is the outcome of one TCKCLK/2 exchange with one agent.
type exchange struct {
	agent int // index into Monitor.agents
	class class
	err   *protocol.Error // nil exactly when class is classOK
	s     SampleStatus
	w1    int64  // wall ns when the LF arrived
	m1    int64  // monotonic ns when the LF arrived (t_sample)
	eNs   uint64 // SPEC §3.1 e_ns, before its rounding (set once the sample was checked), plus resNs
	offNs uint64 // its |w1 − R×10^6| term
	rttNs uint64 // m1 − m0; for an incomplete exchange, the time it took to fail
	resNs uint64 // kernel stamps: |(w_read − w0) − (m_read − m0)|, counted in eNs (rxstamp.go)
	rx    string // RxSourceKernel or RxSourceUser once the LF arrived; "" before
	rxWhy string // with kernel stamps on, why the exchange used user stamps
	phase phases // kernel stamps only: where the exchange's time went
}

// phases split one exchange's time (monotonic ns; -1: not measured): w0 →
// the connection established → the request written → the LF's segment
// arrived (the kernel's stamp) → the node's read returned it. Taken only
// with kernel stamps (Options.KernelRxTimestamps), for the debug line
// "clock health: exchange timing".
type phases struct {
	connect, write, arrive, read int64
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

// exchangeOne runs one exchange (SPEC §1.1, §3.1) under its own deadline
// (the probe timeout, cut short by the round's deadline in ctx), applies the
// sample checks of SPEC §3.3 in order and classifies it. It reads at most
// 257 bytes of line plus one byte while waiting for EOF.
func (m *Monitor) exchangeOne(ctx context.Context, idx int, ch *protocol.Challenge) (x exchange) {
	addr := m.agents[idx].addr
	x.agent = idx
	x.s.Agent = addr
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()

	w0, m0 := m.readClocks()
	x.phase = phases{-1, -1, -1, -1}
	x.err = m.converse(ctx, &x, addr, ch, w0, m0)
	switch {
	case x.err == nil:
		x.class = classOK
	case x.class == classSlow:
	case incomplete(x.err.Reason):
		x.class = classIncomplete
		x.rttNs = uint64(max(0, m.mono.NowNs()-m0))
	default:
		x.class = classFatal
	}
	return x
}

// converse is exchangeOne's I/O and checks; a slow sample sets x.class.
func (m *Monitor) converse(ctx context.Context, x *exchange, addr string, ch *protocol.Challenge, w0, m0 int64) *protocol.Error {
	conn, err := m.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return protocol.Wrap(protocol.ReasonConnect, "dial "+addr, err)
	}
	defer conn.Close()
	// The exchange deadline covers the write, the line and the EOF after it;
	// cancelling ctx (Close) cuts it short through the same deadline.
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return ioReason("setting the exchange deadline", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()

	var from io.Reader = conn
	var sc stampedConn
	if m.kernelRx {
		x.phase.connect = m.mono.NowNs() - m0
		if c, ok := newStampedConn(conn); ok {
			from, sc = c, c
		}
	}
	var req [protocol.RequestLen]byte
	if _, err := conn.Write(ch.AppendRequest(req[:0])); err != nil {
		return ioReason("writing the request", err)
	}
	if m.kernelRx {
		x.phase.write = m.mono.NowNs() - m0 - x.phase.connect
	}
	if m.beforeRead != nil {
		m.beforeRead()
	}
	lr := protocol.NewLineReader(from)
	line, err := lr.ReadLine()
	m.stampLF(x, sc, err == nil, w0, m0) // SPEC §1.1: timestamps when the LF arrives
	x.s.AtUnixMs = x.w1 / 1e6
	if err != nil {
		return asProtocolError(err, protocol.ReasonIO)
	}
	resp, err := ch.ParseVerify(line, m.keys)
	if err != nil {
		perr := asProtocolError(err, protocol.ReasonFormat)
		if perr.Reason == protocol.ReasonMAC && m.devHint != nil {
			if _, derr := ch.ParseVerify(line, m.devHint); derr == nil {
				perr = protocol.Wrap(protocol.ReasonMAC, "MAC does not verify under the secret, but is valid under dev_key: the agent is a "+
					"--dev development reference; point clock.agent_addr at a real agent, or (development only) set clock.dev_reference: true", perr)
			}
		}
		return perr
	}
	if err := lr.ExpectEOF(); err != nil {
		return asProtocolError(err, protocol.ReasonIO)
	}
	x.rttNs = uint64(max(0, x.m1-m0)) // a monotonic clock never goes back; be safe anyway
	return m.checkSample(x, &resp)
}

// stampLF sets x's w1 and m1 right after the read that returned the LF
// (lf) or failed: the user-space reading, or, with the kernel's receive
// timestamp of the LF's segment from sc, that stamp and the monotonic time
// it maps to (kernelSample, rxstamp.go).
func (m *Monitor) stampLF(x *exchange, sc stampedConn, lf bool, w0, m0 int64) {
	wRead, mRead := m.readClocks()
	x.w1, x.m1 = wRead, mRead
	if !lf {
		return
	}
	x.rx = RxSourceUser
	if sc == nil {
		return
	}
	wK := sc.LastStamp()
	w1, m1, res, ok := kernelSample(w0, m0, wRead, mRead, wK)
	switch {
	case wK == 0:
		x.rxWhy = "no kernel stamp"
	case !ok && (wK < w0 || wK > wRead):
		x.rxWhy = "kernel stamp outside the exchange"
	case !ok:
		x.rxWhy = "wall clock stepped during the exchange"
	}
	if ok {
		// The answer can arrive before the clock read after the write.
		x.phase.arrive = max(0, m1-m0-x.phase.connect-x.phase.write)
		x.phase.read = mRead - m1
		x.w1, x.m1, x.resNs, x.rx = w1, m1, res, RxSourceKernel
	}
}

// incomplete reports the reasons of an exchange that could not complete
// (SPEC §3.1): tried again within the burst; from several agents, counted
// and shown, failing the round only when no agent answers.
func incomplete(r protocol.Reason) bool {
	switch r {
	case protocol.ReasonConnect, protocol.ReasonTimeout, protocol.ReasonIO:
		return true
	}
	return false
}

// aLongTimeAgo is a deadline in the past, to abort blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// checkSample fills x's sample and applies the sample checks of SPEC §3.3:
// unsynced, source_age, uncertainty (including synced=1 with u=0) fail at
// once; then an offset or bound over its limit even with the exchange's
// delay taken out (|w1 − R| − rtt > max_offset_ms; error_bound − 2×rtt >
// Δ/2, SPEC §3.1) fails at once too, as does arithmetic overflow (offset);
// what is left over a limit — rtt, offset, bound, in that order — is slow
// (x.class = classSlow) and tried again.
func (m *Monitor) checkSample(x *exchange, r *protocol.Response) *protocol.Error {
	s := &x.s
	s.ReferenceUnixMs = r.ReferenceUnixMs
	s.UncertaintyMs = r.UncertaintyMs
	s.SourceAgeMs = r.SourceAgeMs
	eNs, offNs, ok := protocol.SampleError(protocol.Sample{RTTNs: x.rttNs, UncertaintyMs: r.UncertaintyMs, W1UnixNs: x.w1, ReferenceUnixMs: r.ReferenceUnixMs})
	if ok && x.resNs > 0 {
		eNs, ok = protocol.AddSat(eNs, x.resNs)
	}
	rttMs, offMs, eb := protocol.CeilMs(x.rttNs), protocol.CeilMs(offNs), protocol.CeilMs(eNs)
	x.eNs, x.offNs = eNs, offNs
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
	case !ok:
		return protocol.Errorf(protocol.ReasonOffset, "|w1 − R| or the error bound overflows u64 (R=%d)", r.ReferenceUnixMs)
	case subSat(offMs, rttMs) > c.MaxOffsetMs:
		return protocol.Errorf(protocol.ReasonOffset, "|w1 − R| = %d ms > max_offset_ms %d, even with the exchange's rtt (%d ms) taken out", offMs, c.MaxOffsetMs, rttMs)
	case subSat(eb, 2*rttMs) > m.halfDelta:
		return protocol.Errorf(protocol.ReasonBound, "error bound %d ms > Δ/2 = %d ms, even with twice the exchange's rtt (%d ms) taken out", eb, m.halfDelta, rttMs)
	}
	x.class = classSlow
	switch {
	case rttMs > c.MaxRTTMs:
		return protocol.Errorf(protocol.ReasonRTT, "rtt %d ms > max_rtt_ms %d", rttMs, c.MaxRTTMs)
	case offMs > c.MaxOffsetMs:
		return protocol.Errorf(protocol.ReasonOffset, "|w1 − R| = %d ms > max_offset_ms %d, within the exchange's rtt (%d ms) of it", offMs, c.MaxOffsetMs, rttMs)
	case eb > m.halfDelta:
		return protocol.Errorf(protocol.ReasonBound, "error bound %d ms > Δ/2 = %d ms, within twice the exchange's rtt (%d ms) of it", eb, m.halfDelta, rttMs)
	}
	x.class = classOK
	return nil
}

// subSat is a − b, or 0 when b > a.
func subSat(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// burst runs up to clock.burst exchanges with agent idx, one after another,
// each with a fresh nonce (SPEC §3.1). It stops at the first sample within
// every limit, at the first fatal one, when ctx ends (the round's deadline),
// or — after the first exchange — once the round is decided (decided: an
// agent gave a sample within every limit, or a fatal answer). With several
// agents a fatal exchange fails the node here, at once, not when the
// round's slowest agent is done.
func (m *Monitor) burst(ctx context.Context, idx int, decided *atomic.Bool) ([]exchange, error) {
	xs := make([]exchange, 0, m.cfg.Burst)
	for i := uint64(0); i < m.cfg.Burst; i++ {
		if i > 0 && (ctx.Err() != nil || decided.Load()) {
			break
		}
		ch, err := m.challenge()
		if err != nil {
			return xs, err
		}
		x := m.exchangeOne(ctx, idx, &ch)
		xs = append(xs, x)
		switch x.class {
		case classOK:
			decided.Store(true)
			return xs, nil
		case classFatal:
			decided.Store(true)
			if len(m.agents) > 1 && ctx.Err() == nil {
				m.mu.Lock()
				e, first := m.latchLocked(x.err, m.agents[idx].addr)
				m.mu.Unlock()
				if first {
					m.afterFail(e)
				}
			}
			return xs, nil
		}
	}
	return xs, nil
}

// challenge draws a fresh 16-byte nonce (SPEC §1.1) from the nonce source,
// one reader at a time, held with its text: the request is written from it
// and the response's nonce field compared with it.
func (m *Monitor) challenge() (protocol.Challenge, error) {
	m.randMu.Lock()
	n, err := protocol.NonceFrom(m.rand)
	m.randMu.Unlock()
	if err != nil {
		return protocol.Challenge{}, err
	}
	return protocol.NewChallenge(n), nil
}

// round runs one probe round: a burst per agent, the agents in parallel,
// every exchange within the round's deadline (budget from now). It returns
// each agent's exchanges in configuration order, and whether the deadline
// ended the round.
func (m *Monitor) round(ctx context.Context, budget time.Duration) (bursts [][]exchange, expired bool, err error) {
	deadline := time.Now().Add(budget)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	bursts = make([][]exchange, len(m.agents))
	errs := make([]error, len(m.agents))
	var decided atomic.Bool
	if len(m.agents) == 1 {
		bursts[0], errs[0] = m.burst(ctx, 0, &decided)
	} else {
		var wg sync.WaitGroup
		for i := range m.agents {
			wg.Go(func() { bursts[i], errs[i] = m.burst(ctx, i, &decided) })
		}
		wg.Wait()
	}
	// By the clock, not ctx.Err(): an exchange cut at the deadline can
	// return a moment before ctx's own timer marks it done.
	return bursts, !time.Now().Before(deadline), errors.Join(errs...)
}
