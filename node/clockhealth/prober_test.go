package clockhealth_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// SPEC §3.1, §3.5: healthy samples, the error bound and clock_check.
func TestClockCheckThreeHealthySamples(t *testing.T) {
	hs := newHarness(t, nil, nil)
	for i := 1; i <= clockhealth.ClockCheckSamples; i++ {
		if got := hs.mon.Status().Stage; got != clockhealth.StageClockCheck {
			t.Fatalf("before round %d: stage %s", i, got)
		}
		if err := hs.mon.Check(); !errors.Is(err, clockhealth.ErrClockCheck) {
			t.Fatalf("before round %d: Check = %v, want ErrClockCheck", i, err)
		}
		if err := hs.mon.Check(); !errors.Is(err, clockhealth.ErrClockCheck) {
			t.Fatalf("Check before clock_check: %v", err)
		}
		err := hs.mon.Probe(t.Context())
		if i < clockhealth.ClockCheckSamples && !errors.Is(err, clockhealth.ErrClockCheck) && err != nil {
			t.Fatal(err)
		}
		hs.clk.Advance(time.Second)
	}
	if err := hs.mon.ClockCheck(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := hs.mon.Check(); err != nil {
		t.Fatal(err)
	}
	st := hs.mon.Status()
	if st.Stage != clockhealth.StageChecked || !st.Healthy || !st.ClockCheckPassed || st.HealthyRounds != 3 || st.Mode != "agent" {
		t.Fatalf("status %+v", st)
	}
	ls := st.LastSample
	// Sampled at t0+2s with R = w1: rtt 0, u 3, offset 0, bound 4; one
	// second later the running bound adds ceil(500 ppm × 1 s) = 1 ms.
	if ls == nil || ls.Agent != hs.agent.Addr() || ls.UncertaintyMs != 3 || ls.RTTMs != 0 || ls.OffsetMs != 0 ||
		ls.ErrorBoundMs != 4 || ls.SourceAgeMs != 100 || ls.ReferenceUnixMs != uint64(t0.Add(2*time.Second).UnixMilli()) ||
		ls.AtUnixMs != t0.Add(2*time.Second).UnixMilli() {
		t.Fatalf("last sample %+v", ls)
	}
	if st.BoundMs != 5 || st.BoundLimitMs != 250 || st.SinceSampleMs != 1000 {
		t.Fatalf("bound %d limit %d since %d", st.BoundMs, st.BoundLimitMs, st.SinceSampleMs)
	}
	if len(st.Agents) != 1 || st.Agents[0].OK != 3 || st.Agents[0].LastResult != "ok" {
		t.Fatalf("agents %+v", st.Agents)
	}
	if v, _ := metric(t, hs.reg, "clock_samples_total", "result", "ok"); v != 3 {
		t.Fatalf("clock_samples_total{ok} = %v", v)
	}
	if v, _ := metric(t, hs.reg, "clock_health_state", "", ""); v != clockhealth.StateHealthy {
		t.Fatalf("clock_health_state = %v", v)
	}
}

// SPEC §1.1: each request carries a fresh nonce.
func TestFreshNoncePerExchange(t *testing.T) {
	var mu sync.Mutex
	seen := map[protocol.Nonce]bool{}
	var a *clockhealthtest.Agent
	clk := clockhealthtest.NewClock(t0)
	h := func(req protocol.Request) clockhealthtest.Reply {
		mu.Lock()
		seen[req.Nonce] = true
		mu.Unlock()
		return clockhealthtest.Reply{Bytes: a.Sign(req.Nonce, uint64(clk.WallNs()/1e6), 3, true, 1)}
	}
	hs := newHarness(t, h, func(o *clockhealth.Options) { o.Wall, o.Mono = clk, clk })
	a = hs.agent
	hs.pass(5)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 {
		t.Fatalf("%d distinct nonces in 5 exchanges", len(seen))
	}
}

// SPEC §3.3-1: connect, timeout, I/O errors each fail the node.
func TestUnreachableAgent(t *testing.T) {
	cases := []struct {
		name string
		h    func(a **clockhealthtest.Agent, clk *clockhealthtest.Clock) clockhealthtest.Handler
		want protocol.Reason
	}{
		{"silent agent: response timeout", func(**clockhealthtest.Agent, *clockhealthtest.Clock) clockhealthtest.Handler {
			return func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{Hold: true} }
		}, protocol.ReasonTimeout},
		{"half a line then silence: timeout", func(**clockhealthtest.Agent, *clockhealthtest.Clock) clockhealthtest.Handler {
			return func(protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Bytes: []byte("TCKCLK 2 "), Hold: true}
			}
		}, protocol.ReasonTimeout},
		{"valid line but no EOF: timeout", func(a **clockhealthtest.Agent, clk *clockhealthtest.Clock) clockhealthtest.Handler {
			return func(req protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Bytes: (*a).Sign(req.Nonce, uint64(clk.WallNs()/1e6), 3, true, 1), Hold: true}
			}
		}, protocol.ReasonTimeout},
		{"connection reset mid-line: io", func(**clockhealthtest.Agent, *clockhealthtest.Clock) clockhealthtest.Handler {
			return func(protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Bytes: []byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 17672"), Reset: true}
			}
		}, protocol.ReasonIO},
		{"closed before any byte: format (EOF before LF)", func(**clockhealthtest.Agent, *clockhealthtest.Clock) clockhealthtest.Handler {
			return func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{} }
		}, protocol.ReasonFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hs *harness
			var a *clockhealthtest.Agent
			clk := clockhealthtest.NewClock(t0)
			hs = newHarness(t, tc.h(&a, clk), func(o *clockhealth.Options) { o.Wall, o.Mono = clk, clk })
			a = hs.agent
			start := time.Now()
			err := hs.mon.Probe(t.Context())
			hs.wantFailed(err, tc.want)
			// The exchange deadline is the probe timeout (300 ms), not more.
			if el := time.Since(start); el > 3*time.Second {
				t.Fatalf("round took %v", el)
			}
		})
	}
	t.Run("connection refused: connect", func(t *testing.T) {
		hs := newHarness(t, nil, func(o *clockhealth.Options) { o.Config.AgentAddrs = []string{closedAddr(t)} })
		hs.wantFailed(hs.mon.Probe(t.Context()), protocol.ReasonConnect)
	})
}

