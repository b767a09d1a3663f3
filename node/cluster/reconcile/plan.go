package reconcile

import (
	"fmt"
	"sort"

	"github.com/tckclk/tckclk/node/cluster/identity"
)

// Default bounds of the Raft core (SPEC §5 "Bounded core").
const (
	DefaultMaxVoters   = 5
	DefaultMaxStandbys = 4
)

// Suffrage is a server's role in the Raft configuration.
type Suffrage uint8

const (
	// Voter votes and counts towards quorum.
	Voter Suffrage = iota + 1
	// Nonvoter receives the log but does not vote: a standby, or a node
	// catching up before its promotion.
	Nonvoter
)

func (s Suffrage) String() string {
	switch s {
	case Voter:
		return "voter"
	case Nonvoter:
		return "nonvoter"
	}
	return fmt.Sprintf("suffrage(%d)", uint8(s))
}

// Member is the leader's view of one node, from gossip and from Raft.
type Member struct {
	ID string
	// Address is the node's Raft address (what AddNonvoter is given).
	Address string
	// Eligible: raft.eligible, not raft.role client, and the data dir
	// resolved. An ineligible node is a client: never in the configuration.
	Eligible bool
	// Priority is raft.priority: lower is preferred.
	Priority      int
	FailureDomain string
	// Alive: gossip says alive.
	Alive bool
	// RaftContact: the leader heard from it in Raft recently.
	RaftContact  bool
	ClockHealthy bool
	Retired      bool
	// CaughtUp: a non-voter's log is close to the leader's and has been for
	// a while. Only a caught-up non-voter is promoted. (Runner.Progress
	// computes it; otherwise the Members func sets it.)
	CaughtUp bool
	// DeadPastGrace: a voter that is gone (gossip-dead, or retired, and
	// silent in Raft) has been so for raft.dead_voter_grace: it may now be
	// removed without a replacement. Until then it keeps its slot. (The
	// Runner computes it.)
	DeadPastGrace bool
}

// Server is one entry of the current Raft configuration.
type Server struct {
	ID       string
	Address  string
	Suffrage Suffrage
}

// Limits bound the Raft core.
type Limits struct {
	MaxVoters   int // normalized by NormalizeMaxVoters; < 1 counts as 1
	MaxStandbys int // < 0 counts as 0
}

// DefaultLimits returns 5 voters and 4 standbys.
func DefaultLimits() Limits {
	return Limits{MaxVoters: DefaultMaxVoters, MaxStandbys: DefaultMaxStandbys}
}

// NormalizeMaxVoters maps an even max_voters to the odd value below it (a
// value below 1 to 1) and reports whether it changed anything, so that the
// caller can log it (SPEC §5).
func NormalizeMaxVoters(n int) (int, bool) {
	switch {
	case n < 1:
		return 1, true
	case n%2 == 0:
		return n - 1, true
	}
	return n, false
}

func (l Limits) normalized() Limits {
	l.MaxVoters, _ = NormalizeMaxVoters(l.MaxVoters)
	if l.MaxStandbys < 0 {
		l.MaxStandbys = 0
	}
	return l
}

// Input is everything Plan looks at.
type Input struct {
	// Leader is the NodeId of the leader that will apply the plan. Empty:
	// no plan.
	Leader string
	// Members is the gossip view. A configuration server missing from it
	// counts as neither alive nor in Raft contact: the caller should list
	// every configuration server, with RaftContact, even when gossip has
	// forgotten it.
	Members []Member
	Config  []Server
	Limits  Limits
}

// Kind is what a Change does.
type Kind uint8

const (
	// AddNonvoter adds a node that is not in the configuration as a
	// non-voter (a new node never becomes a voter at once).
	AddNonvoter Kind = iota + 1
	// Promote makes an existing, caught-up non-voter a voter.
	Promote
	// Demote makes a voter a non-voter (a standby).
	Demote
	// Remove takes a server out of the configuration.
	Remove
)

