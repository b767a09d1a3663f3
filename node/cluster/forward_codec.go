package cluster

// The forwarding codec: a local request or outcome as a forward message
// and back — ops, tickets, a committed write's outcome (writtenResponse),
// a refusal (errResponse on the leader, forwardErr on the follower).

import (
	"errors"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/cluster/forward"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

var writeOps = map[forward.Op]ticket.Op{forward.OpGrant: ticket.OpGrant, forward.OpRenew: ticket.OpRenew, forward.OpRelease: ticket.OpRelease, forward.OpRevoke: ticket.OpRevoke}

var forwardOps = map[ticket.Op]forward.Op{ticket.OpGrant: forward.OpGrant, ticket.OpRenew: forward.OpRenew, ticket.OpRelease: forward.OpRelease, ticket.OpRevoke: forward.OpRevoke}

func wireTicket(t ticket.Ticket, recvMs uint64) forward.Ticket {
	ft := forward.Ticket{Name: t.Name, Holder: t.Holder, Token: t.Token, LeaseS: uint32(t.LeaseS),
		ConservativeValidBeforeUnixMs: t.ValidBeforeMs, ServerExpiryUnixMs: t.ExpiryMs, Revoked: t.Revoked, Waiters: t.Waiters}
	if recvMs > 0 && t.ValidBeforeMs > recvMs {
		ft.RemainingMs = t.ValidBeforeMs - recvMs
	}
	return ft
}

func localTicket(ft *forward.Ticket) ticket.Ticket {
	if ft == nil {
		return ticket.Ticket{}
	}
	return ticket.Ticket{Name: ft.Name, Holder: ft.Holder, Token: ft.Token, LeaseS: uint8(min(ft.LeaseS, 255)),
		ValidBeforeMs: ft.ConservativeValidBeforeUnixMs, ExpiryMs: ft.ServerExpiryUnixMs, Revoked: ft.Revoked, Waiters: ft.Waiters}
}

// mismatchCodes travel as forward.CodeMismatch with the ticket code's name
// as the Reason, so the follower answers exactly as the leader would.
var mismatchCodes = func() map[string]ticket.Code {
	m := map[string]ticket.Code{}
	for _, c := range []ticket.Code{ticket.CodeNotHeld, ticket.CodeWrongHolder, ticket.CodeWrongToken, ticket.CodeLeaseOver, ticket.CodeRevoked} {
		m[c.String()] = c
	}
	return m
}()

// writtenResponse encodes a committed write's outcome.
func writtenResponse(out api.Written) forward.Response {
	res := out.Result
	ft := wireTicket(res.Ticket, out.RecvMs)
	switch res.Code {
	case ticket.CodeOK, ticket.CodeExisting:
		r := forward.Response{Code: forward.CodeOK, Ticket: &ft, WaitedMs: out.WaitedMs}
		if res.Code == ticket.CodeExisting {
			r.Reason = ticket.CodeExisting.String()
		}
		return r
	case ticket.CodeHeld:
		return forward.Response{Code: forward.CodeHeld, Message: "held", Holder: res.Ticket.Holder, Token: res.Ticket.Token}
	case ticket.CodeFatal:
		return forward.Response{Code: forward.CodeUnavailable, Message: "the leader stopped", Stage: string(stage.Failed), Reason: "state"}
	}
	if _, ok := mismatchCodes[res.Code.String()]; ok {
		return forward.Response{Code: forward.CodeMismatch, Message: res.Code.String(), Reason: res.Code.String()}
	}
	return forward.Response{Code: forward.CodeUnavailable, Message: "refused by the state machine; retry", Reason: res.Code.String()}
}

// errResponse encodes a local refusal (an *api.Error, or anything else as
// internal).
func errResponse(err error) forward.Response {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return forward.Response{Code: forward.CodeInternal, Message: err.Error()}
	}
	r := forward.Response{Message: ae.Message, Stage: ae.Stage, Reason: ae.Reason}
	switch ae.Kind {
	case api.KindNotLeader:
		r.Code = forward.CodeNotLeader
	case api.KindBadRequest:
		r.Code = forward.CodeBadRequest
	case api.KindNotFound:
		r.Code = forward.CodeNotFound
	case api.KindConflict:
		r.Code, r.Reason = forward.CodeMismatch, ae.Code
	case api.KindTooMany:
		// too_many_*: a 429 again on the follower; the share that is full
		// (node_cap, node_share) travels as the stage, which a follower of
		// an older version ignores.
		r.Code, r.Reason, r.Stage = forward.CodeUnavailable, ae.Code, ae.Reason
	default:
		r.Code = forward.CodeUnavailable
	}
	return r
}

// forwardErr maps what the forward client returned to the API's errors.
func forwardErr(err error) error {
	var fe *forward.Error
	switch {
	case errors.As(err, &fe):
		switch fe.Code {
		case forward.CodeNotLeader:
			return api.NotLeader(string(stage.Raft), "the leader moved while forwarding: %s", fe.Message)
		case forward.CodeBadRequest:
			return api.Refuse(api.KindBadRequest, "bad_request", "%s", fe.Message)
		case forward.CodeNotFound:
			return api.Refuse(api.KindNotFound, "not_found", "%s", fe.Message)
		case forward.CodeMismatch:
			return api.Refuse(api.KindConflict, fe.Reason, "%s", fe.Message)
		case forward.CodeUnavailable:
			if fe.Reason == api.CodeTooManyWaiters || fe.Reason == api.CodeTooManyWatchers {
				e := api.Refuse(api.KindTooMany, fe.Reason, "leader: %s", fe.Message)
				e.Reason = fe.Stage
				return e
			}
		}
		return api.Unavailable(fe.Stage, fe.Reason, "leader: %s", fe.Message)
	case errors.Is(err, forward.ErrOutcomeUnknown):
		return api.Unavailable("", "unknown_outcome", "forwarded to the leader, no answer: %v; the write may still be applied: read the ticket before retrying", err)
	}
	return api.Unavailable(string(stage.Raft), "leader_unreachable", "forwarding to the leader: %v", err)
}
