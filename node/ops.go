package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/tckclk/tckclk/node/api/wire"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/ticket"
)

// floorMs and ceilMs turn a wall time into Unix ms (SPEC §4 rounding);
// false before 1970.
func floorMs(t time.Time) (uint64, bool) {
	ns := t.UnixNano()
	if ns < 0 {
		return 0, false
	}
	return uint64(ns) / 1e6, true
}

func ceilMs(t time.Time) (uint64, bool) {
	ns := t.UnixNano()
	if ns < 0 {
		return 0, false
	}
	return (uint64(ns) + 1e6 - 1) / 1e6, true
}

// serving returns nil when this node may take a client request.
func (n *Node) serving() error {
	stage, reason := n.ready.Get()
	if stage != StageReady {
		if stage == StageFailed {
			if err := n.guard.Check(); err != nil {
				return clockRefusal(err)
			}
		}
		if reason == "" {
			reason = string(stage)
		}
		return api.Unavailable(string(stage), reason, "the node is not ready (stage %s: %s)", stage, reason)
	}
	r := n.raft()
	if r == nil || r.State() != raft.Leader || n.barrierTerm.Load() != r.CurrentTerm() {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "not_leader", Stage: string(StageRaft), Message: "this node is not the leader of the current term"}
	}
	return nil
}

// clockOK is the pre-proposal clock check (SPEC §3.2) as an API answer.
func (n *Node) clockOK() error {
	if err := n.guard.Check(); err != nil {
		return clockRefusal(err)
	}
	return nil
}

// holdingOff reports whether Grant and Expire are refused at wall time now.
func (n *Node) holdingOff(now time.Time) bool {
	return !n.holdOff.IsZero() && !now.After(n.holdOff)
}

func (n *Node) holdOffText() string {
	s := "Grant and Expire refused until " + n.holdOff.UTC().Format(time.RFC3339Nano)
	if n.holdOffCause != "" {
		s += ": " + n.holdOffCause
	}
	return s
}

// Write proposes a Grant, Renew or Release (api.Backend).
func (n *Node) Write(ctx context.Context, w api.Write) (api.Written, error) {
	if err := n.serving(); err != nil {
		return api.Written{}, err
	}
	if w.Op == ticket.OpGrant || w.Op == ticket.OpRenew {
		if err := n.clockOK(); err != nil {
			return api.Written{}, err
		}
	}
	wall := n.wall.Now()
	if w.Op == ticket.OpGrant && n.holdingOff(wall) {
		return api.Written{}, api.Unavailable(string(StageHoldOff), "hold_off", "Grant is refused until %s (restart after FAILED waits 250 s + Δ so nothing granted before can overlap)", n.holdOff.UTC().Format(time.RFC3339Nano))
	}
	nowMs, ok1 := ceilMs(wall)
	recvMs, ok2 := floorMs(wall)
	if !ok1 || !ok2 {
		return api.Written{}, api.Unavailable("clock", "clock", "the wall clock reads before 1970")
	}
	e := ticket.Entry{Op: w.Op, NowMs: nowMs, Name: w.Name, Holder: w.Holder, Token: w.Token, LeaseS: w.LeaseS}
	if w.Op == ticket.OpGrant || w.Op == ticket.OpRenew {
		delta := n.fsm.Delta()
		exp, ok := ticket.ExpiryFor(nowMs, w.LeaseS, delta)
		if !ok {
			return api.Written{}, api.Unavailable("clock", "clock", "the wall clock overflows the expiry")
		}
		e.RecvMs, e.ExpiryMs = recvMs, exp
	}
	data, err := ticket.EncodeEntry(&e)
	if err != nil {
		return api.Written{}, &api.Error{Status: http.StatusBadRequest, Code: "bad_request", Message: err.Error()}
	}
	res, err := n.propose(data)
	if err != nil {
		return api.Written{}, err
	}
	return api.Written{Result: res, RecvMs: recvMs}, nil
}

