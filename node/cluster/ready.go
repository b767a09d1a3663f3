package cluster

// Cluster readiness (SPEC §3.5): after bootstrap or join,
// a node becomes ready only once `uniform` held — every voter advertises
// the same Δ, the same protocol version and a healthy clock sampled within
// the staleness window. Uniform is latched: afterwards the node stays ready
// while its own clock is healthy and a leader is known (another voter's
// FAILED does not take it down). A Δ that differs from the replicated Δ or
// from a voter's advertised Δ never becomes ready.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/protocol"
)

// Readiness reasons of a cluster node (wire.Health.Reason).
const (
	reasonUniform       = "uniform"        // waiting for the voters to agree
	reasonDeltaMismatch = "delta_mismatch" // this node's Δ differs: never ready
	reasonNoLeader      = "no_leader"
	reasonRemoved       = "removed" // this NodeId was retired while it ran (stage.Removed)
)

// uniformView is what the uniform check compares: this node's Δ and
// protocol version, its wall time and the staleness window.
type uniformView struct {
	deltaMs  uint64
	protocol uint8
	nowMs    int64
	staleMs  uint64
}

// uniformWhy is "" when every voter is uniform with v, or why not (naming
// the first voter that is not, sorted by NodeId). mismatch reports a Δ
// difference (this node, or the voter, is misconfigured: never uniform).
func uniformWhy(v uniformView, voters []string, members []membership.Member) (why string, mismatch bool) {
	if len(voters) == 0 {
		return "no voters known yet", false
	}
	byID := make(map[string]membership.Member, len(members))
	for _, m := range members {
		byID[m.ID] = m
	}
	voters = slices.Clone(voters)
	slices.Sort(voters)
	for _, id := range voters {
		m, ok := byID[id]
		switch {
		case !ok || m.State != membership.StateAlive:
			return fmt.Sprintf("waiting for %s (not alive in gossip)", id), false
		case uint64(m.Meta.DeltaMs) != v.deltaMs:
			return fmt.Sprintf("waiting for %s (Δ %d ≠ %d)", id, m.Meta.DeltaMs, v.deltaMs), true
		case m.Meta.ProtocolVersion != v.protocol:
			return fmt.Sprintf("waiting for %s (protocol version %d ≠ %d)", id, m.Meta.ProtocolVersion, v.protocol), false
		case m.Meta.ClockState != membership.ClockHealthy:
			return fmt.Sprintf("waiting for %s (clock %s)", id, m.Meta.ClockState), false
		case m.Meta.ClockSampleUnixMs != 0 && v.nowMs-m.Meta.ClockSampleUnixMs > int64(v.staleMs+v.deltaMs):
			// Healthy clocks differ by at most Δ: allow it on top of the window.
			return fmt.Sprintf("waiting for %s (clock sample %d ms old, staleness window %d ms)", id, v.nowMs-m.Meta.ClockSampleUnixMs, v.staleMs), false
		}
	}
	return "", false
}

// voters are the voters this node knows: its Raft configuration's, else
// (not yet in a configuration, or a gossip-only client) the members that
// advertise the voter role.
func (cl *Node) voters() []string {
	var out []string
	if r := cl.raft(); r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if s.Suffrage == raft.Voter {
					out = append(out, string(s.ID))
				}
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, m := range cl.mem.Members() {
		if m.State == membership.StateAlive && m.Meta.Role == membership.RoleVoter {
			out = append(out, m.ID)
		}
	}
	return out
}

// role is this node's place in its Raft configuration.
func (cl *Node) role() membership.Role {
	if !cl.Eligible() {
		return membership.RoleClient
	}
	r := cl.raft()
	if r == nil {
		return membership.RoleNone
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return membership.RoleNone
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == cl.cfg.Name {
			if s.Suffrage == raft.Voter {
				return membership.RoleVoter
			}
			return membership.RoleStandby
		}
	}
	return membership.RoleNone
}

// deltaMismatch is why this node's Δ differs from the replicated Δ, or "".
func (cl *Node) deltaMismatch() string {
	if d := cl.opts.FSM.Delta(); d != 0 && d != cl.opts.DeltaMs {
		return fmt.Sprintf("clock.delta_ms is %d but the cluster's replicated Δ is %d: this node never becomes ready, votes or joins; configure Δ %d", cl.opts.DeltaMs, d, d)
	}
	return ""
}

