package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/protocol"
)

// serving returns nil when this node may take a client request.
func (n *server) serving() error {
	if e := n.mode.removed(); e != nil {
		return e
	}
	cur, reason := n.stage.Get()
	if cur != stage.Ready {
		if cur == stage.Failed {
			if err := n.guard.Check(); err != nil {
				return n.mode.refuseClock(err) // cluster mode says retired (mode_cluster.go)
			}
		}
		if reason == "" {
			reason = string(cur)
		}
		return api.Unavailable(string(cur), reason, "the node is not ready (stage %s: %s)", cur, reason)
	}
	r := n.raft()
	if r == nil || r.State() != raft.Leader || n.barrierTerm.Load() != r.CurrentTerm() {
		return api.NotLeader(string(stage.Raft), "this node is not the leader of the current term")
	}
	return nil
}

// clockOK is the pre-proposal clock check (SPEC §3.2) as an API answer.
func (n *server) clockOK() error {
	if err := n.guard.Check(); err != nil {
		return n.mode.refuseClock(err) // cluster mode says retired (mode_cluster.go)
	}
	return nil
}

// Readiness is /readyz (api.Backend): ready only at stage.Ready, as the
// leader of the current term (a cluster node: once uniform, with a known
// leader), with a healthy clock and no hold-off.
// Otherwise the stage and why: clock_check with its progress, failed with
// the SPEC §1.5 reason, hold_off with the instant.
func (n *server) Readiness() wire.Health {
	cur, reason := n.stage.Get()
	h := wire.Health{Status: "unavailable", DevReference: n.mon != nil && n.cfg.Clock.DevReference}
	// A cluster node (SPEC §3.5): uniform, then ready while a leader is
	// known (followers forward); the clock and hold-off checks follow.
	var leaderKnown bool
	cur, reason, h.Detail, leaderKnown = n.mode.readiness(cur, reason)
	switch cur {
	case stage.Ready:
		if !leaderKnown && n.serving() != nil {
			cur, reason = stage.Raft, "not the leader of the current term"
		} else if err := n.clockOK(); err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				cur, reason, h.Detail = stage.Stage(ae.Stage), ae.Reason, ae.Message
			} else {
				cur, reason, h.Detail = stage.Failed, "clock", err.Error()
			}
		} else if n.hold.active(n.wall.Now()) {
			cur, reason, h.Detail = stage.HoldOff, "hold_off", n.hold.text()
			h.HoldOffUntilUnixMs, _ = protocol.CeilUnixMs(n.hold.until)
		} else {
			h.Status = "ok"
		}
	case stage.Removed:
		if e := n.mode.removed(); e != nil {
			h.Detail = e.Message
		}
	case stage.Failed:
		if ce := n.clockErr(); ce != nil {
			reason, h.Detail = string(ce.Reason), ce.Error()
		}
	case stage.ClockCheck:
		if n.mon != nil {
			st := n.mon.Status()
			h.Detail = fmt.Sprintf("%d of %d consecutive healthy samples", min(st.HealthyRounds, clockhealth.ClockCheckSamples), clockhealth.ClockCheckSamples)
		}
	}
	h.Stage, h.Reason = string(cur), reason
	return h
}

// Status is /v1/status (api.Backend).
func (n *server) Status(ctx context.Context) wire.Status {
	h := n.Readiness()
	st := wire.Status{
		NodeID: n.cfg.Cluster.Name, Mode: n.mode.name(), Stage: h.Stage, Ready: h.Status == "ok", Reason: h.Reason,
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
		st.Leader = n.mode.leader() // a cluster non-voter outside the configuration: the one its voters name
		st.Raft = wire.RaftStatus{Term: r.CurrentTerm(), LastIndex: r.LastIndex(), CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex()}
		st.Raft.LastSnapshotIndex, _ = strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64)
	} else if n.mode.gossipOnly() {
		st.Role = "client" // a gossip-only client: no Raft, forwards to the leader
		st.Leader = n.mode.leader()
	} else {
		st.Role = "starting"
	}
	if st.Stage == string(stage.Removed) {
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
