package cluster

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/stage"
)

// ConfigMembers lists the servers of the Raft configuration.
func ConfigMembers(r *raft.Raft) (map[string]*wire.Member, error) {
	byID := map[string]*wire.Member{}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, api.Unavailable("", "raft", "raft: %v", err)
	}
	_, leader := r.LeaderWithID()
	for _, s := range f.Configuration().Servers {
		byID[string(s.ID)] = &wire.Member{ID: string(s.ID), Address: string(s.Address), Suffrage: suffrageName(s.Suffrage), Leader: s.ID == leader}
	}
	return byID, nil
}

// members is /v1/cluster/members in cluster mode: every server of the
// Raft configuration and every gossip member (gossip-only clients too),
// with what each advertises: role, failure domain, clock state and bound
// against Δ/2 (SPEC §5), its name and generation, and the NodeIds the
// replicated state holds retired (SPEC §3.4).
func (cl *Node) Members() (wire.Members, error) {
	// The mesh, gossip and Raft are set up before the consensus is
	// stored: until it is, none of it may be read (as for health).
	if cl.host.Consensus() == nil {
		return wire.Members{}, cl.notJoinedYet()
	}
	byID := map[string]*wire.Member{}
	if r := cl.raft(); r != nil {
		var err error
		if byID, err = ConfigMembers(r); err != nil {
			return wire.Members{}, err
		}
	}
	if mem := cl.mem; mem != nil {
		for _, g := range mem.Members() {
			m := byID[g.ID]
			if m == nil {
				m = &wire.Member{ID: g.ID, Address: g.Meta.MeshAddr}
				byID[g.ID] = m
			}
			m.Gossip = g.State.String()
			m.Role, m.FailureDomain, m.Clock = g.Meta.Role.String(), g.Meta.FailureDomain, g.Meta.ClockState.String()
			m.ClockBoundMs, m.DeltaMs, m.BoundLimitMs = uint64(g.Meta.ClockBoundMs), uint64(g.Meta.DeltaMs), uint64(g.Meta.DeltaMs)/2
			m.Retired = g.Meta.Retired
		}
	}
	for _, m := range byID {
		m.Name, m.Generation, _ = identity.SplitGeneration(m.ID)
		m.Retired = m.Retired || cl.opts.FSM.IsRetired(m.ID)
	}
	return wire.Members{Members: SortMembers(byID), RetiredNodeIDs: cl.opts.FSM.Retired()}, nil
}

