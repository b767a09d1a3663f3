package reconcile

import (
	"fmt"
	"reflect"
	"testing"
)

func TestNormalizeMaxVoters(t *testing.T) {
	// SPEC §5 Bounded core: an even value goes down to the odd one below.
	for _, c := range []struct {
		in, want int
		changed  bool
	}{{5, 5, false}, {4, 3, true}, {2, 1, true}, {1, 1, false}, {0, 1, true}, {-3, 1, true}, {7, 7, false}, {8, 7, true}} {
		got, changed := NormalizeMaxVoters(c.in)
		if got != c.want || changed != c.changed {
			t.Errorf("NormalizeMaxVoters(%d) = %d, %v; want %d, %v", c.in, got, changed, c.want, c.changed)
		}
	}
}

// SPEC §5 Bounded core; issue 12 test list: 3, 7 and 10 eligible nodes over
// three failure domains come out 3/0/0, 5/2/0 and 5/4/1 with the voters in
// all three domains, starting from a bootstrapped single voter.
func TestRolesFromBootstrap(t *testing.T) {
	for _, c := range []struct{ n, v, s, cl int }{{3, 3, 0, 0}, {7, 5, 2, 0}, {10, 5, 4, 1}} {
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			ms := healthy(c.n, "a", "b", "c")
			for i := range ms {
				ms[i].CaughtUp = false // new nodes have to catch up first
			}
			w := newWorld("n01", DefaultLimits(), ms...)
			w.config["n01"] = Voter
			first := Plan(w.input())
			for _, ch := range first {
				if ch.Kind != AddNonvoter {
					t.Fatalf("first plan %v: a node that has not caught up is only added as a non-voter", first)
				}
			}
			if _, err := w.converge(6); err != nil {
				t.Fatal(err)
			}
			v, s, cl := w.roles()
			if v != c.v || s != c.s || cl != c.cl {
				t.Fatalf("roles %d/%d/%d, want %d/%d/%d (config %v)", v, s, cl, c.v, c.s, c.cl, w.config)
			}
			if d := w.voterDomains(); len(d) != 3 {
				t.Fatalf("voters cover domains %v, want a, b and c", d)
			}
		})
	}
}

// tenNodeWorld is the converged 10-node cluster: voters n01–n05, standbys
// n06–n09, client n10.
func tenNodeWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld("n01", DefaultLimits(), healthy(10, "a", "b", "c")...)
	for i := 1; i <= 9; i++ {
		s := Voter
		if i > 5 {
			s = Nonvoter
		}
		w.config[fmt.Sprintf("n%02d", i)] = s
	}
	if p := Plan(w.input()); len(p) != 0 {
		t.Fatalf("converged cluster plans %v", p)
	}
	return w
}

// SPEC §5 Reconciler: the best standby takes a dead voter's slot; the dead
// voter is removed after the promotion; the client refills the standbys.
func TestDeadVoterReplacedByBestStandby(t *testing.T) {
	w := tenNodeWorld(t)
	m := w.members["n02"]
	m.Alive, m.RaftContact = false, false
	w.members["n02"] = m
	got := Plan(w.input())
	want := []Change{
		{Kind: AddNonvoter, ID: "n10", Address: "addr-n10"},
		{Kind: Promote, ID: "n06", Address: "addr-n06"},
		{Kind: Remove, ID: "n02"},
	}
	if !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	if err := w.applyAll(got); err != nil {
		t.Fatal(err)
	}
}

// A voter that is gossip-dead but still in Raft contact (or the reverse)
// keeps its slot: only both together make it dead.
func TestHalfDeadVoterKept(t *testing.T) {
	for _, c := range []struct{ alive, contact bool }{{false, true}, {true, false}} {
		w := tenNodeWorld(t)
		m := w.members["n03"]
		m.Alive, m.RaftContact = c.alive, c.contact
		w.members["n03"] = m
		if p := Plan(w.input()); len(p) != 0 {
			t.Fatalf("alive=%v contact=%v: plan %v", c.alive, c.contact, p)
		}
	}
}

