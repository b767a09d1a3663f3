package reconcile

import (
	"fmt"
	"testing"
)

// The boundaries of Plan that mutation testing found unguarded
// (docs/mutants.md, node/cluster/reconcile).

// placeholderWorld: voters n01 (leader), n02, n03; n00 — ranked first,
// so a target voter — is a non-voter still catching up; n04 and n05 are
// caught-up standbys. max_voters 3: the target is n00, n01, n02.
func placeholderWorld() *world {
	ms := append(healthy(5, "a"), Member{ID: "n00", Address: "addr-n00", Eligible: true, FailureDomain: "a",
		Alive: true, RaftContact: true, ClockHealthy: true})
	w := newWorld("n01", Limits{MaxVoters: 3, MaxStandbys: 4}, ms...)
	w.config["n01"], w.config["n02"], w.config["n03"] = Voter, Voter, Voter
	w.config["n00"], w.config["n04"], w.config["n05"] = Nonvoter, Nonvoter, Nonvoter
	return w
}

// SPEC §5 Reconciler: while a target voter catches up, a current voter
// outside the target keeps its slot as the placeholder (no change at all);
// a caught-up standby takes the slot only when no current voter can, and
// one placeholder fills one missing slot.
func TestPlaceholderCurrentVoterFirst(t *testing.T) {
	w := placeholderWorld()
	if p := Plan(w.input()); len(p) != 0 {
		t.Fatalf("plan %v: n03 should hold n00's slot while n00 catches up, nothing else changes", p)
	}
	// n03 leaves the fit nodes (clock unhealthy): now the best caught-up
	// standby, n04, takes the slot — only n04, not n05 as well.
	m := w.members["n03"]
	m.ClockHealthy = false
	w.members["n03"] = m
	got := Plan(w.input())
	want := []Change{{Kind: Promote, ID: "n04", Address: "addr-n04"}, {Kind: Remove, ID: "n03"}}
	if !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	// Once n00 has caught up it takes its slot and the placeholder goes.
	w = placeholderWorld()
	m = w.members["n00"]
	m.CaughtUp = true
	w.members["n00"] = m
	got = Plan(w.input())
	want = []Change{{Kind: Promote, ID: "n00", Address: "addr-n00"}, {Kind: Demote, ID: "n03", Address: "addr-n03"}}
	if !sameChanges(got, want) {
		t.Fatalf("n00 caught up: plan %v, want %v", got, want)
	}
}

// SPEC §5 Bounded core: a promotion that would make the voter count even
// waits for the next one. Voters n01–n03; the target is all five; n04 has
// caught up (and ranks first), n05 has not: promoting n04 alone would make
// four voters, so nothing changes until n05 has caught up too, and then
// both are promoted.
func TestEvenPromotionWaits(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(5, "a", "b", "c")...)
	w.config["n01"], w.config["n02"], w.config["n03"] = Voter, Voter, Voter
	w.config["n04"], w.config["n05"] = Nonvoter, Nonvoter
	m := w.members["n04"]
	m.Priority = -1 // fit[0]: the held-back promotion is the best-ranked node
	w.members["n04"] = m
	m = w.members["n05"]
	m.CaughtUp = false
	w.members["n05"] = m
	if p := Plan(w.input()); len(p) != 0 {
		t.Fatalf("plan %v: promoting n04 alone makes 4 voters", p)
	}
	m.CaughtUp = true
	w.members["n05"] = m
	got := Plan(w.input())
	want := []Change{{Kind: Promote, ID: "n04", Address: "addr-n04"}, {Kind: Promote, ID: "n05", Address: "addr-n05"}}
	if !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
}

