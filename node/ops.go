package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// serving returns nil when this node may take a client request.
func (n *Node) serving() error {
	if n.cl != nil && n.cl.checkRemoved() {
		return n.cl.removedError()
	}
	stage, reason := n.stage.get()
	if stage != StageReady {
		if stage == StageFailed {
			if err := n.guard.Check(); err != nil {
				return n.refuseClock(err) // cluster mode says retired (cluster_failed.go)
			}
		}
		if reason == "" {
			reason = string(stage)
		}
		return api.Unavailable(string(stage), reason, "the node is not ready (stage %s: %s)", stage, reason)
	}
	r := n.raft()
	if r == nil || r.State() != raft.Leader || n.barrierTerm.Load() != r.CurrentTerm() {
		return api.NotLeader(string(StageRaft), "this node is not the leader of the current term")
	}
	return nil
}

// clockOK is the pre-proposal clock check (SPEC §3.2) as an API answer.
func (n *Node) clockOK() error {
	if err := n.guard.Check(); err != nil {
		return n.refuseClock(err) // cluster mode says retired (cluster_failed.go)
	}
	return nil
}

// readable is the linearizable-read rule of SPEC §4: this node leads, its
// Barrier committed in the current term, and VerifyLeader succeeds now.
func (n *Node) readable(ctx context.Context) error {
	if err := n.serving(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.cons.Load().VerifyLeader(ctx); err != nil {
		return api.NotLeader(string(StageRaft), "leadership not verified: %v", err)
	}
	return nil
}

// Get is a linearizable read of one ticket (api.Backend); a cluster
// follower forwards it to the leader.
func (n *Node) Get(ctx context.Context, name string) (ticket.Ticket, bool, error) {
	if c, ok := n.forwardRoute(); ok {
		return n.cl.fwd.forwardGet(ctx, c, name)
	}
	return n.getLocal(ctx, name)
}

// Watch is the blocking read of SPEC §4.2 (api.Watcher); a cluster
// follower forwards it to the leader.
func (n *Node) Watch(ctx context.Context, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error) {
	if c, ok := n.forwardRoute(); ok {
		return n.cl.fwd.forwardWatch(ctx, c, name, index, wait)
	}
	return n.watchLocal(ctx, name, index, wait)
}

func (n *Node) getLocal(ctx context.Context, name string) (ticket.Ticket, bool, error) {
	if err := n.readable(ctx); err != nil {
		return ticket.Ticket{}, false, err
	}
	t, ok := n.fsm.Get(name)
	return t, ok, nil
}

// List is a linearizable read of tickets by prefix (api.Backend); a
// cluster follower forwards it to the leader.
func (n *Node) List(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	if c, ok := n.forwardRoute(); ok {
		return n.cl.fwd.forwardList(ctx, c, prefix, limit)
	}
	return n.listLocal(ctx, prefix, limit)
}

func (n *Node) listLocal(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	if err := n.readable(ctx); err != nil {
		return nil, false, err
	}
	ts, more := n.fsm.List(prefix, limit)
	n.waits.queued(ts)
	return ts, more, nil
}

// Readiness is /readyz (api.Backend): ready only at StageReady, as the
// leader of the current term (a cluster node: once uniform, with a known
// leader), with a healthy clock and no hold-off.
// Otherwise the stage and why: clock_check with its progress, failed with
// the SPEC §1.5 reason, hold_off with the instant.
func (n *Node) Readiness() wire.Health {
	stage, reason := n.stage.get()
	h := wire.Health{Status: "unavailable", DevReference: n.mon != nil && n.cfg.Clock.DevReference}
	notLeader := func() bool { return n.serving() != nil }
	if n.cl != nil {
		switch stage {
		case StageRaft, StageReplay, StageUniform, StageReady, StageHoldOff:
			// SPEC §3.5: uniform, then ready while a leader is known
			// (followers forward); the clock and hold-off checks follow.
			stage, reason, h.Detail = n.cl.readiness(reason)
			notLeader = func() bool { return false }
		}
	}
	switch stage {
	case StageReady:
		if notLeader() {
			stage, reason = StageRaft, "not the leader of the current term"
		} else if err := n.clockOK(); err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				stage, reason, h.Detail = Stage(ae.Stage), ae.Reason, ae.Message
			} else {
				stage, reason, h.Detail = StageFailed, "clock", err.Error()
			}
		} else if n.hold.active(n.wall.Now()) {
			stage, reason, h.Detail = StageHoldOff, "hold_off", n.hold.text()
			h.HoldOffUntilUnixMs, _ = protocol.CeilUnixMs(n.hold.until)
		} else {
			h.Status = "ok"
		}
	case StageRemoved:
		h.Detail = n.cl.removedError().Message
	case StageFailed:
		if ce := n.clockErr(); ce != nil {
			reason, h.Detail = string(ce.Reason), ce.Error()
		}
	case StageClockCheck:
		if n.mon != nil {
			st := n.mon.Status()
			h.Detail = fmt.Sprintf("%d of %d consecutive healthy samples", min(st.HealthyRounds, clockhealth.ClockCheckSamples), clockhealth.ClockCheckSamples)
		}
	}
	h.Stage, h.Reason = string(stage), reason
	return h
}