func sameChanges(a, b []Change) bool {
	strip := func(cs []Change) []Change {
		out := make([]Change, len(cs))
		for i, c := range cs {
			c.Why = ""
			out[i] = c
		}
		return out
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// SPEC §5 Bounded core: two eligible nodes with max_voters > 1 both vote;
// max_voters 1 keeps one voter.
func TestTwoNodes(t *testing.T) {
	for _, c := range []struct{ max, voters, standbys int }{{5, 2, 0}, {3, 2, 0}, {1, 1, 1}} {
		w := newWorld("n01", Limits{MaxVoters: c.max, MaxStandbys: 4}, healthy(2, "a")...)
		w.config["n01"] = Voter
		if _, err := w.converge(4); err != nil {
			t.Fatal(err)
		}
		if v, s, _ := w.roles(); v != c.voters || s != c.standbys {
			t.Fatalf("max_voters %d: %d voters %d standbys, want %d/%d", c.max, v, s, c.voters, c.standbys)
		}
	}
}

// SPEC §5 Bounded core: with three or more eligible nodes the voter count is
// odd: four nodes make three voters and a standby.
func TestOddVoters(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(4, "a", "b")...)
	w.config["n01"] = Voter
	if _, err := w.converge(6); err != nil {
		t.Fatal(err)
	}
	if v, s, _ := w.roles(); v != 3 || s != 1 {
		t.Fatalf("4 nodes: %d voters %d standbys, want 3/1", v, s)
	}
}

// A node not caught up is never promoted; it waits as a non-voter and is
// promoted once CaughtUp.
func TestPromoteOnlyWhenCaughtUp(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(3, "a", "b", "c")...)
	w.config["n01"], w.config["n02"], w.config["n03"] = Voter, Voter, Nonvoter
	m := w.members["n03"]
	m.CaughtUp = false
	w.members["n03"] = m
	if p := Plan(w.input()); len(p) != 0 {
		t.Fatalf("plan %v promotes or moves a node still catching up", p)
	}
	m.CaughtUp = true
	w.members["n03"] = m
	if p := Plan(w.input()); !sameChanges(p, []Change{{Kind: Promote, ID: "n03", Address: "addr-n03"}}) {
		t.Fatalf("plan %v, want the promotion of n03", p)
	}
}

// SPEC §5 Reconciler: a retired or clock-unhealthy node is never added or
// promoted, and one in the configuration is taken out; the leader stays
// whatever its own flags say (its clock lifecycle is not the planner's).
func TestRetiredAndUnhealthy(t *testing.T) {
	w := tenNodeWorld(t)
	set := func(id string, f func(*Member)) {
		m := w.members[id]
		f(&m)
		w.members[id] = m
	}
	set("n02", func(m *Member) { m.Retired = true })
	set("n06", func(m *Member) { m.ClockHealthy = false })
	set("n10", func(m *Member) { m.Retired = true })
	set("n01", func(m *Member) { m.ClockHealthy = false; m.Retired = true })
	plan := Plan(w.input())
	for _, c := range plan {
		if (c.Kind == AddNonvoter || c.Kind == Promote) && (c.ID == "n02" || c.ID == "n06" || c.ID == "n10") {
			t.Fatalf("plan %v picks a retired or unhealthy node", plan)
		}
		if c.ID == "n01" {
			t.Fatalf("plan %v touches the leader", plan)
		}
	}
	if err := w.applyAll(plan); err != nil {
		t.Fatal(err)
	}
	if _, err := w.converge(4); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n02", "n06", "n10"} {
		if s, in := w.config[id]; in {
			t.Fatalf("%s still in the configuration as %v", id, s)
		}
	}
	if w.config["n01"] != Voter {
		t.Fatal("the leader lost its vote")
	}
}

// Quorum-safe order: with two of five voters dead and max_voters lowered to
// one, the demotions of the live voters would lose quorum before the dead
// are removed, so they are withheld until the next plan.
func TestWithheldDemotion(t *testing.T) {
	w := newWorld("n01", Limits{MaxVoters: 1, MaxStandbys: 4}, healthy(5, "a", "b", "c")...)
	for i := 1; i <= 5; i++ {
		w.config[fmt.Sprintf("n%02d", i)] = Voter
	}
	for _, id := range []string{"n04", "n05"} {
		m := w.members[id]
		m.Alive, m.RaftContact, m.DeadPastGrace = false, false, true
		w.members[id] = m
	}
	first := Plan(w.input())
	if !sameChanges(first, []Change{{Kind: Remove, ID: "n04"}, {Kind: Remove, ID: "n05"}}) {
		t.Fatalf("first plan %v, want the two dead voters removed only", first)
	}
	if err := w.applyAll(first); err != nil {
		t.Fatal(err)
	}
	second := Plan(w.input())
	want := []Change{{Kind: Demote, ID: "n02", Address: "addr-n02"}, {Kind: Demote, ID: "n03", Address: "addr-n03"}}
	if !sameChanges(second, want) {
		t.Fatalf("second plan %v, want %v", second, want)
	}
}

// A leader whose view says most voters are dead (it cannot really be
// leader then) removes only a minority of them.
func TestDeadRemovalCapped(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(5, "a")...)
	for i := 1; i <= 5; i++ {
		w.config[fmt.Sprintf("n%02d", i)] = Voter
	}
	for _, id := range []string{"n02", "n03", "n04"} {
		m := w.members[id]
		m.Alive, m.RaftContact, m.DeadPastGrace = false, false, true
		w.members[id] = m
	}
	removed := 0
	for _, c := range Plan(w.input()) {
		if c.Kind == Remove {
			removed++
		}
	}
	if removed != 2 {
		t.Fatalf("removed %d dead voters of 5, want 2 (a minority)", removed)
	}
}

func TestNoLeaderNoPlan(t *testing.T) {
	w := tenNodeWorld(t)
	w.leader = ""
	if p := Plan(w.input()); p != nil {
		t.Fatalf("plan without a leader: %v", p)
	}
	w.leader = "n07" // a non-voter cannot be the leader this plan acts for
	if p := Plan(w.input()); p != nil {
		t.Fatalf("plan for a non-voter leader: %v", p)
	}
}