// The configuration's address of a server wins over the one gossip
// advertises (a promotion must not move a server in Raft); a
// configuration entry without an address keeps gossip's.
func TestConfigAddressWins(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(3, "a", "b", "c")...)
	w.config["n01"], w.config["n02"], w.config["n03"] = Voter, Voter, Nonvoter
	m := w.members["n03"]
	m.Address = "gossip-n03"
	w.members["n03"] = m
	got := Plan(w.input()) // input() gives every config server the address addr-<id>
	if want := []Change{{Kind: Promote, ID: "n03", Address: "addr-n03"}}; !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	in := w.input()
	for i := range in.Config {
		in.Config[i].Address = ""
	}
	got = Plan(in)
	if want := []Change{{Kind: Promote, ID: "n03", Address: "gossip-n03"}}; !sameChanges(got, want) {
		t.Fatalf("config without addresses: plan %v, want %v", got, want)
	}
}

// SPEC §5 Bounded core: raft.priority ranks the candidates, lower is
// preferred (then NodeId). One domain, so ranking alone decides: of the
// standbys n02 (priority 5), n03 (0) and n04 (-5), n04 and n03 join the
// leader as voters.
func TestLowerPriorityPreferred(t *testing.T) {
	w := newWorld("n01", Limits{MaxVoters: 3, MaxStandbys: 4}, healthy(4, "a")...)
	w.config["n01"], w.config["n02"], w.config["n03"], w.config["n04"] = Voter, Nonvoter, Nonvoter, Nonvoter
	for id, p := range map[string]int{"n02": 5, "n04": -5} {
		m := w.members[id]
		m.Priority = p
		w.members[id] = m
	}
	got := Plan(w.input())
	want := []Change{{Kind: Promote, ID: "n04", Address: "addr-n04"}, {Kind: Promote, ID: "n03", Address: "addr-n03"}}
	if !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
}

