package cluster

// Cluster health (SPEC §3.5): GET /v1/cluster/health lists every voter and
// standby with its gossip state, clock, last Raft contact and log lag, and
// the cluster's failure tolerance, as Consul's autopilot health does.
//
// Any node answers, from what it knows: the leader knows every server's
// last Raft contact (contactTransport: when each last answered its
// AppendEntries); a follower knows only its own contact with the leader.
// Every node asks each server's last log index over the mesh at the time
// of the request (the peer-status query the reconciler uses), so a server
// that is gone, or restarted and not yet serving its mesh, shows as not
// answering rather than by stale gossip. The answer says who served it
// (served_by, leader_view); the Go client prefers the leader's.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
)

// healthContactMax is how recently a server must have been in Raft
// contact with the leader to count as healthy: 20 heartbeats of the
// cluster timing (Consul's autopilot allows 200 ms; a shared machine
// needs more).
const healthContactMax = time.Second

// healthMaxLag is how many log entries a healthy server may trail the
// leader by: as many as a non-voter may and still count as caught up.
const healthMaxLag = reconcile.DefaultMaxLag

// Health is GET /v1/cluster/health, from what this node knows; a node
// still starting answers 503 (its mesh, gossip and Raft transport are set
// before the consensus is stored: once it is, health may read them).
func (cl *Node) Health(ctx context.Context) (wire.ClusterHealth, error) {
	if cl.host.Consensus() == nil {
		return wire.ClusterHealth{}, cl.notJoinedYet()
	}
	return cl.health(ctx), nil
}

// notJoinedYet is the 503 of a cluster view asked of a node still
// starting: its mesh, gossip and Raft are not all set up yet.
func (cl *Node) notJoinedYet() *api.Error {
	cur, _ := cl.opts.Stage.Get()
	return api.Unavailable(string(cur), "starting", "this node has not joined the cluster yet (stage %s)", cur)
}

// serverView is what health gathers about one server.
type serverView struct {
	h      wire.ServerHealth
	member *membership.Member // nil: not in gossip
	index  uint64
	known  bool  // index answered
	err    error // why the index is unknown
}