// SPEC §1.1: reads are bounded; an endless line is a size violation.
func TestEndlessLineIsSize(t *testing.T) {
	hs := newHarness(t, func(protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: bytes.Repeat([]byte("A"), 1<<20), Hold: true}
	}, nil)
	hs.wantFailed(hs.mon.Probe(t.Context()), protocol.ReasonSize)
}

// SPEC §1.1: a byte after the response LF is a format violation.
func TestTrailingByteIsFormat(t *testing.T) {
	var a *clockhealthtest.Agent
	clk := clockhealthtest.NewClock(t0)
	hs := newHarness(t, func(req protocol.Request) clockhealthtest.Reply {
		line := a.Sign(req.Nonce, uint64(clk.WallNs()/1e6), 3, true, 1)
		return clockhealthtest.Reply{Bytes: append(line, 'x')}
	}, func(o *clockhealth.Options) { o.Wall, o.Mono = clk, clk })
	a = hs.agent
	hs.wantFailed(hs.mon.Probe(t.Context()), protocol.ReasonFormat)
}

// SPEC §3.3-2, §1.5: every invalid response of the shared vectors fails the
// node with the vector's reason; the valid ones give the sample reason the
// node's limits imply.
func TestVectorsThroughProber(t *testing.T) {
	v := loadVectors(t)
	for _, iv := range v.InvalidResponses {
		t.Run("invalid/"+iv.Name, func(t *testing.T) {
			line := []byte(iv.Line + "\n")
			hs := newHarness(t, func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{Bytes: line} },
				func(o *clockhealth.Options) { o.Rand = fixedNonce(t, iv.ExpectNonce) })
			hs.wantFailed(hs.mon.Probe(t.Context()), protocol.Reason(iv.Reason))
		})
	}
	want := map[string]protocol.Reason{
		"all-zero-nonce": protocol.ReasonUnsynced,
		"typical-synced": "", // healthy when the local clock reads R
		"unsynced":       protocol.ReasonUnsynced,
		"u64-max-fields": protocol.ReasonSourceAge,
		"small-values":   protocol.ReasonOffset, // R = 1 ms after the epoch
	}
	for _, vv := range v.Valid {
		t.Run("valid/"+vv.Name, func(t *testing.T) {
			r, ok := want[vv.Name]
			if !ok {
				t.Fatalf("vector %s has no expectation here", vv.Name)
			}
			ref, err := strconv.ParseUint(vv.ReferenceUnixMs, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			line := []byte(vv.ResponseLine + "\n")
			hs := newHarness(t, func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{Bytes: line} },
				func(o *clockhealth.Options) {
					o.Rand = fixedNonce(t, vv.Nonce)
					if r == "" {
						c := clockhealthtest.NewClock(time.UnixMilli(int64(ref)))
						o.Wall, o.Mono = c, c
					}
				})
			err = hs.mon.Probe(t.Context())
			if r == "" {
				if err != nil && !errors.Is(err, clockhealth.ErrClockCheck) {
					t.Fatal(err)
				}
				return
			}
			hs.wantFailed(err, r)
		})
	}
}