// readiness is the cluster part of /readyz: stage.Ready (ok) once uniform
// latched, with a known leader (this node's barrier committed when it
// leads); otherwise the stage, reason and detail. The caller still checks
// this node's own clock and hold-off.
func (cl *Node) Readiness(reason string) (stage.Stage, string, string) {
	// Until RunWith stores the consensus handle, open is still setting up
	// the mesh, Raft and gossip (cl.mem): none of it may be read yet. The
	// atomic store comes after open, so once it is seen they are set.
	if cl.host.Consensus() == nil {
		return stage.Raft, reasonNoLeader, "opening the cluster: mesh, raft, gossip"
	}
	if cl.checkRemoved() {
		return stage.Removed, reasonRemoved, cl.removedError().Message
	}
	if why := cl.deltaMismatch(); why != "" {
		cl.noteMismatch(why)
		return stage.Uniform, reasonDeltaMismatch, why
	}
	why, mismatch := cl.checkUniform()
	if mismatch {
		cl.noteMismatch("uniform: " + why)
		return stage.Uniform, reasonDeltaMismatch, "uniform: " + why
	}
	if cl.raft() == nil && cl.Eligible() {
		return stage.Raft, reasonNoLeader, "raft is not open yet"
	}
	leader, _ := cl.Leader()
	switch {
	case leader == "":
		if reason == "" {
			reason = reasonNoLeader
		}
		if why := cl.bootstrapRefusal(); why != "" {
			return stage.Raft, reason, "no leader known: not bootstrapping: " + why
		}
		return stage.Raft, reason, "no leader known (bootstrap or join pending, or an election)"
	case leader == cl.cfg.Name && cl.host.Serving() != nil:
		return stage.Replay, "replay", "this node leads but its barrier has not committed in this term"
	}
	if why != "" {
		return stage.Uniform, reasonUniform, "uniform: " + why
	}
	return stage.Ready, "", ""
}

// checkUniform evaluates uniform until it first holds, then latches.
func (cl *Node) checkUniform() (string, bool) {
	cl.mu.Lock()
	done := cl.uniform
	cl.mu.Unlock()
	if done {
		return "", false
	}
	v := uniformView{deltaMs: cl.opts.DeltaMs, protocol: protocol.Version, nowMs: cl.opts.Wall.Now().UnixMilli(), staleMs: cl.opts.StalenessMs}
	why, mismatch := uniformWhy(v, cl.voters(), cl.mem.Members())
	if why != "" {
		return why, mismatch
	}
	cl.mu.Lock()
	first := !cl.uniform
	cl.uniform = true
	cl.mu.Unlock()
	if first {
		cl.log.Info("uniform: every voter advertises the same Δ, protocol version and a healthy clock", "delta_ms", v.deltaMs)
	}
	return "", false
}

// noteMismatch logs a Δ mismatch once per distinct text.
func (cl *Node) noteMismatch(why string) {
	cl.mu.Lock()
	seen := cl.mismatch == why
	cl.mismatch = why
	cl.mu.Unlock()
	if !seen {
		cl.log.Error("Δ mismatch: not ready", "why", why)
	}
}

// clockMeta fills the advertised clock state, bound and sample time.
func (cl *Node) clockMeta(m *membership.Meta) {
	m.ClockState = membership.ClockHealthy
	if err := cl.host.CheckClock(); err != nil {
		m.ClockState = membership.ClockCheck
		if cl.host.ClockErr() != nil {
			m.ClockState = membership.ClockFailed
		}
	}
	bound, at := cl.host.ClockSample()
	m.ClockBoundMs, m.ClockSampleUnixMs = uint32(min(bound, uint64(^uint32(0)))), at
}

// refreshLoop re-advertises this node's metadata every interval (the
// clock's probe interval) and at once when the clock fails, so peers see
// healthy or FAILED within the staleness window; it also re-evaluates
// uniform, so the log says when it first holds.
func (cl *Node) refreshLoop(ctx context.Context, newTicker clockhealth.TickerFunc) {
	failed := cl.opts.ClockFailed
	every := cl.opts.ProbeInterval
	if every <= 0 {
		every = time.Second
	}
	t := newTicker("meta", every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-failed:
			failed = nil
		case <-t.C():
		}
		if cl.role() != membership.RoleVoter { // a client or a non-voter (peer.go Leader)
			cl.discoverLeader(ctx)
		}
		uctx, cancel := context.WithTimeout(ctx, every)
		if err := cl.mem.UpdateMeta(uctx); err != nil && ctx.Err() == nil {
			cl.log.Debug("re-advertising metadata", "err", err)
		}
		cancel()
		cl.sampleBounds(time.Now())
		if cur, _ := cl.opts.Stage.Get(); cur != stage.Failed && cur != stage.Stopping {
			_, _, _ = cl.Readiness("")
		}
	}
}