// SPEC §5 Reconciler, quorum-safe order: every voter-reducing step of a
// plan is judged against the voters and live voters the steps before it
// leave, not against the configuration the plan started from. Each case
// sits where one miscount along the walk changes the plan.
func TestQuorumCountedAlongThePlan(t *testing.T) {
	const dead, retired = "dead", "retired"
	for _, c := range []struct {
		name  string
		max   int
		nodes []string // n01 (leader), n02, …: "" a healthy voter, or dead / retired
		want  []Change
	}{
		// Voters n01–n03 live, n04 dead, max_voters 1: demoting n02 leaves
		// 2 live of 3; demoting n03 as well would leave 1 live of 2, so it
		// waits; the dead n04 goes (a minority of the 4).
		{"demote counts the live voter it takes", 1, []string{"", "", "", dead},
			[]Change{{Kind: Demote, ID: "n02", Address: "addr-n02"}, {Kind: Remove, ID: "n04"}}},
		// n03 dead, n04 retired but alive: once n03 is removed, 3 live of 3
		// voters remain, so n04 can go as well.
		{"dead removal counts the voter it takes", 5, []string{"", "", dead, retired},
			[]Change{{Kind: Remove, ID: "n03"}, {Kind: Remove, ID: "n04"}}},
		// n02 retired, n03, n04 dead: one dead voter may go (a minority of
		// 4); then 2 live of 3 voters: removing the live n02 would leave 1
		// live of 2.
		{"live removal needs a majority after it", 5, []string{"", retired, dead, dead},
			[]Change{{Kind: Remove, ID: "n03"}}},
		// n02 and n03 retired, all four alive: both go, one after the other
		// (3 live of 3, then 2 of 2).
		{"live removal counts the voter it takes", 5, []string{"", retired, retired, ""},
			[]Change{{Kind: Remove, ID: "n02"}, {Kind: Remove, ID: "n03"}}},
		// n02, n03 retired and alive, n04–n07 dead: three dead go (a
		// minority of 7), leaving n01–n03 and n07; removing n02 leaves 2
		// live of 3; removing n03 too would leave 1 live of 2.
		{"live removal counts the live voter it takes", 5, []string{"", retired, retired, dead, dead, dead, dead},
			[]Change{{Kind: Remove, ID: "n04"}, {Kind: Remove, ID: "n05"}, {Kind: Remove, ID: "n06"}, {Kind: Remove, ID: "n02"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld("n01", Limits{MaxVoters: c.max, MaxStandbys: 4}, healthy(len(c.nodes), "a")...)
			for i, kind := range c.nodes {
				id := fmt.Sprintf("n%02d", i+1)
				w.config[id] = Voter
				m := w.members[id]
				switch kind {
				case dead: // past raft.dead_voter_grace: no slot held
					m.Alive, m.RaftContact, m.DeadPastGrace = false, false, true
				case retired:
					m.Retired = true
				}
				w.members[id] = m
			}
			got := Plan(w.input())
			if !sameChanges(got, c.want) {
				t.Fatalf("plan %v, want %v", got, c.want)
			}
		})
	}
}

// graceWorld: voters n01 (leader), n02, n03 with n03 gone (gossip-dead and
// silent in Raft) within raft.dead_voter_grace, max_voters 3.
func graceWorld(extra ...Member) *world {
	w := newWorld("n01", Limits{MaxVoters: 3, MaxStandbys: 4}, append(healthy(3, "a"), extra...)...)
	w.config["n01"], w.config["n02"], w.config["n03"] = Voter, Voter, Voter
	m := w.members["n03"]
	m.Alive, m.RaftContact = false, false
	w.members["n03"] = m
	return w
}

// SPEC §5 Reconciler: a voter that stopped (a graceful stop or a crash)
// keeps its slot while no replacement can take it; once
// raft.dead_voter_grace has passed it is removed.
func TestGoneVoterKeepsSlotWithinGrace(t *testing.T) {
	w := graceWorld()
	if p := Plan(w.input()); len(p) != 0 {
		t.Fatalf("plan %v: n03 is within the grace with no replacement, nothing changes", p)
	}
	m := w.members["n03"]
	m.DeadPastGrace = true
	w.members["n03"] = m
	got := Plan(w.input())
	if want := []Change{{Kind: Remove, ID: "n03"}}; !sameChanges(got, want) {
		t.Fatalf("past the grace: plan %v, want %v", got, want)
	}
	if got[0].Why != "voter gossip-dead and silent in Raft past raft.dead_voter_grace" {
		t.Fatalf("why %q", got[0].Why)
	}
}

// SPEC §5 Reconciler: a gone voter's slot is filled first from a caught-up
// non-voter — promoted, then the gone voter removed; one still catching up
// leaves the gone voter its slot.
func TestGoneVoterSlotFilledByReplacement(t *testing.T) {
	n04 := Member{ID: "n04", Address: "addr-n04", Eligible: true, FailureDomain: "a", Alive: true, RaftContact: true, ClockHealthy: true}
	w := graceWorld(n04)
	w.config["n04"] = Nonvoter
	if p := Plan(w.input()); len(p) != 0 {
		t.Fatalf("plan %v: n04 has not caught up, n03 keeps its slot", p)
	}
	n04.CaughtUp = true
	w.members["n04"] = n04
	got := Plan(w.input())
	want := []Change{{Kind: Promote, ID: "n04", Address: "addr-n04"}, {Kind: Remove, ID: "n03"}}
	if !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	if err := w.applyAll(got); err != nil {
		t.Fatal(err)
	}
}

// SPEC §3.4 and §5: a retired generation (NAME, its clock FAILED, silent)
// whose next generation (NAME~2) is alive in gossip never comes back — a
// NodeId is never reused — so it keeps no slot within
// raft.dead_voter_grace: it is removed at once, while NAME~2 joins; NAME~2
// is promoted once caught up. A retired NAME without a next generation in
// gossip keeps its slot (TestGoneVoterKeepsSlotWithinGrace).
func TestRetiredGenerationRemovedOnceReplaced(t *testing.T) {
	next := Member{ID: "n03~2", Address: "addr-n03~2", Eligible: true, FailureDomain: "a", Alive: true, RaftContact: true, ClockHealthy: true}
	w := graceWorld(next)
	m := w.members["n03"]
	m.Retired = true
	w.members["n03"] = m
	got := Plan(w.input())
	want := []Change{{Kind: AddNonvoter, ID: "n03~2", Address: "addr-n03~2"}, {Kind: Remove, ID: "n03"}}
	if !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	if err := w.applyAll(got); err != nil {
		t.Fatal(err)
	}
	w.catchUp()
	got = Plan(w.input())
	if want := []Change{{Kind: Promote, ID: "n03~2", Address: "addr-n03~2"}}; !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
}

// SPEC §3.4, §5 Reconciler: n03's clock FAILED; it came back as n03~2 at
// the same address (fixed mesh ports) and gossip shows n03~2 alive under
// n03's name, n03 nowhere. n03 is superseded: it keeps no slot, however
// short the time since it went, and its removal comes before n03~2's
// addition, which hashicorp/raft would refuse while n03 holds the address
// ("found duplicate address in configuration"). Then n03~2 is promoted
// into the slot.
func TestSupersededGenerationAtSameAddress(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(3, "a", "b", "c")...)
	for _, id := range []string{"n01", "n02", "n03"} {
		w.config[id] = Voter
	}
	delete(w.members, "n03")
	next := healthy(3, "a", "b", "c")[2]
	next.ID, next.Address, next.RaftContact, next.CaughtUp = "n03~2", "addr-n03", false, false
	w.members[next.ID] = next
	got := Plan(w.input())
	want := []Change{{Kind: Remove, ID: "n03"}, {Kind: AddNonvoter, ID: "n03~2", Address: "addr-n03"}}
	if !sameChanges(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	if _, err := w.converge(5); err != nil {
		t.Fatal(err)
	}
	if w.config["n03~2"] != Voter || len(w.config) != 3 {
		t.Fatalf("configuration %v, want n01, n02, n03~2 voters", w.config)
	}
}

// SPEC §5 Reconciler: a node to be added at an address a configuration
// server still holds. The holder gone (dead, silent in Raft, another
// member advertising its address): its removal comes first, at once. The
// holder up (it answers in Raft): the addition is withheld — never
// planned first to fail for ever — and the rest of the plan goes on.
func TestAddAtHeldAddress(t *testing.T) {
	w := newWorld("n01", DefaultLimits(), healthy(4, "a", "b", "c", "d")...)
	for _, id := range []string{"n01", "n02", "n03"} {
		w.config[id] = Voter
	}
	w.config["n04"] = Nonvoter
	gone := w.members["n04"]
	gone.Alive, gone.RaftContact = false, false
	w.members["n04"] = gone
	n09 := healthy(1, "d")[0]
	n09.ID, n09.Address, n09.RaftContact, n09.CaughtUp = "n09", "addr-n04", false, false
	w.members["n09"] = n09
	got := Plan(w.input())
	want := []Change{{Kind: Remove, ID: "n04"}, {Kind: AddNonvoter, ID: "n09", Address: "addr-n04"}}
	if !sameChanges(got, want) {
		t.Fatalf("holder gone: plan %v, want %v", got, want)
	}

	// The holder still answers in Raft: n09's addition waits, n05's goes on.
	gone.RaftContact = true
	w.members["n04"] = gone
	n05 := healthy(5, "e")[4]
	w.members["n05"] = n05
	got = Plan(w.input())
	for _, c := range got {
		if c.ID == "n09" || c.Kind == Remove {
			t.Fatalf("holder up: plan %v adds n09 or removes a server", got)
		}
	}
	if len(got) == 0 || got[0].Kind != AddNonvoter || got[0].ID != "n05" {
		t.Fatalf("holder up: plan %v, want n05 added first", got)
	}
	if err := w.applyAll(got); err != nil {
		t.Fatal(err)
	}
}