// readable is the linearizable-read rule of SPEC §4: this node leads, its
// Barrier committed in the current term, and VerifyLeader succeeds now.
func (n *Node) readable() error {
	if err := n.serving(); err != nil {
		return err
	}
	if err := n.raft().VerifyLeader().Error(); err != nil {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "not_leader", Stage: string(StageRaft), Message: "leadership not verified: " + err.Error()}
	}
	return nil
}

// Get is a linearizable read of one ticket (api.Backend).
func (n *Node) Get(ctx context.Context, name string) (ticket.Ticket, bool, error) {
	if err := n.readable(); err != nil {
		return ticket.Ticket{}, false, err
	}
	t, ok := n.fsm.Get(name)
	return t, ok, nil
}

// List is a linearizable read of tickets by prefix (api.Backend).
func (n *Node) List(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	if err := n.readable(); err != nil {
		return nil, false, err
	}
	ts, more := n.fsm.List(prefix, limit)
	return ts, more, nil
}

// Readiness is /readyz (api.Backend): ready only at StageReady, as the
// leader of the current term, with a healthy clock and no hold-off.
// Otherwise the stage and why: clock_check with its progress, failed with
// the SPEC §1.5 reason, hold_off with the instant.
func (n *Node) Readiness() wire.Health {
	stage, reason := n.ready.Get()
	h := wire.Health{Status: "unavailable", DevReference: n.mon != nil && n.cfg.Clock.DevReference}
	switch stage {
	case StageReady:
		if err := n.serving(); err != nil {
			stage, reason = StageRaft, "not the leader of the current term"
		} else if err := n.clockOK(); err != nil {
			ae := err.(*api.Error)
			stage, reason, h.Detail = Stage(ae.Stage), ae.Reason, ae.Message
		} else if n.holdingOff(n.wall.Now()) {
			stage, reason, h.Detail = StageHoldOff, "hold_off", n.holdOffText()
			h.HoldOffUntilUnixMs, _ = ceilMs(n.holdOff)
		} else {
			h.Status = "ok"
		}
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
		NodeID: n.cfg.Cluster.Name, Mode: "single-node", Stage: h.Stage, Ready: h.Status == "ok", Reason: h.Reason,
		DeltaMs: n.fsm.Delta(), TicketsActive: n.fsm.Len(), HoldOffCause: n.holdOffCause,
	}
	if st.DeltaMs == 0 {
		st.DeltaMs = n.cfg.Clock.DeltaMs
	}
	if !n.holdOff.IsZero() {
		st.HoldOffUntilUnixMs, _ = ceilMs(n.holdOff)
	}
	if r := n.raft(); r != nil {
		st.Role = roleName(r.State())
		_, leader := r.LeaderWithID()
		st.Leader = string(leader)
		st.Raft = wire.RaftStatus{Term: r.CurrentTerm(), LastIndex: r.LastIndex(), CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex()}
		st.Raft.LastSnapshotIndex, _ = strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64)
	} else {
		st.Role = "starting"
	}
	if cr, ok := n.guard.(ClockReporter); ok {
		st.Clock = cr.ClockStatus()
	} else {
		err := n.guard.Check()
		st.Clock = wire.ClockStatus{Source: "injected", Stage: "guard", Healthy: err == nil, DeltaMs: n.cfg.Clock.DeltaMs}
		if err != nil {
			st.Clock.Reason = clockReason(err)
		}
	}
	if p := n.markerState.Load(); p != nil {
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

// Members lists the Raft configuration (admin, api.Backend).
func (n *Node) Members(ctx context.Context) ([]wire.Member, error) {
	r := n.raft()
	if r == nil {
		return nil, api.Unavailable(string(StageStarting), "starting", "raft is not open yet")
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, api.Unavailable("", "raft", "raft: %v", err)
	}
	_, leader := r.LeaderWithID()
	var out []wire.Member
	for _, s := range f.Configuration().Servers {
		suff := "voter"
		if s.Suffrage != raft.Voter {
			suff = "nonvoter"
		}
		out = append(out, wire.Member{ID: string(s.ID), Address: string(s.Address), Suffrage: suff, Leader: s.ID == leader})
	}
	return out, nil
}

var errSingleNode = &api.Error{Status: http.StatusConflict, Code: "single_node",
	Message: "this is a single-node cluster (cluster.enabled: false): there is no other voter"}

// TransferLeadership has nowhere to go in single-node mode (api.Backend).
func (n *Node) TransferLeadership(ctx context.Context, to string) error { return errSingleNode }

// RemoveMember cannot remove the only voter (api.Backend).
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	if id != n.cfg.Cluster.Name {
		return &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no member %q", id)}
	}
	return errSingleNode
}

