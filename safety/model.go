package safety

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// state is one possible state of one ticket. Holder "" is free.
type state struct {
	Holder string
	// Token is the holder's token; 0 when a grant of unknown outcome made
	// the holder (the token is learned from a later read).
	Token uint64
	// Early is the first instant the ticket may be free without a Release:
	// the holder's client-side deadline.
	Early int64
	// Late is the last instant a Renew may still succeed: the upper bound
	// of the server-side expiry in true time.
	Late int64
	// Max is the highest token granted so far in this linearization.
	Max uint64
	// Revoked: an administrator revoked the holder's grant (SPEC §4). It
	// stays held until it expires (Early, Late unchanged) or its holder
	// releases it; no Renew of it succeeds, nor the holder's Grant.
	Revoked bool
}

const forever = math.MaxInt64 / 2

// bounds computes the model's time arithmetic for one cluster.
type bounds struct {
	deltaNs int64
	// strictRefusals checks a 409 held as a linearizable read (see
	// Config.StrictRefusals).
	strictRefusals bool
}

// early is the client-side deadline of a lease sent at call.
func (bounds) early(call int64, leaseS int) int64 {
	d := int64(leaseS) * 1e9
	return call + d - (d*ClientPPM+999_999)/1_000_000
}

// late bounds the server-side expiry of a lease stamped within [call,
// ret]: the proposer's now ≤ true + Δ/2 (+1 ms rounding up), expiry adds
// lease + Δ, and a node that decides "not yet expired" reads ≥ true − Δ/2.
func (b bounds) late(ret int64, leaseS int) int64 {
	if ret >= forever {
		return forever
	}
	d := int64(leaseS) * 1e9
	return ret + d + 2*b.deltaNs + 2e6 + (d*ClientPPM+999_999)/1_000_000
}

// freeable: could the ticket have been freed by Expire by ret?
func freeable(s state, ret int64) bool { return s.Holder == "" || s.Early <= ret }

// tokenMatches: tok is the state's token, or the state's token is not
// known yet (an unknown-outcome Grant applied) and tok is a new one, above
// every token granted before it.
func tokenMatches(s state, tok uint64) bool {
	return s.Token == tok || (s.Token == 0 && tok > s.Max)
}

// learn records a token seen for the state's unknown grant.
func learn(s state, tok uint64) state {
	s.Token = tok
	s.Max = max(s.Max, tok)
	return s
}

// pmodel is model as porcupine checks it.
func (b bounds) pmodel() porcupine.Model {
	m := b.model()
	return m.ToModel()
}

// model is the per-ticket porcupine model. The inputs are Ops whose
// Return is forever when the outcome is unknown.
func (b bounds) model() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{state{}} },
		Step: func(st, in, _ interface{}) []interface{} {
			return b.step(st.(state), in.(Op))
		},
		DescribeOperation: func(in, _ interface{}) string {
			if op, ok := in.(Op); ok {
				return op.String()
			}
			return ""
		},
		DescribeState: func(st interface{}) string {
			s := st.(state)
			if s.Holder == "" {
				return fmt.Sprintf("free (max token %d)", s.Max)
			}
			rv := ""
			if s.Revoked {
				rv = " revoked"
			}
			return fmt.Sprintf("%s tok=%d early=%d late=%d%s", s.Holder, s.Token, s.Early, s.Late, rv)
		},
	}
}

