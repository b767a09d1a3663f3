package reconcile

import (
	"fmt"
	"sort"

	"github.com/tckclk/tckclk/node/cluster/identity"
)

// world is a test model of a cluster: the gossip view and the Raft
// configuration, to which changes are applied one at a time as Raft would.
type world struct {
	leader  string
	members map[string]Member
	config  map[string]Suffrage
	limits  Limits
	// ghostPastGrace: a configuration server missing from members (gossip
	// forgot it) is past raft.dead_voter_grace too.
	ghostPastGrace bool
}

func newWorld(leader string, limits Limits, ms ...Member) *world {
	w := &world{leader: leader, members: map[string]Member{}, config: map[string]Suffrage{}, limits: limits}
	for _, m := range ms {
		w.members[m.ID] = m
	}
	return w
}

func (w *world) input() Input {
	in := Input{Leader: w.leader, Limits: w.limits}
	for _, id := range sortedKeys(w.members) {
		in.Members = append(in.Members, w.members[id])
	}
	for _, id := range sortedKeys(w.config) {
		in.Config = append(in.Config, Server{ID: id, Address: "addr-" + id, Suffrage: w.config[id]})
		if _, listed := w.members[id]; !listed && w.ghostPastGrace {
			in.Members = append(in.Members, Member{ID: id, DeadPastGrace: true})
		}
	}
	return in
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// up is the liveness the quorum check uses: the leader, or alive in
// gossip, or in Raft contact.
func (w *world) up(id string) bool {
	m := w.members[id]
	return id == w.leader || m.Alive || m.RaftContact
}

func (w *world) fit(id string) bool {
	m, ok := w.members[id]
	return ok && m.Eligible && !m.Retired && m.ClockHealthy && (m.Alive || (m.RaftContact && w.config[id] != 0)) &&
		(id == w.leader || !w.superseded(id))
}

// superseded: a configuration server a later generation of whose name
// (NAME~G', SPEC §3.4) is alive in gossip.
func (w *world) superseded(id string) bool {
	name, gen, ok := identity.SplitGeneration(id)
	if _, in := w.config[id]; !ok || !in {
		return false
	}
	for _, m := range w.members {
		if n, g, ok := identity.SplitGeneration(m.ID); ok && m.Alive && n == name && g > gen {
			return true
		}
	}
	return false
}

// displaced: a configuration server that is not up while another member
// alive in gossip advertises its address.
func (w *world) displaced(id string) bool {
	if _, in := w.config[id]; !in || w.up(id) {
		return false
	}
	for _, m := range w.members {
		if m.ID != id && m.Alive && m.Address == "addr-"+id {
			return true
		}
	}
	return false
}

// held: a voter of the configuration, not the leader and not fit, gone
// (Gone) and within raft.dead_voter_grace — it keeps its slot until a
// replacement takes it.
func (w *world) held(id string) bool {
	m, listed := w.members[id]
	past := m.DeadPastGrace || !listed && w.ghostPastGrace
	return id != w.leader && w.config[id] == Voter && !w.fit(id) && Gone(m) && !past && !w.superseded(id) && !w.displaced(id)
}

// slots counts the fit nodes a plan can give a role (the leader, and fit
// nodes in the configuration or with an address to be added at), their
// failure domains, and the held voters.
func (w *world) slots() (fit int, domains map[string]bool, held int) {
	domains = map[string]bool{}
	for id, m := range w.members {
		if w.fit(id) && (m.Address != "" || w.config[id] != 0) || id == w.leader {
			fit++
			domains[m.FailureDomain] = true
		}
	}
	for id := range w.config {
		if w.held(id) {
			held++
		}
	}
	return fit, domains, held
}

// quorum reports whether the live voters are a majority of the voters.
func (w *world) quorum() bool {
	voters, live := 0, 0
	for id, s := range w.config {
		if s == Voter {
			voters++
			if w.up(id) {
				live++
			}
		}
	}
	return 2*live > voters
}

// apply applies one change with the preconditions hashicorp/raft and the
// contract put on it.
func (w *world) apply(c Change) error {
	s, in := w.config[c.ID]
	m := w.members[c.ID]
	switch c.Kind {
	case AddNonvoter:
		if in {
			return fmt.Errorf("%v: already in the configuration", c)
		}
		if !w.fit(c.ID) || c.Address == "" {
			return fmt.Errorf("%v: adds an unfit node %+v", c, m)
		}
		for id := range w.config {
			if "addr-"+id == c.Address { // what hashicorp/raft refuses
				return fmt.Errorf("%v: found duplicate address in configuration: %s holds %s", c, id, c.Address)
			}
		}
		w.config[c.ID] = Nonvoter
	case Promote:
		if s != Nonvoter {
			return fmt.Errorf("%v: promotes a server that is not a non-voter (%v)", c, s)
		}
		if !m.CaughtUp || !w.fit(c.ID) {
			return fmt.Errorf("%v: promotes a node that is not caught up or not fit %+v", c, m)
		}
		w.config[c.ID] = Voter
	case Demote:
		if s != Voter || c.ID == w.leader {
			return fmt.Errorf("%v: demotes a non-voter or the leader", c)
		}
		w.config[c.ID] = Nonvoter
	case Remove:
		if !in || c.ID == w.leader {
			return fmt.Errorf("%v: removes an absent server or the leader", c)
		}
		delete(w.config, c.ID)
	default:
		return fmt.Errorf("unknown change %v", c)
	}
	return nil
}

// converge plans and applies until the plan is empty, marking every
// non-voter caught up after each round (new nodes catch up). It fails the
// caller through the returned error on a bad step, a lost quorum or no
// fixed point within maxRounds.
func (w *world) converge(maxRounds int) (rounds int, err error) {
	for rounds = 0; rounds < maxRounds; rounds++ {
		plan := Plan(w.input())
		if len(plan) == 0 && !w.catchUp() {
			return rounds, nil
		}
		if err := w.applyAll(plan); err != nil {
			return rounds, err
		}
		w.catchUp()
	}
	return rounds, fmt.Errorf("no fixed point after %d rounds; last plan %v", maxRounds, Plan(w.input()))
}

// catchUp marks every non-voter caught up and reports whether that changed
// anything.
func (w *world) catchUp() bool {
	changed := false
	for id, s := range w.config {
		if m := w.members[id]; s == Nonvoter && !m.CaughtUp {
			m.CaughtUp, changed = true, true
			w.members[id] = m
		}
	}
	return changed
}

// applyAll applies a plan in order, checking quorum after every step when
// the configuration had it at the start.
func (w *world) applyAll(plan []Change) error {
	had := w.quorum()
	for i, c := range plan {
		if err := w.apply(c); err != nil {
			return fmt.Errorf("step %d of %v: %w", i, plan, err)
		}
		if had && !w.quorum() {
			return fmt.Errorf("step %d (%v) of %v loses quorum: config %v", i, c, plan, w.config)
		}
	}
	return nil
}

// roles counts voters, non-voters and the rest of the members.
func (w *world) roles() (voters, standbys, clients int) {
	for id := range w.members {
		switch w.config[id] {
		case Voter:
			voters++
		case Nonvoter:
			standbys++
		default:
			clients++
		}
	}
	return
}

// voterDomains are the failure domains of the fit voters.
func (w *world) voterDomains() map[string]bool {
	d := map[string]bool{}
	for id, s := range w.config {
		if s == Voter && (w.fit(id) || id == w.leader) {
			d[w.members[id].FailureDomain] = true
		}
	}
	return d
}

// healthy returns n eligible, alive, clock-healthy, caught-up members
// n01…nNN over the domains, round robin.
func healthy(n int, domains ...string) []Member {
	var ms []Member
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%02d", i)
		ms = append(ms, Member{
			ID: id, Address: "addr-" + id, Eligible: true, FailureDomain: domains[(i-1)%len(domains)],
			Alive: true, RaftContact: true, ClockHealthy: true, CaughtUp: true,
		})
	}
	return ms
}
