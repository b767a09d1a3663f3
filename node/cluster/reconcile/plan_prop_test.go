package reconcile

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// genWorld draws a cluster whose leader is a voter and whose live voters
// are a majority (a leader without one cannot commit a change anyway).
func genWorld(t *rapid.T) *world {
	n := rapid.IntRange(1, 12).Draw(t, "n")
	lim := Limits{MaxVoters: rapid.IntRange(0, 8).Draw(t, "max_voters"), MaxStandbys: rapid.IntRange(-1, 5).Draw(t, "max_standbys")}
	w := newWorld("n01", lim)
	domains := []string{"a", "b", "c", "d", ""}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%02d", i)
		w.members[id] = Member{
			ID:            id,
			Address:       rapid.SampledFrom([]string{"addr-" + id, "addr-" + id, "addr-" + id, ""}).Draw(t, "addr"),
			Eligible:      rapid.Float64Range(0, 1).Draw(t, "eligible") < 0.85,
			Priority:      rapid.IntRange(0, 3).Draw(t, "priority"),
			FailureDomain: rapid.SampledFrom(domains).Draw(t, "domain"),
			Alive:         rapid.Float64Range(0, 1).Draw(t, "alive") < 0.8,
			RaftContact:   rapid.Bool().Draw(t, "contact"),
			ClockHealthy:  rapid.Float64Range(0, 1).Draw(t, "healthy") < 0.9,
			Retired:       rapid.Float64Range(0, 1).Draw(t, "retired") < 0.1,
			CaughtUp:      rapid.Bool().Draw(t, "caught_up"),
		}
		switch rapid.IntRange(0, 2).Draw(t, "config") {
		case 1:
			w.config[id] = Voter
		case 2:
			w.config[id] = Nonvoter
		}
	}
	w.config["n01"] = Voter
	// Give the configuration a live majority by restoring Raft contact.
	for _, id := range sortedKeys(w.config) {
		if w.quorum() {
			break
		}
		if w.config[id] == Voter && !w.up(id) {
			m := w.members[id]
			m.RaftContact = true
			w.members[id] = m
		}
	}
	// A gossip-forgotten configuration server, sometimes.
	if rapid.Bool().Draw(t, "ghost") {
		w.config["ghost"] = rapid.SampledFrom([]Suffrage{Voter, Nonvoter}).Draw(t, "ghost_suffrage")
		if !w.quorum() {
			delete(w.config, "ghost")
		}
	}
	// Gone voters past raft.dead_voter_grace, sometimes (drawn last: the
	// saved failures of the draws above stay valid).
	for _, id := range sortedKeys(w.members) {
		m := w.members[id]
		m.DeadPastGrace = rapid.Bool().Draw(t, "dead_past_grace")
		w.members[id] = m
	}
	return w
}

// SPEC §5 Reconciler (issue 12 item 2): every step of every plan is a valid
// Raft change that keeps the live voters a majority; nothing retired,
// unhealthy, ineligible or not caught up is added or promoted; the leader is
// never demoted or removed.
func TestPropertyStepsSafe(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		plan := Plan(w.input())
		for _, c := range plan {
			m := w.members[c.ID]
			if (c.Kind == AddNonvoter || c.Kind == Promote) && (m.Retired || !m.ClockHealthy || !m.Eligible) {
				t.Fatalf("%v picks %+v", c, m)
			}
		}
		if err := w.applyAll(plan); err != nil {
			t.Fatal(err)
		}
		if w.config[w.leader] != Voter {
			t.Fatalf("the leader is no longer a voter: %v", w.config)
		}
	})
}