// Status is /v1/status (api.Backend).
func (n *Node) Status(ctx context.Context) wire.Status {
	h := n.Readiness()
	st := wire.Status{
		NodeID: n.cfg.Cluster.Name, Mode: n.mode(), Stage: h.Stage, Ready: h.Status == "ok", Reason: h.Reason,
		DeltaMs: n.fsm.Delta(), TicketsActive: n.fsm.Len(), HoldOffCause: n.hold.cause,
	}
	if st.DeltaMs == 0 {
		st.DeltaMs = n.cfg.Clock.DeltaMs
	}
	if !n.hold.until.IsZero() {
		st.HoldOffUntilUnixMs, _ = protocol.CeilUnixMs(n.hold.until)
	}
	if r := n.raft(); r != nil {
		st.Role = roleName(r.State())
		_, leader := r.LeaderWithID()
		st.Leader = string(leader)
		if n.cl != nil {
			st.Leader, _ = n.cl.leader() // a non-voter outside the configuration: the one its voters name
		}
		st.Raft = wire.RaftStatus{Term: r.CurrentTerm(), LastIndex: r.LastIndex(), CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex()}
		st.Raft.LastSnapshotIndex, _ = strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64)
	} else if n.cl != nil && !n.cl.eligible() {
		st.Role = "client" // a gossip-only client: no Raft, forwards to the leader
		st.Leader, _ = n.cl.leader()
	} else {
		st.Role = "starting"
	}
	if st.Stage == string(StageRemoved) {
		st.Role = "removed" // out of the configuration for good, whatever its Raft still says
	}
	if cr, ok := n.guard.(clockReporter); ok {
		st.Clock = cr.ClockStatus()
		if st.Clock.Stage == string(clockhealth.StageChecked) {
			// A proven clock is at the node's stage: one lifecycle.
			st.Clock.Stage = st.Stage
		}
	} else {
		err := n.guard.Check()
		st.Clock = wire.ClockStatus{Source: "injected", Stage: "guard", Healthy: err == nil, DeltaMs: n.cfg.Clock.DeltaMs}
		if err != nil {
			st.Clock.Reason = clockReason(err)
		}
	}
	if p := n.hold.state.Load(); p != nil {
		st.Clock.FailedMarker = *p
	}
	return st
}

func roleName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	case raft.Follower:
		return "follower"
	}
	return "shutdown"
}

// Members lists the Raft configuration (admin, api.Backend), in cluster
// mode with every gossip member (admin_cluster.go).
func (n *Node) Members(ctx context.Context) (wire.Members, error) {
	switch {
	case n.cl == nil && n.raft() == nil:
		return wire.Members{}, api.Unavailable(string(StageStarting), "starting", "raft is not open yet")
	case n.cl != nil && n.cons.Load() == nil:
		// The mesh, gossip and Raft are set up before the consensus is
		// stored: until it is, none of it may be read (as for health).
		return wire.Members{}, n.notJoinedYet()
	}
	return n.members()
}

var errSingleNode = api.Refuse(api.KindConflict, "single_node",
	"this is a single-node cluster (cluster.enabled: false): there is no other voter")

// TransferLeadership has nowhere to go in single-node mode (api.Backend).
func (n *Node) TransferLeadership(ctx context.Context, to string) error {
	if n.cl != nil {
		return n.clusterTransfer(ctx, to)
	}
	return errSingleNode
}

// RemoveMember cannot remove the only voter (api.Backend).
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	if n.cl != nil {
		return n.clusterRemove(ctx, id)
	}
	if id != n.cfg.Cluster.Name {
		return api.Refuse(api.KindNotFound, "not_found", "no member %q", id)
	}
	return errSingleNode
}

// Snapshot takes a Raft snapshot of this node's state now (admin,
// api.Backend). Any node whose Raft is open takes its own — a follower
// too: its snapshot is of the log it applied, exactly as the leader's
// would be at that index (backups of a follower, compaction). A FAILED or
// stopping node refuses (503).
func (n *Node) Snapshot(ctx context.Context) (wire.SnapshotInfo, error) {
	stage, reason := n.stage.get()
	r := n.raft()
	switch {
	case stage == StageFailed || stage == StageStopping:
		return wire.SnapshotInfo{}, api.Unavailable(string(stage), cmp.Or(reason, string(stage)), "this node takes no snapshot at stage %s", stage)
	case r == nil && n.cl != nil && !n.cl.eligible():
		return wire.SnapshotInfo{}, api.Refuse(api.KindConflict, "no_log", "this node is a gossip-only client and keeps no Raft log; ask a voter or standby for a snapshot")
	case r == nil:
		return wire.SnapshotInfo{}, api.Unavailable(string(stage), cmp.Or(reason, string(stage)), "raft is not open yet (stage %s); a snapshot needs this node's log", stage)
	}
	tickets := n.fsm.Len()
	start := time.Now()
	f := r.Snapshot()
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return wire.SnapshotInfo{}, api.Refuse(api.KindConflict, "nothing_new", "nothing new to snapshot since the last one")
		}
		return wire.SnapshotInfo{}, api.Unavailable("", "snapshot", "snapshot failed: %v", err)
	}
	took := time.Since(start)
	meta, rc, err := f.Open()
	if err != nil {
		return wire.SnapshotInfo{}, fmt.Errorf("node: opening the new snapshot: %w", err)
	}
	rc.Close()
	role := roleName(r.State())
	n.log.Info("snapshot taken", "id", meta.ID, "index", meta.Index, "size_bytes", meta.Size, "took", took.Round(time.Millisecond), "role", role)
	return wire.SnapshotInfo{ID: meta.ID, Index: meta.Index, Term: meta.Term, SizeBytes: meta.Size, DurationMs: took.Milliseconds(), Tickets: tickets,
		NodeID: n.cfg.Cluster.Name, Role: role}, nil
}
