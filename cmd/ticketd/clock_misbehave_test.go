package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// The misbehaving agents of TestBlackBoxMisbehavingAgents (issue 5 item 6).

// misbehaviour is one way an agent goes bad after the node is ready.
type misbehaviour struct {
	name   string
	reason protocol.Reason
	// clock keys of the node (Δ 2000: limits 500 ms each, Δ/2 = 1000 ms);
	// probe every 200 ms with a 200 ms exchange deadline unless set.
	extra              string
	intervalMs, timeMs int
	// retried: every exchange of the burst is tried (SPEC §3.1: slow or
	// incomplete), so detection may take the whole burst.
	retried bool
	bad     func(a *clockhealthtest.Agent) // switch the agent to it
}

func answer(f func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply) func(*clockhealthtest.Agent) {
	return func(a *clockhealthtest.Agent) {
		a.SetHandler(func(req protocol.Request) clockhealthtest.Reply { return f(a, req) })
	}
}

func lineNow(a *clockhealthtest.Agent, n protocol.Nonce, offsetMs int64, u uint64, synced bool, age uint64) []byte {
	return a.Sign(n, uint64(time.Now().UnixMilli()+offsetMs), u, synced, age)
}

func misbehaviours() []misbehaviour {
	wrongKey := protocol.NewKey([]byte("not-the-clock-secret-of-this-node-0123456789"))
	return []misbehaviour{
		{name: "dead port", reason: protocol.ReasonConnect, retried: true, bad: func(a *clockhealthtest.Agent) { a.Close() }},
		{name: "silent", reason: protocol.ReasonTimeout, retried: true, bad: answer(func(*clockhealthtest.Agent, protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Hold: true}
		})},
		{name: "reset mid-line", reason: protocol.ReasonIO, retried: true, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: lineNow(a, req.Nonce, 0, 3, true, 100)[:30], Reset: true}
		})},
		{name: "oversize", reason: protocol.ReasonSize, bad: answer(func(*clockhealthtest.Agent, protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: bytes.Repeat([]byte("A"), 300)}
		})},
		{name: "CR", reason: protocol.ReasonFormat, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			l := lineNow(a, req.Nonce, 0, 3, true, 100)
			return clockhealthtest.Reply{Bytes: append(l[:len(l)-1:len(l)-1], '\r', '\n')}
		})},
		{name: "bad grammar", reason: protocol.ReasonFormat, bad: answer(func(*clockhealthtest.Agent, protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: []byte("TCKCLK 2 not a response\n")}
		})},
		{name: "version", reason: protocol.ReasonVersion, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: bytes.Replace(lineNow(a, req.Nonce, 0, 3, true, 100), []byte("TCKCLK 2 "), []byte("TCKCLK 3 "), 1)}
		})},
		{name: "wrong nonce", reason: protocol.ReasonNonce, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			other := req.Nonce
			other[0] ^= 0xff
			return clockhealthtest.Reply{Bytes: lineNow(a, other, 0, 3, true, 100)}
		})},
		{name: "wrong MAC", reason: protocol.ReasonMAC, bad: answer(func(_ *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: clockhealthtest.SignedLine(wrongKey, req.Nonce, uint64(time.Now().UnixMilli()), 3, true, 100)}
		})},
		{name: "synced=0", reason: protocol.ReasonUnsynced, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: lineNow(a, req.Nonce, 0, 3, false, 100)}
		})},
		{name: "u=0 while synced", reason: protocol.ReasonUncertainty, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: lineNow(a, req.Nonce, 0, 0, true, 100)}
		})},
		{name: "source age", reason: protocol.ReasonSourceAge, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: lineNow(a, req.Nonce, 0, 3, true, 200000)} // > max_source_age_ms 120000
		})},
		{name: "uncertainty", reason: protocol.ReasonUncertainty, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: lineNow(a, req.Nonce, 0, 600, true, 100)} // > max_uncertainty_ms 500
		})},
		// RTT: the answer is held 300 ms (> max_rtt_ms 150, < the 500 ms
		// exchange deadline, so the reason is rtt, not timeout).
		{name: "RTT", reason: protocol.ReasonRTT, intervalMs: 500, timeMs: 500, extra: "  max_rtt_ms: 150\n", retried: true,
			bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Before: func() { time.Sleep(300 * time.Millisecond) }, Bytes: lineNow(a, req.Nonce, 0, 3, true, 100)}
			})},
		{name: "offset", reason: protocol.ReasonOffset, bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: lineNow(a, req.Nonce, 800, 3, true, 100)} // > max_offset_ms 500
		})},
		// Total bound: u 600 and offset ≈ 500 each within their limits
		// (700), together past Δ/2 = 1000.
		{name: "total bound", reason: protocol.ReasonBound, extra: "  max_uncertainty_ms: 700\n  max_offset_ms: 700\n",
			bad: answer(func(a *clockhealthtest.Agent, req protocol.Request) clockhealthtest.Reply {
				return clockhealthtest.Reply{Bytes: lineNow(a, req.Nonce, 500, 600, true, 100)}
			})},
	}
}

