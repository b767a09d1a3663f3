package clockhealth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// multi starts extra agents beside the harness one and points the monitor
// at addrs(harnessAgent, extras...).
func multi(t *testing.T, extra []clockhealthtest.Handler, addrs func(main string, extra []string) []string) *harness {
	t.Helper()
	var extras []string
	for _, h := range extra {
		extras = append(extras, clockhealthtest.StartAgent(t, []byte(vectorSecret), h).Addr())
	}
	return newHarness(t, nil, func(o *clockhealth.Options) { o.Config.AgentAddrs = addrs(o.Config.AgentAddrs[0], extras) })
}

// SPEC §3.1: several agents. An unreachable one is counted and shown and
// does not fail the round while another answers healthily. Each round tries
// every agent at least once; an agent's burst stops trying once another
// agent gave a good sample, so the dead agent's count is 1..=burst a round.
func TestDeadAgentBesideGoodOne(t *testing.T) {
	dead := closedAddr(t)
	silent := func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{Hold: true} }
	hs := multi(t, []clockhealthtest.Handler{silent}, func(main string, extra []string) []string {
		return []string{dead, extra[0], main}
	})
	hs.pass(3)
	st := hs.mon.Status()
	if !st.Healthy || len(st.Agents) != 3 {
		t.Fatalf("status %+v", st)
	}
	burst := uint64(clockhealth.DefaultBurst)
	if a := st.Agents[0]; a.Addr != dead || a.Unreachable < 3 || a.Unreachable > 3*burst || a.Exchanges != a.Unreachable ||
		a.ConsecutiveUnreachable != a.Unreachable || a.LastResult != "connect" || a.OK != 0 {
		t.Fatalf("dead agent %+v", a)
	}
	if a := st.Agents[1]; a.Unreachable < 3 || a.Unreachable > 3*burst || a.LastResult != "timeout" {
		t.Fatalf("silent agent %+v", a)
	}
	if a := st.Agents[2]; a.OK != 3 || a.Exchanges != 3 || a.Unreachable != 0 || a.LastResult != "ok" {
		t.Fatalf("good agent %+v", a)
	}
	if st.LastSample == nil || st.LastSample.Agent != hs.agent.Addr() {
		t.Fatalf("last sample %+v", st.LastSample)
	}
	if v, _ := metric(t, hs.reg, "clock_samples_total", "result", "connect"); v != float64(st.Agents[0].Unreachable) {
		t.Fatalf("clock_samples_total{connect} = %v, want the dead agent's %d", v, st.Agents[0].Unreachable)
	}
	want := float64(st.Agents[0].Unreachable + st.Agents[1].Unreachable)
	if v, _ := metric(t, hs.reg, "clock_exchanges_total", "result", "incomplete"); v != want {
		t.Fatalf("clock_exchanges_total{incomplete} = %v, want %v", v, want)
	}
}

// SPEC §3.1: when no agent answers the round fails with the first agent's
// reason and says that none answered.
func TestAllAgentsUnreachable(t *testing.T) {
	a, b := closedAddr(t), closedAddr(t)
	hs := newHarness(t, nil, func(o *clockhealth.Options) { o.Config.AgentAddrs = []string{a, b} })
	err := hs.mon.Probe(t.Context())
	if !strings.Contains(err.Error(), "no agent answered (2 of 2 unreachable)") {
		t.Fatalf("error %q", err)
	}
	hs.wantFailed(err, protocol.ReasonConnect)
}

// SPEC §3.1: an agent that answers with an invalid or dishonest sample fails
// the node at once, even beside a healthy agent: a liar is never outvoted.
func TestLyingAgentIsNeverOutvoted(t *testing.T) {
	var liarKey = protocol.NewKey([]byte(strings.Repeat("x", 32)))
	var liarAddr string
	cases := []struct {
		name string
		h    clockhealthtest.Handler
		want protocol.Reason
	}{
		{"wrong MAC", func(req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: clockhealthtest.SignedLine(liarKey, req.Nonce, uint64(t0.UnixMilli()), 3, true, 1)}
		}, protocol.ReasonMAC},
		{"garbage", func(protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: []byte("HELLO\n")}
		}, protocol.ReasonFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hs := multi(t, []clockhealthtest.Handler{tc.h}, func(main string, extra []string) []string {
				liarAddr = extra[0]
				return []string{main, extra[0]}
			})
			err := hs.mon.Probe(t.Context())
			var ce *clockhealth.Error
			if reasonOf(t, err) != tc.want || !errors.As(err, &ce) || ce.Agent != liarAddr {
				t.Fatalf("got %v, want %s from %s", err, tc.want, liarAddr)
			}
			hs.wantFailed(err, tc.want)
			if st := hs.mon.Status(); st.Agents[0].OK != 1 || st.Agents[1].LastResult != string(tc.want) {
				t.Fatalf("agents %+v", st.Agents)
			}
		})
	}
	t.Run("unsynced beside healthy", func(t *testing.T) {
		var hs *harness
		unsynced := func(req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: clockhealthtest.SignedLine(protocol.NewKey([]byte(vectorSecret)), req.Nonce, uint64(hs.clk.WallNs()/1e6), 3, false, 1)}
		}
		hs = multi(t, []clockhealthtest.Handler{unsynced}, func(main string, extra []string) []string { return []string{main, extra[0]} })
		hs.wantFailed(hs.mon.Probe(t.Context()), protocol.ReasonUnsynced)
	})
}

// SPEC §3.1: the liar fails the node as soon as it answers, not when the
// round's slowest (silent) agent times out.
func TestLiarFailsBeforeSlowAgentTimesOut(t *testing.T) {
	_, silent := holdAndSignal()
	garbage := func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{Bytes: []byte("LIES\n")} }
	hs := multi(t, []clockhealthtest.Handler{silent, garbage}, func(main string, extra []string) []string {
		return []string{main, extra[0], extra[1]}
	})
	done := make(chan error, 1)
	go func() { done <- hs.mon.Probe(t.Context()) }()
	select {
	case <-hs.mon.Failed():
	case err := <-done:
		t.Fatalf("the round ended (%v) before the liar failed the node", err)
	}
	if r := reasonOf(t, hs.mon.Check()); r != protocol.ReasonFormat {
		t.Fatalf("Check during the round: %q", r)
	}
	hs.wantFailed(<-done, protocol.ReasonFormat)
}