// SPEC §5 Bounded core and Reconciler: planning again on the applied output
// (non-voters having caught up) reaches a plan with nothing in it within a
// few rounds — one more when a demotion had to wait for the removal of a
// dead voter, or a promotion for a second one. Within
// raft.dead_voter_grace a held voter (gone) keeps a slot only when every
// fit node votes, and an unfit voter stays only while its removal would
// cost the live voters their majority next to a held one. Once the grace
// has passed for every gone voter the bounds hold: voters = min(max_voters,
// fit nodes), odd from three up, over as many failure domains as the fit
// nodes offer; standbys ≤ max_standbys; every voter and standby fit; the
// leader a voter.
func TestPropertyConvergesWithinBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		if _, err := w.converge(5); err != nil {
			t.Fatal(err)
		}
		lim := w.limits.normalized()
		fit, _, held := w.slots()
		voters, blocked := 0, 0
		for id, s := range w.config {
			switch {
			case id == w.leader || w.fit(id) || w.held(id):
			case s == Voter && w.up(id) && held > 0:
				blocked++ // withheld: 1 live of 2 voters is no majority
			default:
				t.Fatalf("unfit %s (%+v) still %v", id, w.members[id], s)
			}
			if s == Voter {
				voters++
			}
		}
		if blocked == 0 {
			if want := voterCount(fit+held, lim.MaxVoters); voters != want {
				t.Fatalf("%d voters, want %d (fit %d, held %d, max %d): %v", voters, want, fit, held, lim.MaxVoters, w.config)
			}
			if held > 0 && voters-held != fit {
				t.Fatalf("%d held voters keep slots while only %d of %d fit nodes vote: %v", held, voters-held, fit, w.config)
			}
		}

		// The grace passes for every gone voter.
		for id, m := range w.members {
			m.DeadPastGrace = true
			w.members[id] = m
		}
		w.ghostPastGrace = true
		if _, err := w.converge(5); err != nil {
			t.Fatal(err)
		}
		fit, fitDomains, held := w.slots()
		if held != 0 {
			t.Fatalf("%d held voters past the grace: %v", held, w.config)
		}
		voters, standbys := 0, 0
		for id, s := range w.config {
			if id != w.leader && !w.fit(id) {
				t.Fatalf("unfit %s (%+v) still %v past the grace", id, w.members[id], s)
			}
			if s == Voter {
				voters++
			} else {
				standbys++
			}
		}
		if want := voterCount(fit, lim.MaxVoters); voters != want {
			t.Fatalf("%d voters, want %d (fit %d, max %d): %v", voters, want, fit, lim.MaxVoters, w.config)
		}
		if want := min(lim.MaxStandbys, fit-voters); standbys != want {
			t.Fatalf("%d standbys, want %d: %v", standbys, want, w.config)
		}
		if got, want := len(w.voterDomains()), min(voters, len(fitDomains)); got != want {
			t.Fatalf("voters over %d domains, the fit nodes offer %d for %d voters: %v", got, len(fitDomains), voters, w.config)
		}
		if w.config[w.leader] != Voter {
			t.Fatal("the leader is no longer a voter")
		}
	})
}

// SPEC §5 Reconciler: a gone voter within raft.dead_voter_grace is removed
// only when its slot is taken — after the plan the configuration still
// has every voter slot the fit and held nodes call for — and a voter past
// the grace is never a reason to keep a slot.
func TestPropertyGraceHoldsSlots(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		fit, _, held := w.slots()
		want := voterCount(fit+held, w.limits.normalized().MaxVoters)
		wasHeld := map[string]bool{}
		for id := range w.config {
			wasHeld[id] = w.held(id)
		}
		plan := Plan(w.input())
		if err := w.applyAll(plan); err != nil {
			t.Fatal(err)
		}
		voters := 0
		for _, s := range w.config {
			if s == Voter {
				voters++
			}
		}
		for _, c := range plan {
			if c.Kind == Remove && wasHeld[c.ID] && voters < want {
				t.Fatalf("%v removes a held voter, leaving %d voters of the %d slots (fit %d, held %d): %v", c, voters, want, fit, held, plan)
			}
		}
	})
}

// Plan is idempotent on its own fixed point and deterministic: the same
// input in another member order gives the same plan.
func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		in := w.input()
		a := Plan(in)
		perm := rapid.Permutation(in.Members).Draw(t, "perm")
		in.Members = perm
		in.Config = rapid.Permutation(in.Config).Draw(t, "perm_config")
		if b := Plan(in); !sameChanges(a, b) {
			t.Fatalf("member order changed the plan:\n%v\n%v", a, b)
		}
	})
}

// SPEC §3.4, §5 Reconciler: a configuration server comes back as its next
// generation at the same address (gossip shows NAME~2 alive, NAME
// nowhere). Every step stays valid where hashicorp/raft refuses a
// duplicate address (world.apply), the plans converge, and the old NodeId
// leaves the configuration without waiting for raft.dead_voter_grace.
func TestPropertyNextGenerationAtSameAddress(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		var ids []string
		for _, id := range sortedKeys(w.config) {
			if id != w.leader && id != "ghost" {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			t.Skip("no configuration server but the leader")
		}
		victim := rapid.SampledFrom(ids).Draw(t, "victim")
		delete(w.members, victim)
		w.members[victim+"~2"] = Member{ID: victim + "~2", Address: "addr-" + victim, Eligible: true, Alive: true, ClockHealthy: true,
			FailureDomain: rapid.SampledFrom([]string{"a", "b", ""}).Draw(t, "domain")}
		if !w.quorum() {
			t.Skip("the victim's going cost the quorum")
		}
		if _, err := w.converge(8); err != nil {
			t.Fatal(err)
		}
		if _, in := w.config[victim]; in {
			t.Fatalf("%s still in the configuration %v beside %s~2", victim, w.config, victim)
		}
	})
}