// expiryLoop proposes Expire for every ticket whose server-side expiry has
// passed by the leader's wall clock (rounded down), until ctx ends.
func (n *Node) expiryLoop(ctx context.Context) {
	t := time.NewTicker(n.expiry)
	defer t.Stop()
	var lastRefusal string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.expiryRounds.Add(1)
		refusal := ""
		if err := n.guard.Check(); err != nil {
			refusal = "clock: " + err.Error()
		} else if now := n.wall.Now(); n.holdingOff(now) {
			refusal = "hold_off"
		} else {
			n.clearHoldOff()
			n.expireDue(ctx, now)
		}
		if refusal != lastRefusal {
			if refusal != "" {
				n.log.Warn("expiry loop paused", "reason", refusal)
			} else {
				n.log.Info("expiry loop resumed")
			}
			lastRefusal = refusal
		}
	}
}

// expireDue proposes one batch of Expire entries stamped with now and waits
// for them to apply.
func (n *Node) expireDue(ctx context.Context, now time.Time) {
	nowMs, ok := floorMs(now)
	if !ok {
		return
	}
	due := n.fsm.Due(nowMs, 4096)
	if len(due) == 0 {
		return
	}
	start := time.Now()
	futs := make([]raft.ApplyFuture, 0, len(due))
	for _, d := range due {
		data, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpExpire, NowMs: nowMs, Name: d.Name, Token: d.Token})
		if err != nil {
			n.log.Error("encode expire", "err", err)
			continue
		}
		futs = append(futs, n.raft().Apply(data, 5*time.Second))
	}
	for _, f := range futs {
		result := "error"
		if err := f.Error(); err == nil {
			if r, ok := f.Response().(ticket.Result); ok {
				result = r.Code.String()
			}
		} else if errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			result = "unavailable"
		}
		n.metrics.Observe("expire", result, time.Since(start))
	}
}

// Snapshot takes a Raft snapshot now (admin, api.Backend).
func (n *Node) Snapshot(ctx context.Context) (wire.SnapshotInfo, error) {
	if err := n.serving(); err != nil {
		return wire.SnapshotInfo{}, err
	}
	tickets := n.fsm.Len()
	start := time.Now()
	f := n.raft().Snapshot()
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return wire.SnapshotInfo{}, &api.Error{Status: http.StatusConflict, Code: "nothing_new", Message: "nothing new to snapshot since the last one"}
		}
		return wire.SnapshotInfo{}, api.Unavailable("", "snapshot", "snapshot failed: %v", err)
	}
	took := time.Since(start)
	meta, rc, err := f.Open()
	if err != nil {
		return wire.SnapshotInfo{}, fmt.Errorf("node: opening the new snapshot: %w", err)
	}
	rc.Close()
	n.log.Info("snapshot taken", "id", meta.ID, "index", meta.Index, "size_bytes", meta.Size, "took", took.Round(time.Millisecond))
	return wire.SnapshotInfo{ID: meta.ID, Index: meta.Index, Term: meta.Term, SizeBytes: meta.Size, DurationMs: took.Milliseconds(), Tickets: tickets}, nil
}
