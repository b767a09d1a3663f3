package node

import (
	"context"
	"errors"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// Write proposes a Grant, Renew, Release or Revoke (api.Backend); a
// cluster follower forwards it to the leader.
func (n *server) Write(ctx context.Context, w api.Write) (api.Written, error) {
	if leader, ok := n.mode.route(); ok {
		return leader.Write(ctx, w)
	}
	return n.writeLocal(ctx, w)
}

// writeLocal is Write on this node, as the leader.
func (n *server) writeLocal(ctx context.Context, w api.Write) (api.Written, error) {
	if err := n.serving(); err != nil {
		return api.Written{}, err
	}
	if w.Op == ticket.OpRevoke {
		return n.revokeLocal(ctx, w)
	}
	if w.Op == ticket.OpGrant && w.WaitMs > 0 {
		return n.grantWaiting(ctx, w) // waiters.go; each try comes back here with WaitMs 0
	}
	if w.Op == ticket.OpGrant || w.Op == ticket.OpRenew {
		if err := n.clockOK(); err != nil {
			return api.Written{}, err
		}
	}
	wall := n.wall.Now()
	if w.Op == ticket.OpGrant && n.hold.active(wall) {
		return api.Written{}, api.Unavailable(string(stage.HoldOff), "hold_off", "%s (250 s + Δ)", n.hold.text())
	}
	nowMs, ok1 := protocol.CeilUnixMs(wall)
	recvMs, ok2 := protocol.FloorUnixMs(wall)
	if !ok1 || !ok2 {
		return api.Written{}, api.Unavailable("clock", "clock", "the wall clock reads before 1970")
	}
	if w.Op == ticket.OpGrant {
		if r, refused := n.fsm.RefusesGrant(w.Name, w.Holder, nowMs); refused {
			return api.Written{Result: r, RecvMs: recvMs}, nil // nothing appended
		}
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
		return api.Written{}, api.Refuse(api.KindBadRequest, "bad_request", "%v", err)
	}
	res, err := n.propose(ctx, data)
	if err != nil {
		return api.Written{}, err
	}
	return api.Written{Result: res, RecvMs: recvMs}, nil
}

// revokeLocal proposes an administrator's Revoke (SPEC §4) as the leader.
// It frees nothing and grants nothing, so neither the pre-proposal clock
// check nor a hold-off stops it; its now is the wall time rounded down,
// as Expire's (a ticket whose expiry has passed by it is free: nothing to
// revoke).
func (n *server) revokeLocal(ctx context.Context, w api.Write) (api.Written, error) {
	nowMs, ok := protocol.FloorUnixMs(n.wall.Now())
	if !ok {
		return api.Written{}, api.Unavailable("clock", "clock", "the wall clock reads before 1970")
	}
	data, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpRevoke, NowMs: nowMs, Name: w.Name, Token: w.Token})
	if err != nil {
		return api.Written{}, api.Refuse(api.KindBadRequest, "bad_request", "%v", err)
	}
	res, err := n.propose(ctx, data)
	if err != nil {
		return api.Written{}, err
	}
	if res.Code == ticket.CodeOK {
		n.log.Info("ticket revoked", "name", w.Name, "holder", res.Ticket.Holder, "token", res.Ticket.Token, "server_expiry_unix_ms", res.Ticket.ExpiryMs)
	}
	return api.Written{Result: res, RecvMs: nowMs}, nil
}

// proposeWait bounds how long a proposal waits for Raft's answer: after
// it the outcome is unknown (503 unknown_outcome).
const proposeWait = 5 * time.Second

// propose applies data through Raft and waits for the FSM's answer; the
// consensus errors become the API's.
func (n *server) propose(ctx context.Context, data []byte) (ticket.Result, error) {
	c := n.cons.Load()
	if c == nil {
		return ticket.Result{}, api.Unavailable(string(stage.Starting), "starting", "raft is not open yet")
	}
	res, err := c.ProposeWithin(ctx, data, proposeWait)
	return res, consensusRefusal(err)
}

// consensusRefusal maps consensus errors to the API's typed errors.
func consensusRefusal(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, consensus.ErrNotLeader):
		return api.NotLeader(string(stage.Raft), "this node is not the leader: %v", err)
	case errors.Is(err, consensus.ErrUnknownOutcome):
		// Before a shutdown's refusal: a shutdown that ended an entry in
		// flight (ErrShutdown matches both) did not refuse it, and a
		// "stopping" stage would tell the client that nothing was applied.
		return api.Unavailable("", "unknown_outcome", "%v; the write may still be applied: read the ticket before retrying", err)
	case errors.Is(err, consensus.ErrShutdown):
		return api.Unavailable(string(stage.Stopping), "shutdown", "the node is shutting down")
	}
	return api.Unavailable("", "raft", "raft: %v", err)
}