// SPEC §3.3-1..3, §3.4, §3.5, §4.1 (issue 5 item 6): one ticketd per kind
// of misbehaviour, all started in parallel against their own in-process
// agent, each healthy until it is ready and has granted once. Then every
// agent is switched to its misbehaviour; each process must go FAILED within
// its probe interval + probe timeout (+ detectAllowance; + the rest of the
// burst's timeouts for the kinds a burst tries again, SPEC §3.1), name the reason,
// refuse grants with 503 and that reason, fail /readyz with stage failed,
// and record the FAILED marker in its data dir. Each switch happens just
// after a healthy exchange ended — the worst phase: the next probe is a
// whole interval away.
func TestBlackBoxMisbehavingAgents(t *testing.T) {
	secretFile := writeSecret(t, bbSecret)
	type run struct {
		m        misbehaviour
		agent    *clockhealthtest.Agent
		answered chan struct{}
		p        *proc
		dir      string
		budget   time.Duration
		err      error // start-up, readiness or the first grant
		took     time.Duration
		failed   failedEvent
		waitErr  error
	}
	ms := misbehaviours()
	runs := make([]*run, len(ms))
	for i, m := range ms {
		r := &run{m: m, dir: filepath.Join(t.TempDir(), "data"), answered: make(chan struct{})}
		if m.intervalMs == 0 {
			m.intervalMs, m.timeMs = 200, 200
			r.m = m
		}
		r.budget = time.Duration(m.intervalMs+m.timeMs)*time.Millisecond + detectAllowance
		if m.retried {
			r.budget += time.Duration((clockhealth.DefaultBurst-1)*m.timeMs) * time.Millisecond
		}
		r.agent = clockhealthtest.StartAgent(t, []byte(bbSecret), healthyReply(&r.agent, r.answered))
		// The staleness window holds a whole burst of timeouts after an
		// interval (SPEC §3.1: a round is cut at the window's end, stale),
		// so each kind fails with its own reason.
		stale := m.intervalMs + clockhealth.DefaultBurst*m.timeMs + 1000
		extra := fmt.Sprintf("  delta_ms: 2000\n  probe_interval_ms: %d\n  probe_timeout_ms: %d\n  staleness_ms: %d\n%s", m.intervalMs, m.timeMs, stale, m.extra)
		var ok bool
		r.p, ok = startProc(t, "--config", clockConfig(t, r.dir, r.agent.Addr(), secretFile, extra))
		if !ok {
			t.Fatalf("%s: ticketd exited before listening: %v\n%s", m.name, <-r.p.done, r.p.logText())
		}
		runs[i] = r
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			if r.err = r.p.waitReady(30 * time.Second); r.err == nil {
				_, r.err = r.p.c.Grant(context.Background(), "before", "h", 30)
			}
		})
	}
	wg.Wait()
	for _, r := range runs {
		if r.err != nil {
			t.Fatalf("%s: with a healthy agent: %v", r.m.name, r.err)
		}
	}
	// Switch every agent right after a healthy exchange, each timed from
	// its own switch.
	for _, r := range runs {
		wg.Go(func() {
			select {
			case <-r.answered:
			case <-time.After(10 * time.Second):
				r.waitErr = errors.New("no healthy exchange to switch after")
				return
			}
			start := time.Now()
			r.m.bad(r.agent)
			select {
			case r.failed = <-r.p.failedCh:
				r.took = r.failed.at.Sub(start)
			case <-time.After(10 * time.Second):
				r.waitErr = errors.New("no FAILED within 10 s")
			}
		})
	}
	wg.Wait()
	worst, worstKind := -time.Hour, ""
	for _, r := range runs {
		t.Run(r.m.name, func(t *testing.T) {
			if r.waitErr != nil {
				t.Fatal(r.waitErr)
			}
			t.Logf("FAILED (%s) %v after the switch (budget %v)", r.failed.reason, r.took.Round(time.Millisecond), r.budget)
			if over := r.took - (r.budget - detectAllowance); over > worst {
				worst, worstKind = over, r.m.name
			}
			if r.failed.reason != string(r.m.reason) {
				t.Errorf("logged reason %q, want %q", r.failed.reason, r.m.reason)
			}
			if r.took > r.budget {
				t.Errorf("FAILED took %v > probe interval + timeout + %v = %v", r.took, detectAllowance, r.budget)
			}
			var ce *client.Error
			_, err := r.p.c.Grant(context.Background(), "after", "h", 30)
			if !errors.As(err, &ce) || ce.StatusCode != 503 || ce.Reason != string(r.m.reason) || ce.Stage != "failed" ||
				!strings.Contains(ce.Message, string(r.m.reason)) {
				t.Errorf("grant after FAILED: %v; want 503 stage failed reason %s", err, r.m.reason)
			}
			if _, err := r.p.c.Ready(context.Background()); !errors.As(err, &ce) || ce.Stage != "failed" || ce.Reason != string(r.m.reason) {
				t.Errorf("/readyz after FAILED: %v", err)
			}
			if !fileExists(filepath.Join(r.dir, "clock-failed")) {
				t.Errorf("no FAILED marker in %s", r.dir)
			}
			// A FAILED process stays up refusing; stopped, it exits 1.
			if err := r.p.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if code, err := r.p.exitCodeOf(30 * time.Second); code != 1 {
				t.Errorf("exit %d (%v) after SIGINT on a FAILED node; want 1", code, err)
			}
		})
	}
	t.Logf("%d kinds of misbehaviour: closest to the budget %q, %v relative to its budget without the allowance (%v)",
		len(runs), worstKind, worst.Round(time.Millisecond), detectAllowance)
}