// signedBy answers healthy samples with fields chosen by f, signed by the
// harness agent.
type fields struct {
	ref    func(wallMs uint64) uint64
	unc    uint64
	synced bool
	age    uint64
	rtt    time.Duration // advance the manual clocks before answering
}

func answer(hs **harness, f fields) clockhealthtest.Handler {
	return func(req protocol.Request) clockhealthtest.Reply {
		h := *hs
		if f.rtt > 0 {
			h.clk.Advance(f.rtt)
		}
		ref := uint64(h.clk.WallNs() / 1e6)
		if f.ref != nil {
			ref = f.ref(ref)
		}
		return clockhealthtest.Reply{Bytes: h.agent.Sign(req.Nonce, ref, f.unc, f.synced, f.age)}
	}
}

// SPEC §3.1, §3.3-3: each sample check at its exact threshold (Δ = 500 ms:
// max_rtt, max_uncertainty, max_offset = 125 ms; max_source_age 120000 ms).
func TestSampleChecksAtThreshold(t *testing.T) {
	plus := func(d uint64) func(uint64) uint64 { return func(w uint64) uint64 { return w + d } }
	minus := func(d uint64) func(uint64) uint64 { return func(w uint64) uint64 { return w - d } }
	ok := fields{unc: 3, synced: true, age: 100}
	with := func(edit func(*fields)) fields { f := ok; edit(&f); return f }
	cases := []struct {
		name      string
		f         fields
		wallShift time.Duration // sub-ms wall offset of the local clock
		want      protocol.Reason
	}{
		{"synced=0", with(func(f *fields) { f.synced = false }), 0, protocol.ReasonUnsynced},
		{"synced=0 beats every later check", fields{synced: false, unc: 0, age: 1 << 40}, 0, protocol.ReasonUnsynced},
		{"synced=1 with u=0", with(func(f *fields) { f.unc = 0 }), 0, protocol.ReasonUncertainty},
		{"source_age = max passes", with(func(f *fields) { f.age = 120000 }), 0, ""},
		{"source_age = max+1", with(func(f *fields) { f.age = 120001 }), 0, protocol.ReasonSourceAge},
		{"source_age before uncertainty", with(func(f *fields) { f.age = 120001; f.unc = 0 }), 0, protocol.ReasonSourceAge},
		{"u = max passes", with(func(f *fields) { f.unc = 125 }), 0, ""},
		{"u = max+1", with(func(f *fields) { f.unc = 126 }), 0, protocol.ReasonUncertainty},
		{"rtt = max passes", with(func(f *fields) { f.rtt = 125 * time.Millisecond }), 0, ""},
		{"rtt = max + 1 ns", with(func(f *fields) { f.rtt = 125*time.Millisecond + 1 }), 0, protocol.ReasonRTT},
		{"rtt before offset", with(func(f *fields) { f.rtt = 126 * time.Millisecond; f.ref = minus(200) }), 0, protocol.ReasonRTT},
		{"offset = max behind passes", with(func(f *fields) { f.ref = minus(125) }), 0, ""},
		{"offset = max ahead passes", with(func(f *fields) { f.ref = plus(125) }), 0, ""},
		{"offset = max behind + 1 ns", with(func(f *fields) { f.ref = minus(125) }), 1, protocol.ReasonOffset},
		{"offset = max+1 ahead", with(func(f *fields) { f.ref = plus(126) }), 0, protocol.ReasonOffset},
		{"offset overflows u64", with(func(f *fields) { f.ref = func(uint64) uint64 { return 1<<64 - 1 } }), 0, protocol.ReasonOffset},
		{"bound = Δ/2 passes", with(func(f *fields) { f.unc = 125; f.ref = minus(124) }), 0, ""},
		{"bound = Δ/2 + 1", with(func(f *fields) { f.unc = 125; f.ref = minus(125) }), 0, protocol.ReasonBound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hs *harness
			hs = newHarness(t, answer(&hs, tc.f), nil)
			hs.clk.StepWall(tc.wallShift)
			err := hs.mon.Probe(t.Context())
			if tc.want == "" {
				if err != nil && !errors.Is(err, clockhealth.ErrClockCheck) {
					t.Fatalf("want healthy, got %v", err)
				}
				return
			}
			hs.wantFailed(err, tc.want)
		})
	}
}

