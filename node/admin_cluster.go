package node

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
)

// clusterMembers is /v1/cluster/members in cluster mode: every server of
// the Raft configuration and every gossip member (gossip-only clients
// too), with what each advertises: role, failure domain, clock state and
// bound against Δ/2 (SPEC §5, issue 12 item 7).
func (n *Node) clusterMembers() ([]wire.Member, error) {
	byID := map[string]*wire.Member{}
	if r := n.raft(); r != nil {
		f := r.GetConfiguration()
		if err := f.Error(); err != nil {
			return nil, api.Unavailable("", "raft", "raft: %v", err)
		}
		_, leader := r.LeaderWithID()
		for _, s := range f.Configuration().Servers {
			suff := "voter"
			if s.Suffrage != raft.Voter {
				suff = "nonvoter"
			}
			byID[string(s.ID)] = &wire.Member{ID: string(s.ID), Address: string(s.Address), Suffrage: suff, Leader: s.ID == leader}
		}
	}
	if mem := n.cl.mem; mem != nil {
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
	out := make([]wire.Member, 0, len(byID))
	for _, m := range byID {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// clusterTransfer moves leadership (admin): to a named voter, or with to ""
// to the voter Raft picks. Only the leader can.
func (n *Node) clusterTransfer(ctx context.Context, to string) error {
	r := n.raft()
	if r == nil || r.State() != raft.Leader {
		return api.NotLeader(string(StageRaft), "leadership can only be transferred by the leader")
	}
	var f raft.Future
	if to == "" {
		f = r.LeadershipTransfer()
	} else {
		addr, ok := n.voterAddr(to)
		if !ok {
			return api.Refuse(api.KindNotFound, "not_found", "no voter %q in the Raft configuration", to)
		}
		f = r.LeadershipTransferToServer(raft.ServerID(to), addr)
	}
	return n.awaitAdmin(ctx, f, "transfer leadership")
}

// clusterRemove removes a server from the Raft configuration (admin; the
// leader only). The reconciler would re-add a live, eligible member: this
// is for members that are gone.
func (n *Node) clusterRemove(ctx context.Context, id string) error {
	r := n.raft()
	if r == nil || r.State() != raft.Leader {
		return api.NotLeader(string(StageRaft), "members can only be removed by the leader")
	}
	if id == n.cfg.Cluster.Name {
		return api.Refuse(api.KindConflict, "is_leader", "%q is the leader: transfer leadership first", id)
	}
	if _, ok := n.serverAddr(id); !ok {
		return api.Refuse(api.KindNotFound, "not_found", "no member %q in the Raft configuration", id)
	}
	return n.awaitAdmin(ctx, r.RemoveServer(raft.ServerID(id), 0, 0), "remove "+id)
}

func (n *Node) voterAddr(id string) (raft.ServerAddress, bool) {
	return n.findServer(id, true)
}

func (n *Node) serverAddr(id string) (raft.ServerAddress, bool) {
	return n.findServer(id, false)
}

func (n *Node) findServer(id string, voter bool) (raft.ServerAddress, bool) {
	f := n.raft().GetConfiguration()
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

// awaitAdmin waits for an admin Raft future, bounded by ctx and 10 s.
func (n *Node) awaitAdmin(ctx context.Context, f raft.Future, what string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Error() }() // ends when Raft answers, at the latest at shutdown
	select {
	case err := <-done:
		if err != nil {
			return api.Unavailable("", "raft", "%s: %v", what, err)
		}
		return nil
	case <-ctx.Done():
		return api.Unavailable("", "timeout", "%s: no answer within the deadline (it may still happen)", what)
	}
}