func (b bounds) step(s state, op Op) []interface{} {
	var out []interface{}
	add := func(x state) { out = append(out, x) }
	switch op.Kind {
	case Grant:
		switch op.Outcome {
		case OK:
			b.grantOK(s, op, add)
		case Refused:
			if op.Code == "revoked" { // the holder's own grant of its revoked ticket
				if s.Holder == op.Holder && s.Revoked {
					add(s)
				}
				break
			}
			if op.Code != "held" || !b.strictRefusals {
				add(s) // refused before anything was proposed; or a held answer from the leader's state, not a read
				break
			}
			if s.Holder != "" && s.Holder == op.RespHolder && tokenMatches(s, op.RespToken) {
				add(learn(s, op.RespToken))
			}
		case Unknown:
			add(s) // not applied, or the holder's idempotent repeat
			// Applied as a new grant: on a free ticket, or once the
			// previous lease — the same holder's included — could have
			// ended (an unknown op may take effect at any later time).
			// Its token is not known: the next one seen must be above Max.
			if freeable(s, op.Return) && (s.Holder != op.Holder || s.Token != 0) {
				add(state{Holder: op.Holder, Early: b.early(op.Call, op.LeaseS), Late: forever, Max: s.Max})
			}
		}
	case Renew:
		match := s.Holder == op.Holder && s.Holder != "" && tokenMatches(s, op.Token)
		switch op.Outcome {
		case OK:
			if match && !s.Revoked && op.Call <= s.Late {
				s = learn(s, op.Token)
				s.Early, s.Late = op.Deadline, b.late(op.Return, op.LeaseS)
				add(s)
			}
		case Refused:
			switch op.Code {
			case "lease_over": // still there, expired
				if match && s.Early <= op.Return {
					add(s)
				}
			case "revoked": // still there, revoked: no renew succeeds
				if match && s.Revoked {
					add(learn(s, op.Token))
				}
			default:
				refusedHolderOp(s, op, add)
			}
		case Unknown:
			add(s)
			if match && !s.Revoked && op.Call <= s.Late {
				s = learn(s, op.Token)
				s.Early, s.Late = b.early(op.Call, op.LeaseS), forever
				add(s)
			}
		}
	case Release:
		match := s.Holder == op.Holder && s.Holder != "" && tokenMatches(s, op.Token)
		switch op.Outcome {
		case OK:
			if match {
				add(state{Max: s.Max})
			}
		case Refused:
			refusedHolderOp(s, op, add)
		case Unknown:
			add(s)
			if match {
				add(state{Max: s.Max})
			}
		}
	case Get:
		switch op.Outcome {
		case OK:
			if op.RespHolder == "" {
				if freeable(s, op.Return) {
					add(state{Max: s.Max})
				}
			} else if s.Holder == op.RespHolder && tokenMatches(s, op.RespToken) && s.Revoked == op.RespRevoked {
				add(learn(s, op.RespToken))
			}
		default:
			add(s)
		}
	case Revoke:
		b.revoke(s, op, add)
	default:
		add(s)
	}
	return out
}

// grantOK: a grant answered with a token. The holder may already hold it
// (idempotent: the same token, nothing extended), or the ticket is free,
// or the previous lease may have ended by the grant's return.
func (b bounds) grantOK(s state, op Op, add func(state)) {
	if s.Holder == op.Holder && !s.Revoked && tokenMatches(s, op.Token) {
		x := learn(s, op.Token)
		x.Early = max(s.Early, op.Deadline)
		add(x)
	}
	if op.Token > s.Max && freeable(s, op.Return) && !(s.Holder == op.Holder && s.Token == op.Token) {
		add(state{Holder: op.Holder, Token: op.Token, Early: op.Deadline, Late: b.late(op.Return, op.LeaseS), Max: op.Token})
	}
}

// revoke is an administrator's Revoke (SPEC §4). Answered ok, the ticket
// was held (by the answered holder and token) and now is revoked: still
// held until it expires, never earlier. Refused not_found: nobody held it
// at the leader's now (its lease may have ended). Refused wrong_token:
// another grant held it. Unknown: revoked or not.
func (b bounds) revoke(s state, op Op, add func(state)) {
	held := s.Holder != "" && (op.Token == 0 || tokenMatches(s, op.Token))
	switch op.Outcome {
	case OK:
		if held && s.Holder == op.RespHolder && tokenMatches(s, op.RespToken) {
			x := learn(s, op.RespToken)
			x.Revoked = true
			add(x)
		}
	case Refused:
		switch op.Code {
		case "not_found":
			if freeable(s, op.Return) {
				add(state{Max: s.Max})
			}
		case "wrong_token":
			if s.Holder != "" && s.Token != op.Token {
				add(s)
			}
		default:
			add(s)
		}
	case Unknown:
		add(s)
		if held {
			x := s
			x.Revoked = true
			add(x)
		}
	}
}

// refusedHolderOp is a Renew or Release refused with a 409 (or refused
// before proposing: no effect).
func refusedHolderOp(s state, op Op, add func(state)) {
	switch op.Code {
	case "not_held":
		if freeable(s, op.Return) {
			add(state{Max: s.Max})
		}
	case "wrong_token", "wrong_holder":
		if s.Holder != "" && (s.Holder != op.Holder || s.Token != op.Token) {
			add(s)
		}
	default:
		add(s)
	}
}