// SPEC §3.3-1, §3.1: an exchange cut short by the caller's context (Close)
// counts for nothing: no FAILED on shutdown.
func TestCancelledRoundDoesNotFail(t *testing.T) {
	got, h := holdAndSignal()
	hs := newHarness(t, h, func(o *clockhealth.Options) { o.Config.ProbeTimeoutMs = 1000 })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- hs.mon.Probe(ctx) }()
	select {
	case <-got:
	case err := <-done:
		t.Fatalf("round ended before the agent saw it: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled round: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled round did not return")
	}
	if err := hs.mon.Err(); err != nil {
		t.Fatalf("cancelled round latched: %v", err)
	}
}

// SPEC §1.4: rotation — a MAC valid under secret_file or next_secret_file
// passes, any other secret fails with mac.
func TestSecretRotation(t *testing.T) {
	cur := []byte(strings.Repeat("c", 32))
	next := []byte(strings.Repeat("n", 40))
	other := []byte(strings.Repeat("o", 32))
	for _, tc := range []struct {
		name string
		key  []byte
		want protocol.Reason
	}{{"current", cur, ""}, {"next", next, ""}, {"third", other, protocol.ReasonMAC}} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clockhealthtest.NewClock(t0)
			key := protocol.NewKey(tc.key)
			hs := newHarness(t, func(req protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Bytes: clockhealthtest.SignedLine(key, req.Nonce, uint64(clk.WallNs()/1e6), 3, true, 1)}
			}, func(o *clockhealth.Options) {
				o.Wall, o.Mono = clk, clk
				o.Secret, o.NextSecret = cur, next
			})
			if tc.want == "" {
				hs.pass(3)
				if err := hs.mon.Check(); err != nil {
					t.Fatal(err)
				}
				return
			}
			hs.wantFailed(hs.mon.Probe(t.Context()), tc.want)
		})
	}
}

// SPEC §1.3, §2.2: with dev_reference only dev_key samples pass, and a real
// agent's sample fails; without it a dev agent's sample fails. Status and
// metrics label the dev reference.
func TestDevReference(t *testing.T) {
	secret := []byte(vectorSecret)
	devKey := protocol.NewKey(protocol.DevKey(secret))
	realKey := protocol.NewKey(secret)
	for _, tc := range []struct {
		name string
		dev  bool
		key  *protocol.Key
		want protocol.Reason
	}{
		{"dev agent, dev_reference", true, devKey, ""},
		{"real agent, dev_reference", true, realKey, protocol.ReasonMAC},
		{"dev agent, no dev_reference", false, devKey, protocol.ReasonMAC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clockhealthtest.NewClock(t0)
			hs := newHarness(t, func(req protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Bytes: clockhealthtest.SignedLine(tc.key, req.Nonce, uint64(clk.WallNs()/1e6), 3, true, 1)}
			}, func(o *clockhealth.Options) {
				o.Wall, o.Mono = clk, clk
				o.Config.DevReference = tc.dev
			})
			st := hs.mon.Status()
			if st.DevReference != tc.dev {
				t.Fatalf("status dev_reference %v", st.DevReference)
			}
			if v, _ := metric(t, hs.reg, "clock_dev_reference", "", ""); (v == 1) != tc.dev {
				t.Fatalf("clock_dev_reference = %v", v)
			}
			if tc.want == "" {
				hs.pass(3)
				return
			}
			err := hs.mon.Probe(t.Context())
			hs.wantFailed(err, tc.want)
			// Issue 10: a dev agent used without dev_reference says so and
			// how to fix it; a real agent's MAC under dev_reference does not.
			hint := strings.Contains(err.Error(), "valid under dev_key") && strings.Contains(err.Error(), "clock.dev_reference")
			if hint != (tc.key == devKey && !tc.dev) {
				t.Fatalf("dev_key hint %v in %q", hint, err)
			}
		})
	}
	t.Run("shared dev vector", func(t *testing.T) {
		v := loadVectors(t)
		ref, _ := strconv.ParseInt(v.DevReference.ReferenceUnixMs, 10, 64)
		line := []byte(v.DevReference.ResponseLine + "\n")
		for _, dev := range []bool{true, false} {
			hs := newHarness(t, func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{Bytes: line} },
				func(o *clockhealth.Options) {
					c := clockhealthtest.NewClock(time.UnixMilli(ref))
					o.Wall, o.Mono = c, c
					o.Rand = fixedNonce(t, v.DevReference.Nonce)
					o.Config.DevReference = dev
				})
			err := hs.mon.Probe(t.Context())
			if dev && err != nil && !errors.Is(err, clockhealth.ErrClockCheck) {
				t.Fatalf("dev vector with dev_reference: %v", err)
			}
			if !dev {
				hs.wantFailed(err, protocol.ReasonMAC)
			}
		}
	})
}
