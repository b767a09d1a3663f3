package cluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/protocol"
)

// SPEC §3.5: uniform needs every voter alive, with the same Δ and protocol
// version and a healthy clock sampled within the staleness window (plus Δ);
// the first voter that is not (by NodeId) is named, and only a Δ
// difference is a mismatch.
func TestUniformWhy(t *testing.T) {
	v := uniformView{deltaMs: 500, protocol: protocol.Version, nowMs: 10_000, staleMs: 3000}
	good := func(id string) membership.Member {
		return membership.Member{ID: id, State: membership.StateAlive, Meta: membership.Meta{
			DeltaMs: 500, ProtocolVersion: protocol.Version, ClockState: membership.ClockHealthy, ClockSampleUnixMs: 9_000}}
	}
	with := func(id string, edit func(*membership.Member)) []membership.Member {
		ms := []membership.Member{good("a"), good("b"), good("c")}
		for i := range ms {
			if ms[i].ID == id {
				edit(&ms[i])
			}
		}
		return ms
	}
	voters := []string{"c", "b", "a"}
	for _, tt := range []struct {
		name     string
		voters   []string
		members  []membership.Member
		want     string
		mismatch bool
	}{
		{"uniform", voters, with("", nil), "", false},
		{"no voters", nil, with("", nil), "no voters known yet", false},
		{"a voter not in gossip", []string{"a", "b", "z"}, with("", nil), "waiting for z (not alive in gossip)", false},
		{"a voter dead", voters, with("b", func(m *membership.Member) { m.State = membership.StateDead }), "waiting for b (not alive", false},
		{"Δ differs", voters, with("c", func(m *membership.Member) { m.Meta.DeltaMs = 400 }), "waiting for c (Δ 400 ≠ 500)", true},
		{"protocol differs", voters, with("a", func(m *membership.Member) { m.Meta.ProtocolVersion = protocol.Version + 1 }), "waiting for a (protocol version", false},
		{"clock failed", voters, with("b", func(m *membership.Member) { m.Meta.ClockState = membership.ClockFailed }), "waiting for b (clock failed)", false},
		{"clock_check", voters, with("b", func(m *membership.Member) { m.Meta.ClockState = membership.ClockCheck }), "waiting for b (clock clock_check)", false},
		{"stale sample", voters, with("a", func(m *membership.Member) { m.Meta.ClockSampleUnixMs = 10_000 - 3501 }), "waiting for a (clock sample 3501 ms old", false},
		{"sample at the window's edge", voters, with("a", func(m *membership.Member) { m.Meta.ClockSampleUnixMs = 10_000 - 3500 }), "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			why, mm := uniformWhy(v, tt.voters, tt.members)
			if (tt.want == "") != (why == "") || !strings.HasPrefix(why, tt.want) || mm != tt.mismatch {
				t.Fatalf("uniformWhy = %q, %v; want prefix %q, mismatch %v", why, mm, tt.want, tt.mismatch)
			}
		})
	}
	// Two bad voters: the first by NodeId is named.
	ms := with("c", func(m *membership.Member) { m.Meta.DeltaMs = 400 })
	ms[0].Meta.ClockState = membership.ClockFailed // a
	if why, _ := uniformWhy(v, voters, ms); !strings.HasPrefix(why, "waiting for a ") {
		t.Fatalf("two bad voters: %q, want a named first", why)
	}
}

// SPEC §5 "Bootstrap": conflicting bootstrap_expect values never
// bootstrap; three members advertising 3 are the voter set (by NodeId, at
// their mesh addresses); four advertising 3 are none.
func TestBootstrapServersRefusals(t *testing.T) {
	members := func(expects ...int) []membership.Member {
		var out []membership.Member
		for i, e := range expects {
			out = append(out, membership.Member{ID: fmt.Sprintf("n%d", i), State: membership.StateAlive,
				Meta: membership.Meta{MeshAddr: fmt.Sprintf("127.0.0.1:%d", 9000+i), DeltaMs: 500, RaftEligible: true, BootstrapExpect: uint8(e), Bootstrap: membership.BootstrapWaiting}})
		}
		return out
	}
	if s, why := bootstrapServers("n0", "x", 3, 500, members(3, 2, 3)); s != nil || !strings.Contains(why, "conflicting bootstrap_expect") {
		t.Fatalf("conflicting expect: %v %q", s, why)
	}
	s, why := bootstrapServers("n0", "x", 3, 500, members(3, 3, 3))
	if len(s) != 3 || why != "" || s[0].ID != "n0" || s[2].Address != "127.0.0.1:9002" {
		t.Fatalf("three of three: %v %q", s, why)
	}
	if s, _ := bootstrapServers("n0", "x", 3, 500, members(3, 3, 3, 3)); s != nil {
		t.Fatalf("four advertising 3 bootstrapped: %v", s)
	}
}