// health is the cluster node's answer, from what this node knows.
func (cl *Node) health(ctx context.Context) wire.ClusterHealth {
	self := cl.cfg.Name
	r := cl.raft()
	leader, _ := cl.Leader()
	out := wire.ClusterHealth{ServedBy: self, Leader: leader}
	out.LeaderView = r != nil && leader == self && r.State() == raft.Leader

	var views []*serverView
	byID := map[string]*serverView{}
	add := func(id, suffrage string) {
		v := &serverView{h: wire.ServerHealth{ID: id, Suffrage: suffrage, Leader: id == leader}}
		views = append(views, v)
		byID[id] = v
	}
	configKnown := false
	if r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			configKnown = true
			for _, s := range f.Configuration().Servers {
				add(string(s.ID), suffrageName(s.Suffrage))
			}
		}
	}
	for _, m := range cl.mem.Members() {
		if _, ok := byID[m.ID]; !ok {
			eligible := m.Meta.RaftEligible && m.Meta.Role != membership.RoleClient && m.Meta.DataDirOK && !m.Meta.Retired
			switch {
			case !configKnown && m.Meta.Role == membership.RoleVoter:
				add(m.ID, "voter") // a gossip-only client: the roles gossip shows
			case !configKnown && m.Meta.Role == membership.RoleStandby:
				add(m.ID, "nonvoter")
			case configKnown && eligible && m.State == membership.StateAlive:
				add(m.ID, "") // eligible, not in the Raft configuration (yet)
			default:
				continue
			}
		}
		v := byID[m.ID]
		v.member = &m
		v.h.Gossip, v.h.Clock, v.h.Version = m.State.String(), m.Meta.ClockState.String(), m.Meta.Version
		v.h.ClockBoundMs, v.h.Retired = uint64(m.Meta.ClockBoundMs), m.Meta.Retired
		v.h.ClockBoundHistoryMs = cl.bounds.get(m.ID)
	}

	slices.SortFunc(views, func(a, b *serverView) int { return strings.Compare(a.h.ID, b.h.ID) })

	// Each server's last log index, asked now (this node's own from its
	// Raft), in parallel.
	var wg sync.WaitGroup
	for _, v := range views {
		switch {
		case v.h.ID == self && r != nil:
			v.index, v.known = r.LastIndex(), true
		case v.member == nil || v.member.State != membership.StateAlive:
			v.err = errors.New("not alive in gossip")
		default:
			wg.Go(func() {
				st, err := cl.queryPeer(ctx, v.h.ID, v.member.Meta.MeshAddr)
				v.index, v.known, v.err = st.LastIndex, err == nil, err
			})
		}
	}
	wg.Wait()
	var leaderIndex uint64
	leaderKnown := false
	if lv := byID[leader]; lv != nil && lv.known {
		leaderIndex, leaderKnown = lv.index, true
		if out.LeaderView {
			leaderIndex = r.LastIndex() // read after the others answered, so no lag comes out negative
		}
	}

	now := time.Now()
	if cl.tr != nil {
		now = cl.tr.now()
	}
	for _, v := range views {
		h := &v.h
		if v.known {
			idx := v.index
			h.LastIndex = &idx
			if leaderKnown {
				lag := leaderIndex - min(idx, leaderIndex)
				h.LogLag = &lag
			}
		}
		switch {
		case h.Leader:
			zero := int64(0)
			h.LastContactMs = &zero
		case out.LeaderView:
			if at, term, ok := cl.tr.lastContact(h.ID); ok {
				ms := now.Sub(at).Milliseconds()
				h.LastContactMs, h.Term = &ms, &term
			}
		case h.ID == self && r != nil:
			if at := r.LastContact(); !at.IsZero() {
				ms := time.Since(at).Milliseconds()
				h.LastContactMs = &ms
			}
		}
		if h.ID == self && r != nil {
			term := r.CurrentTerm()
			h.Term = &term
		}
		if h.ID == self && r != nil && cl.host.ClockErr() != nil {
			h.Clock = membership.ClockFailed.String()
		}
		h.Why = cl.unhealthy(v, out.LeaderView, cl.opts.FSM.IsRetired(h.ID))
		h.Healthy = h.Why == ""
		if h.Suffrage == "voter" {
			out.Voters++
			if h.Healthy {
				out.HealthyVoters++
			}
		}
		out.Servers = append(out.Servers, *h)
	}
	out.Healthy = leader != "" && out.Voters > 0 && out.HealthyVoters == out.Voters
	if out.Voters > 0 {
		out.MaxFailureTolerance = (out.Voters - 1) / 2
		out.FailureTolerance = max(out.HealthyVoters-(out.Voters/2+1), 0)
	}
	return out
}

// unhealthy says why a server is not healthy, or "".
func (cl *Node) unhealthy(v *serverView, leaderView, retired bool) string {
	h := v.h
	switch {
	case h.Retired || retired:
		return "retired"
	case h.Gossip == "":
		return "not in gossip"
	case h.Gossip != membership.StateAlive.String():
		return "gossip " + h.Gossip
	case h.Clock != membership.ClockHealthy.String():
		return "clock " + h.Clock
	case h.Suffrage == "":
		return "not in the Raft configuration"
	case !v.known:
		return fmt.Sprintf("no answer over the mesh (%v)", v.err)
	case h.LogLag != nil && *h.LogLag > healthMaxLag:
		return fmt.Sprintf("log lag %d entries (more than %d)", *h.LogLag, healthMaxLag)
	case h.LastContactMs != nil && time.Duration(*h.LastContactMs)*time.Millisecond > healthContactMax:
		return fmt.Sprintf("last Raft contact %v ago (more than %v)", (time.Duration(*h.LastContactMs) * time.Millisecond).Round(time.Millisecond), healthContactMax)
	case leaderView && !h.Leader && h.LastContactMs == nil:
		return "never in Raft contact with this leader"
	}
	return ""
}

// lastContact is when id last answered this node's AppendEntries (its
// heartbeats included), as the leader, and the Raft term it answered in.
func (t *contactTransport) lastContact(id string) (time.Time, uint64, bool) {
	if t == nil {
		return time.Time{}, 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.last[raft.ServerID(id)]
	return at, t.term[raft.ServerID(id)], ok
}
