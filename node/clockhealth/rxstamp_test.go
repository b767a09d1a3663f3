package clockhealth_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// SPEC §1.1, §3.2: when the kernel's receive timestamp may stand for w1,
// and the m1 it maps to. The exchange: w0 at wall 1000 s, m0 at 10 s, read
// back 300 ms later on both clocks.
func TestKernelSampleRules(t *testing.T) {
	const (
		w0 = int64(1000 * time.Second)
		m0 = int64(10 * time.Second)
		ex = int64(300 * time.Millisecond)
	)
	cases := []struct {
		name         string
		wRead, mRead int64 // after the read
		wK           int64 // the kernel's stamp
		ok           bool
		m1           int64
		residual     uint64
	}{
		{"no stamp", w0 + ex, m0 + ex, 0, false, 0, 0},
		{"LF 100 ms in: m1 100 ms after m0", w0 + ex, m0 + ex, w0 + 100e6, true, m0 + 100e6, 0},
		{"stamp at w0", w0 + ex, m0 + ex, w0, true, m0, 0},
		{"stamp at the read", w0 + ex, m0 + ex, w0 + ex, true, m0 + ex, 0},
		{"stamp before w0", w0 + ex, m0 + ex, w0 - 1, false, 0, 0},
		{"stamp after the read", w0 + ex, m0 + ex, w0 + ex + 1, false, 0, 0},
		{"another clock's stamp", w0 + ex, m0 + ex, w0 + int64(time.Hour), false, 0, 0},
		{"wall ran 1 ms ahead: not a step, counted", w0 + ex + 1e6, m0 + ex, w0 + 100e6, true, m0 + ex - (ex + 1e6 - 100e6), 1e6},
		{"wall ran 1 ms behind: not a step, counted", w0 + ex - 1e6, m0 + ex, w0 + 100e6, true, m0 + ex - (ex - 1e6 - 100e6), 1e6},
		{"wall stepped 1 ms + 1 ns ahead", w0 + ex + 1e6 + 1, m0 + ex, w0 + 100e6, false, 0, 0},
		{"wall stepped 1 ms + 1 ns back", w0 + ex - 1e6 - 1, m0 + ex, w0 + 100e6, false, 0, 0},
		{"wall stepped 50 ms ahead", w0 + ex + 50e6, m0 + ex, w0 + 100e6, false, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w1, m1, res, ok := clockhealth.KernelSample(w0, m0, tc.wRead, tc.mRead, tc.wK)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if ok && (w1 != tc.wK || m1 != tc.m1 || res != tc.residual) {
				t.Fatalf("w1 %d m1 %d residual %d, want %d %d %d", w1, m1, res, tc.wK, tc.m1, tc.residual)
			}
		})
	}
}

// SPEC §1.1 with kernel receive timestamps on: the answer is read with
// recvmsg, and the line reader still enforces the framing exactly — 257
// bytes without LF is size, a byte after the LF or EOF before it is
// format, no EOF in time is timeout, a reset is io — and every shared
// invalid vector fails with its reason.
func TestKernelRxFramingUnchanged(t *testing.T) {
	var a *clockhealthtest.Agent
	clk := clockhealthtest.NewClock(t0)
	signed := func(n protocol.Nonce) []byte { return a.Sign(n, uint64(clk.WallNs()/1e6), 3, true, 1) }
	cases := []struct {
		name  string
		reply func(req protocol.Request) clockhealthtest.Reply
		want  protocol.Reason
	}{
		{"257 bytes without LF: size", func(protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: bytes.Repeat([]byte("A"), 257), Hold: true}
		}, protocol.ReasonSize},
		{"an endless line: size", func(protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: bytes.Repeat([]byte("A"), 1<<20), Hold: true}
		}, protocol.ReasonSize},
		{"a byte after the LF: format", func(req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: append(signed(req.Nonce), 'x')}
		}, protocol.ReasonFormat},
		{"EOF before the LF: format", func(req protocol.Request) clockhealthtest.Reply {
			l := signed(req.Nonce)
			return clockhealthtest.Reply{Bytes: l[:len(l)-1]}
		}, protocol.ReasonFormat},
		{"closed before any byte: format", func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{} }, protocol.ReasonFormat},
		{"valid line but no EOF: timeout", func(req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: signed(req.Nonce), Hold: true}
		}, protocol.ReasonTimeout},
		{"half a line then silence: timeout", func(protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: []byte("TCKCLK 2 "), Hold: true}
		}, protocol.ReasonTimeout},
		{"reset mid-line: io", func(protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: []byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 17672"), Reset: true}
		}, protocol.ReasonIO},
	}
	kernelRx := func(o *clockhealth.Options) { o.KernelRxTimestamps = true; o.Config.Burst = 1 }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, tc.reply, kernelRx)
			a = hs.agent
			hs.wantFailed(hs.mon.Probe(t.Context()), tc.want)
		})
	}
	for _, iv := range loadVectors(t).InvalidResponses {
		t.Run("invalid/"+iv.Name, func(t *testing.T) {
			line := []byte(iv.Line + "\n")
			hs := newHarness(t, func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{Bytes: line} },
				func(o *clockhealth.Options) { kernelRx(o); o.Rand = fixedNonce(t, iv.ExpectNonce) })
			hs.wantFailed(hs.mon.Probe(t.Context()), protocol.Reason(iv.Reason))
		})
	}
}

// Kernel receive timestamps are CLOCK_REALTIME: with any other wall clock
// (here the manual clock of 2026-01-01) no stamp falls within its exchange,
// so the sample is exactly the one user-space stamps give (rtt 0, offset
// 0, bound 4 on the manual clock) and clock_rx_timestamps_total counts it
// as user.
func TestKernelRxWithManualClockKeepsUserStamps(t *testing.T) {
	hs := newHarness(t, nil, func(o *clockhealth.Options) { o.KernelRxTimestamps = true })
	hs.pass(clockhealth.ClockCheckSamples)
	ls := hs.mon.Status().LastSample
	if ls == nil || ls.RTTMs != 0 || ls.OffsetMs != 0 || ls.ErrorBoundMs != 4 || ls.AtUnixMs != t0.UnixMilli() {
		t.Fatalf("last sample %+v", ls)
	}
	if v, _ := metric(t, hs.reg, "clock_rx_timestamps_total", "source", clockhealth.RxSourceUser); v != 3 {
		t.Fatalf("clock_rx_timestamps_total{user} = %v, want 3", v)
	}
	if v, ok := metric(t, hs.reg, "clock_rx_timestamps_total", "source", clockhealth.RxSourceKernel); !ok || v != 0 {
		t.Fatalf("clock_rx_timestamps_total{kernel} = %v (present %v), want 0", v, ok)
	}
}