func (k Kind) String() string {
	switch k {
	case AddNonvoter:
		return "add_nonvoter"
	case Promote:
		return "promote"
	case Demote:
		return "demote"
	case Remove:
		return "remove"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Change is one Raft configuration change.
type Change struct {
	Kind Kind
	ID   string
	// Address is the server's Raft address (for AddNonvoter and Promote).
	Address string
	// Why says in a few words what made the planner choose it (for logs).
	Why string
}

func (c Change) String() string { return c.Kind.String() + " " + c.ID + " (" + c.Why + ")" }

// node is one member or configuration server as the planner sees it.
type node struct {
	Member
	inConfig bool
	cfgAddr  string // the address the configuration holds for it
	suffrage Suffrage
	up       bool // alive in gossip, or (in the configuration) in Raft contact, or the leader
	fit      bool // may hold a voter or standby slot
	ready    bool // may be a voter now: a voter already, or a caught-up non-voter
	held     bool // a gone voter within raft.dead_voter_grace: keeps its slot until a replacement takes it
	// superseded: a later generation of its name (NAME~G', SPEC §3.4) is
	// alive in gossip; displaced: gone, and another member alive in gossip
	// advertises its configuration address. Neither keeps a slot.
	superseded, displaced bool
}

// Gone reports whether a voter is gone in the sense of SPEC §5: gossip says
// dead or left, or its NodeId is retired, and the leader hears nothing
// from it in Raft. A gone voter keeps its slot for raft.dead_voter_grace
// unless a caught-up replacement takes it.
func Gone(m Member) bool {
	return !m.RaftContact && (!m.Alive || m.Retired)
}

// Plan computes the changes that bring the Raft configuration to the roles
// SPEC §5 asks for, in quorum-safe order: add and promote, then demote,
// then remove. Apply them one at a time and plan again after each (the
// Runner does). Plan is pure and deterministic.
//
// Roles: the fit nodes (eligible, not retired, clock healthy, alive in
// gossip — or, for a configuration server, in Raft contact — and in the
// configuration or with an address to be added at) are ranked by
// priority then NodeId. The target voters are picked from them spreading
// over distinct failure domains first, min(max_voters, fit nodes) of them,
// made odd from three up; the leader is always one. Only a voter or a
// caught-up non-voter can vote now: until a target voter has caught up, a
// current voter outside the target keeps its slot as a placeholder, or
// else the best caught-up standby takes it (a dead voter's slot is filled
// at once, SPEC §5), and a promotion that would make the count even waits
// for the next one. The non-voters are the target voters still catching up
// (not counted against max_standbys, so that no standby is dropped while a
// future voter catches up) and the best max_standbys of the other fit
// nodes; everything else is taken out of the configuration.
//
// Gone voters (Gone: dead or retired, silent in Raft) within
// raft.dead_voter_grace are held: they count towards the number of voter
// slots and fill, after the live voters and the caught-up standbys, the
// slots no fit node can take yet — so a voter stopped for a restart or an
// upgrade keeps its vote, and a replacement (a caught-up standby or
// non-voter, a new generation) takes a gone voter's slot before the gone
// voter is removed. A held voter whose slot a replacement took, or one
// past the grace (DeadPastGrace), is removed.
//
// Quorum: a demotion or removal of a live voter that would leave the live
// voters without a majority of the next configuration is withheld (a later
// plan, after the removals, makes it); dead voters (not alive, no Raft
// contact) are removed, at most a minority of the current voters per plan,
// so that a wrong "dead" verdict never hands a majority away.
func Plan(in Input) []Change {
	if in.Leader == "" {
		return nil
	}
	lim := in.Limits.normalized()
	nodes := collect(in)
	leader, ok := nodes[in.Leader]
	if !ok || !leader.inConfig || leader.suffrage != Voter {
		return nil // not a leader this plan can act for
	}
	var fit, held []*node
	for _, n := range sorted(nodes) {
		switch {
		case n.fit:
			fit = append(fit, n)
		case n.held:
			held = append(held, n)
		}
	}
	v := voterCount(len(fit)+len(held), lim.MaxVoters)
	target := pickVoters(leader, fit, v)

	voters := map[string]bool{}
	missing := v - len(target) // slots no fit node can take: only a held voter fills them
	for _, n := range fit {
		switch {
		case target[n.ID] && n.ready:
			voters[n.ID] = true
		case target[n.ID]:
			missing++
		}
	}
	// Placeholders for target voters still catching up: current voters
	// first (no change), then caught-up standbys, best first — the best
	// standby takes a gone voter's slot at once — then the held voters.
	for _, want := range []Suffrage{Voter, Nonvoter} {
		for _, n := range fit {
			if missing > 0 && !target[n.ID] && n.ready && n.suffrage == want {
				voters[n.ID] = true
				missing--
			}
		}
	}
	for _, n := range held {
		if missing > 0 {
			voters[n.ID] = true
			missing--
		}
	}
	if c := len(voters); c >= 4 && c%2 == 0 {
		for i := len(fit) - 1; i >= 0; i-- { // hold back the worst promotion
			if n := fit[i]; voters[n.ID] && n.suffrage == Nonvoter {
				delete(voters, n.ID)
				break
			}
		}
	}

	// Non-voters: the target voters still catching up, and the best
	// max_standbys of the others.
	standbys, others := map[string]bool{}, 0
	for _, n := range fit {
		switch {
		case voters[n.ID]:
		case target[n.ID]:
			standbys[n.ID] = true
		case others < lim.MaxStandbys:
			standbys[n.ID] = true
			others++
		}
	}
	return order(nodes, fit, voters, standbys)
}

func collect(in Input) map[string]*node {
	nodes := map[string]*node{}
	for _, m := range in.Members {
		if m.ID == "" {
			continue
		}
		if _, dup := nodes[m.ID]; dup {
			continue // the first entry for an id wins
		}
		nodes[m.ID] = &node{Member: m}
	}
	for _, s := range in.Config {
		n, ok := nodes[s.ID]
		if !ok {
			n = &node{Member: Member{ID: s.ID}}
			nodes[s.ID] = n
		}
		if n.inConfig {
			continue
		}
		n.inConfig, n.suffrage, n.cfgAddr = true, s.Suffrage, s.Address
		if s.Address != "" {
			n.Address = s.Address
		}
	}
	newest, claimed := gossipClaims(in.Members)
	for _, n := range nodes {
		if name, gen, ok := identity.SplitGeneration(n.ID); ok && n.inConfig && newest[name] > gen {
			n.superseded = true
		}
		n.up = n.Alive || (n.inConfig && n.RaftContact) || n.ID == in.Leader
		n.displaced = n.inConfig && !n.up && claimed[n.cfgAddr] != "" && claimed[n.cfgAddr] != n.ID
		n.fit = n.up && n.Eligible && !n.Retired && !n.superseded && n.ClockHealthy && (n.inConfig || n.Address != "")
		n.ready = n.inConfig && (n.suffrage == Voter || (n.suffrage == Nonvoter && n.CaughtUp))
		if n.ID == in.Leader {
			n.fit, n.ready = true, true // the leader is never demoted or removed by a plan
		}
		n.held = !n.fit && n.inConfig && n.suffrage == Voter && Gone(n.Member) && !n.DeadPastGrace &&
			!n.superseded && !n.displaced
	}
	return nodes
}

// gossipClaims reads what the members alive in gossip (their signed
// metadata) say about the configuration's servers: the newest generation
// of each name, and which member advertises each address.
func gossipClaims(members []Member) (newest map[string]int, claimed map[string]string) {
	newest, claimed = map[string]int{}, map[string]string{}
	for _, m := range members {
		if !m.Alive || m.ID == "" {
			continue
		}
		if name, gen, ok := identity.SplitGeneration(m.ID); ok {
			newest[name] = max(newest[name], gen)
		}
		if m.Address != "" && (claimed[m.Address] == "" || m.ID < claimed[m.Address]) {
			claimed[m.Address] = m.ID
		}
	}
	return newest, claimed
}

// sorted returns the nodes in rank order: priority, then NodeId.
func sorted(nodes map[string]*node) []*node {
	out := make([]*node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Priority != out[j].Priority {
			return out[i].Priority < out[j].Priority
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// voterCount is the number of voters for n candidates: at most max, odd
// from three up; two candidates with max > 1 both vote.
func voterCount(n, max int) int {
	v := min(n, max)
	if v >= 3 && v%2 == 0 {
		v--
	}
	return v
}

// pickVoters chooses v voters from ranked candidates: the leader, then the
// best candidate of each failure domain not yet covered, then the best of
// the rest.
func pickVoters(leader *node, ranked []*node, v int) map[string]bool {
	picked := map[string]bool{leader.ID: true}
	domains := map[string]bool{leader.FailureDomain: true}
	for _, n := range ranked {
		if len(picked) >= v {
			break
		}
		if !picked[n.ID] && !domains[n.FailureDomain] {
			picked[n.ID], domains[n.FailureDomain] = true, true
		}
	}
	for _, n := range ranked {
		if len(picked) >= v {
			break
		}
		picked[n.ID] = true
	}
	return picked
}

// order turns the wanted roles into changes in quorum-safe order, checking
// each voter-reducing step against the live voters of the configuration it
// leaves.
func order(nodes map[string]*node, fit []*node, voters, standbys map[string]bool) []Change {
	var adds, promotes, demotes, deadRemoves, removes []Change
	for _, n := range fit {
		switch {
		case standbys[n.ID] && !n.inConfig:
			adds = append(adds, Change{Kind: AddNonvoter, ID: n.ID, Address: n.Address, Why: "joins as a non-voter"})
		case voters[n.ID] && n.suffrage == Nonvoter:
			promotes = append(promotes, Change{Kind: Promote, ID: n.ID, Address: n.Address, Why: "caught up, takes a voter slot"})
		}
	}
	nVoters, nLive := 0, 0
	for _, n := range sorted(nodes) {
		if !n.inConfig {
			continue
		}
		if n.suffrage == Voter {
			nVoters++
			if n.up {
				nLive++
			}
		}
		switch {
		case voters[n.ID] || (standbys[n.ID] && n.suffrage == Nonvoter):
			// keeps its role
		case standbys[n.ID]:
			demotes = append(demotes, Change{Kind: Demote, ID: n.ID, Address: n.Address, Why: "voter slot goes to a better-placed node"})
		case n.suffrage == Voter && !n.up:
			deadRemoves = append(deadRemoves, Change{Kind: Remove, ID: n.ID, Why: whyRemoveGone(n)})
		default:
			removes = append(removes, Change{Kind: Remove, ID: n.ID, Why: whyRemove(n)})
		}
	}
	// Walk the steps: promotions add live voters; then each voter-reducing
	// step must leave the live voters a majority.
	startVoters := nVoters
	out := append(adds, promotes...)
	nVoters += len(promotes)
	nLive += len(promotes)
	keeps := func(live, total int) bool { return 2*live > total }
	for _, c := range demotes {
		if keeps(nLive-1, nVoters-1) {
			out = append(out, c)
			nVoters, nLive = nVoters-1, nLive-1
		}
	}
	maxDead := (startVoters - 1) / 2 // a minority of the voters we started with
	for i, c := range deadRemoves {
		if i < maxDead {
			out = append(out, c)
			nVoters--
		}
	}
	for _, c := range removes {
		if nodes[c.ID].suffrage != Voter {
			out = append(out, c)
			continue
		}
		if keeps(nLive-1, nVoters-1) {
			out = append(out, c)
			nVoters, nLive = nVoters-1, nLive-1
		}
	}
	return clearAddresses(nodes, out)
}

// clearAddresses orders a plan for hashicorp/raft, which refuses to add a
// server at an address another server of the configuration holds: the
// removal of such a holder comes before the additions, when it is a step
// of this plan and the holder is not up (a dead voter or any non-voter
// leaving earlier keeps the live voters' majority); an addition whose
// address stays held is withheld for a later plan, so it never blocks the
// steps after it.
func clearAddresses(nodes map[string]*node, out []Change) []Change {
	holder := map[string]*node{}
	for _, n := range sorted(nodes) {
		if n.inConfig && n.cfgAddr != "" && holder[n.cfgAddr] == nil {
			holder[n.cfgAddr] = n
		}
	}
	removal := map[string]Change{}
	for _, c := range out {
		if c.Kind == Remove {
			removal[c.ID] = c
		}
	}
	blocked := func(c Change) (h *node, ok bool) {
		h = holder[c.Address]
		return h, c.Kind == AddNonvoter && h != nil && h.ID != c.ID
	}
	var first []Change
	early := map[string]bool{}
	for _, c := range out {
		if h, ok := blocked(c); ok && !early[h.ID] && !h.up {
			if r, planned := removal[h.ID]; planned {
				first, early[h.ID] = append(first, r), true
			}
		}
	}
	rest := make([]Change, 0, len(out))
	for _, c := range out {
		if h, ok := blocked(c); ok && !early[h.ID] {
			continue // withheld: its address is still held
		}
		if c.Kind == Remove && early[c.ID] {
			continue // moved to the front
		}
		rest = append(rest, c)
	}
	return append(first, rest...)
}

func whyRemoveGone(n *node) string {
	switch {
	case n.superseded:
		return "superseded by a later generation of its name, silent in Raft"
	case n.displaced:
		return "silent in Raft; another member advertises its address"
	}
	if n.held {
		return "voter gossip-dead and silent in Raft; a replacement took its slot"
	}
	return "voter gossip-dead and silent in Raft past raft.dead_voter_grace"
}

func whyRemove(n *node) string {
	switch {
	case n.superseded:
		return "superseded by a later generation of its name"
	case n.held:
		return "retired; a replacement took its slot"
	case n.Retired:
		return "retired"
	case !n.ClockHealthy && n.up:
		return "clock not healthy"
	case !n.Eligible && n.up:
		return "not eligible"
	case !n.up:
		return "gossip-dead and silent in Raft"
	}
	return "beyond max_standbys"
}