// SortMembers lists byID's members in NodeId order.
func SortMembers(byID map[string]*wire.Member) []wire.Member {
	out := make([]wire.Member, 0, len(byID))
	for _, m := range byID {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// transfer moves leadership (admin): to a named voter, or with to ""
// to the voter Raft picks. Only the leader can.
func (cl *Node) Transfer(ctx context.Context, to string) error {
	r := cl.raft()
	if r == nil || r.State() != raft.Leader {
		return cl.AdminNotLeader("leadership can only be transferred by the leader")
	}
	var target raft.Server
	if to != "" {
		addr, ok := cl.voterAddr(to)
		if !ok {
			return api.Refuse(api.KindNotFound, "not_found", "no voter %q in the Raft configuration", to)
		}
		target = raft.Server{ID: raft.ServerID(to), Address: addr}
	}
	c := cl.host.Consensus()
	if c == nil {
		return api.Unavailable("", "raft", "transfer leadership: raft is not open")
	}
	f, err := c.TransferLeadership(target.ID, target.Address)
	if errors.Is(err, consensus.ErrTransferTried) {
		return api.Refuse(api.KindConflict, "transfer_tried", "transfer leadership: %v", err)
	} else if err != nil {
		return api.Unavailable("", "raft", "transfer leadership: %v", err)
	}
	return cl.awaitAdmin(ctx, f, "transfer leadership")
}

// remove removes a server from the Raft configuration (admin; the
// leader only). The reconciler would re-add a live, eligible member: this
// is for members that are gone.
func (cl *Node) Remove(ctx context.Context, id string) error {
	r := cl.raft()
	if r == nil || r.State() != raft.Leader {
		return cl.AdminNotLeader("members can only be removed by the leader")
	}
	if id == cl.cfg.Name {
		return api.Refuse(api.KindConflict, "is_leader", "%q is the leader: transfer leadership first", id)
	}
	if _, ok := cl.serverAddr(id); !ok {
		return api.Refuse(api.KindNotFound, "not_found", "no member %q in the Raft configuration", id)
	}
	return cl.awaitAdmin(ctx, r.RemoveServer(raft.ServerID(id), 0, 0), "remove "+id)
}

// adminNotLeader refuses an admin change on a node that does not lead
// (503 not_leader: a client given several addresses moves on): it names
// the leader when this node knows one, and otherwise says there is none
// and where to look.
func (cl *Node) AdminNotLeader(what string) *api.Error {
	if id, _ := cl.Leader(); id != "" && id != cl.cfg.Name {
		return api.NotLeader(string(stage.Raft), "%s: this node is not the leader, %s is; send the command to its address (ticketctl --addr with every node's address finds it)", what, id)
	}
	return api.NotLeader(string(stage.Raft), "%s, and there is no leader now: the voters have no quorum or are electing one; "+
		"`ticketctl cluster health` shows which voters are down (docs/operations.md, \"Cluster health\" and the TckclkNoLeader runbook)", what)
}

func (cl *Node) voterAddr(id string) (raft.ServerAddress, bool) {
	return cl.findServer(id, true)
}

func (cl *Node) serverAddr(id string) (raft.ServerAddress, bool) {
	return cl.findServer(id, false)
}

func (cl *Node) findServer(id string, voter bool) (raft.ServerAddress, bool) {
	f := cl.raft().GetConfiguration()
	if f.Error() != nil {
		return "", false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id && (!voter || s.Suffrage == raft.Voter) {
			return s.Address, true
		}
	}
	return "", false
}

// awaitAdmin waits for an admin Raft future, bounded by ctx and 10 s; its
// reader ends at the latest with Raft's shutdown (consensus.Raft.Wait: a
// configuration change that committed just before can be left unanswered
// by Raft).
func (cl *Node) awaitAdmin(ctx context.Context, f raft.Future, what string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := cl.host.Consensus()
	if c == nil {
		return api.Unavailable("", "raft", "%s: raft is not open", what)
	}
	err := c.Wait(ctx, f)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && !errors.Is(err, consensus.ErrShutdown):
		return api.Unavailable("", "timeout", "%s: no answer within the deadline (it may still happen)", what)
	}
	return api.Unavailable("", "raft", "%s: %v", what, err)
}

// replace is ReplaceMember in cluster mode.
func (cl *Node) Replace(ctx context.Context, old, repl string) (wire.Replaced, error) {
	var res wire.Replaced
	switch {
	case ValidNodeName(old) != nil:
		return res, api.Refuse(api.KindBadRequest, "bad_request", "old: %v", ValidNodeName(old))
	case ValidNodeName(repl) != nil:
		return res, api.Refuse(api.KindBadRequest, "bad_request", "new: %v", ValidNodeName(repl))
	case old == repl:
		return res, api.Refuse(api.KindBadRequest, "bad_request", "old and new are both %q: replace a NodeId with another", old)
	}
	r := cl.raft()
	if r == nil || r.State() != raft.Leader {
		return res, cl.AdminNotLeader("members can only be replaced by the leader")
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return res, api.Unavailable("", "raft", "raft: %v", err)
	}
	servers := f.Configuration().Servers
	var oldIn bool
	newSuffrage := ""
	for _, s := range servers {
		switch string(s.ID) {
		case old:
			oldIn = true
		case repl:
			newSuffrage = suffrageName(s.Suffrage)
		}
	}
	if !oldIn {
		return res, api.Refuse(api.KindNotFound, "not_found", "old %q is not in the Raft configuration", old)
	}
	if old == cl.cfg.Name {
		return res, api.Refuse(api.KindConflict, "is_leader", "old %q is the leader: transfer leadership first", old)
	}
	alive := map[string]bool{}
	var nm *membership.Member
	for _, m := range cl.mem.Members() {
		alive[m.ID] = m.State == membership.StateAlive
		if m.ID == repl {
			nm = &m
		}
	}
	switch {
	case nm == nil || nm.State != membership.StateAlive:
		return res, api.Refuse(api.KindNotFound, "not_found", "new %q is not an alive gossip member: start it with this cluster's gossip secret, its key in every node's trusted_peer_keys, and join_addrs", repl)
	case nm.Meta.Retired || cl.opts.FSM.IsRetired(repl):
		return res, api.Refuse(api.KindConflict, "retired", "new %q is a retired NodeId: bring a NodeId never used before", repl)
	case !nm.Meta.RaftEligible || nm.Meta.Role == membership.RoleClient || !nm.Meta.DataDirOK:
		return res, api.Refuse(api.KindConflict, "not_eligible", "new %q is not Raft-eligible (raft.eligible false, raft.role client, or its data dir unresolved)", repl)
	case nm.Meta.ClockState != membership.ClockHealthy:
		return res, api.Refuse(api.KindConflict, "clock", "new %q does not advertise a healthy clock (%s)", repl, nm.Meta.ClockState)
	case uint64(nm.Meta.DeltaMs) != cl.opts.FSM.Delta() && cl.opts.FSM.Delta() != 0:
		return res, api.Refuse(api.KindConflict, "delta_mismatch", "new %q advertises Δ %d ms, the cluster's is %d ms", repl, nm.Meta.DeltaMs, cl.opts.FSM.Delta())
	case newSuffrage == "voter":
		return res, api.Refuse(api.KindConflict, "already_voter", "new %q is already a voter", repl)
	}
	// Quorum-safe: the voters left after OLD goes must keep a majority
	// alive in gossip (NEW does not vote until promoted).
	if up, left := votersLeft(servers, alive, old); up <= left/2 {
		return res, api.Refuse(api.KindConflict, "quorum", "removing old %q would leave %d of %d voters alive, no quorum: bring the others back first", old, up, left)
	}
	if err := cl.proposeRetire(ctx, old); err != nil {
		return res, api.Unavailable("", "raft", "recording old %q retired: %v", old, err)
	}
	if newSuffrage == "" {
		if err := cl.awaitAdmin(ctx, r.AddNonvoter(raft.ServerID(repl), raft.ServerAddress(nm.Meta.MeshAddr), 0, 0), "add new "+repl+" as a non-voter"); err != nil {
			return res, err
		}
		newSuffrage = "nonvoter"
	}
	if rec := cl.runner(); rec != nil {
		rec.Trigger()
	}
	cl.opts.Logger.Warn("replacing a member: old retired, new joins as a non-voter for the reconciler to promote", "old", old, "new", repl)
	return wire.Replaced{Old: old, New: repl, NewSuffrage: newSuffrage}, nil
}

// votersLeft counts the voters other than old, and those of them alive.
func votersLeft(servers []raft.Server, alive map[string]bool, old string) (up, left int) {
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != old {
			left++
			if alive[string(s.ID)] {
				up++
			}
		}
	}
	return up, left
}

func suffrageName(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "nonvoter"
}
