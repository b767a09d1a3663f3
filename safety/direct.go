package safety

import (
	"fmt"
	"slices"
)

// hold is one token's client-side hold interval on a ticket: from the
// first ok grant's return to the latest deadline of its ok grants and
// renews, cut short at the holder's first Release call.
type hold struct {
	token      uint64
	holder     string
	start, end int64
	ops        []int
}

func holds(ops []Op) []hold {
	by := map[uint64]*hold{}
	var order []uint64
	for _, op := range ops {
		if op.Outcome != OK || (op.Kind != Grant && op.Kind != Renew) {
			continue
		}
		h := by[op.Token]
		if h == nil {
			h = &hold{token: op.Token, holder: op.Holder, start: op.Return, end: op.Deadline}
			by[op.Token] = h
			order = append(order, op.Token)
		}
		h.start = min(h.start, op.Return)
		h.end = max(h.end, op.Deadline)
		h.ops = append(h.ops, op.ID)
	}
	for _, op := range ops {
		if op.Kind == Release {
			if h := by[op.Token]; h != nil && h.holder == op.Holder && op.Call < h.end && op.Call >= h.start {
				h.end = op.Call
			}
		}
	}
	out := make([]hold, 0, len(order))
	for _, t := range order {
		out = append(out, *by[t])
	}
	return out
}

// directChecks are the checks of one ticket that need no search.
func directChecks(name string, ops []Op) []Violation {
	var vs []Violation
	hs := holds(ops)
	// Two different tokens (two grants) must never be trusted at once.
	for i := range hs {
		for j := i + 1; j < len(hs); j++ {
			a, c := hs[i], hs[j]
			if a.start < c.end && c.start < a.end {
				vs = append(vs, Violation{Check: "overlap", Ticket: name, Ops: append(slices.Clone(a.ops), c.ops...),
					Detail: fmt.Sprintf("%s (token %d) trusts it over [%d, %d] ns and %s (token %d) over [%d, %d] ns: %d ns at once",
						a.holder, a.token, a.start, a.end, c.holder, c.token, c.start, c.end, min(a.end, c.end)-max(a.start, c.start))})
			}
		}
	}
	vs = append(vs, tokenOrder(name, ops)...)
	vs = append(vs, heldNamesAGrant(name, ops)...)
	vs = append(vs, staleWrites(name, ops)...)
	vs = append(vs, expiryMoves(name, ops)...)
	vs = append(vs, renewAfterRevoke(name, ops)...)
	return vs
}

// renewAfterRevoke: once a revoke of a grant has returned, no Renew of
// that grant called after it succeeds (SPEC §4: the holder can no longer
// renew).
func renewAfterRevoke(name string, ops []Op) []Violation {
	var vs []Violation
	for _, rv := range ops {
		if rv.Kind != Revoke || rv.Outcome != OK {
			continue
		}
		for _, op := range ops {
			if op.Kind == Renew && op.Outcome == OK && op.Token == rv.RespToken && op.Call > rv.Return {
				vs = append(vs, Violation{Check: "renew_after_revoke", Ticket: name, Ops: []int{rv.ID, op.ID},
					Detail: fmt.Sprintf("token %d revoked by #%d, renewed by #%d called after it", rv.RespToken, rv.ID, op.ID)})
			}
		}
	}
	return vs
}

// tokenOrder: a grant that returned before another was called has the
// smaller token, or the same one for the same holder (idempotent).
func tokenOrder(name string, ops []Op) []Violation {
	var gs []Op
	for _, op := range ops {
		if op.Kind == Grant && op.Outcome == OK {
			gs = append(gs, op)
		}
	}
	var vs []Violation
	for _, a := range gs {
		for _, c := range gs {
			if a.Return >= c.Call {
				continue
			}
			switch {
			case a.Token > c.Token:
				vs = append(vs, Violation{Check: "token_order", Ticket: name, Ops: []int{a.ID, c.ID},
					Detail: fmt.Sprintf("grant #%d returned token %d before grant #%d was called, which got the lower token %d", a.ID, a.Token, c.ID, c.Token)})
			case a.Token == c.Token && a.Holder != c.Holder:
				vs = append(vs, Violation{Check: "token_reuse", Ticket: name, Ops: []int{a.ID, c.ID},
					Detail: fmt.Sprintf("token %d granted to %s and later to %s", a.Token, a.Holder, c.Holder)})
			}
		}
	}
	return vs
}

// staleWrites: the fencing register must reject a token below one it
// accepted earlier (an accepted write that returned before this one was
// called).
func staleWrites(name string, ops []Op) []Violation {
	var acc []Op
	for _, op := range ops {
		if op.Kind == Write && op.Outcome == OK {
			acc = append(acc, op)
		}
	}
	var vs []Violation
	for _, w := range acc {
		for _, v := range acc {
			if v.Return < w.Call && v.Token > w.Token {
				vs = append(vs, Violation{Check: "stale_write", Ticket: name, Ops: []int{v.ID, w.ID},
					Detail: fmt.Sprintf("write #%d with token %d accepted after write #%d with token %d", w.ID, w.Token, v.ID, v.Token)})
				break
			}
		}
	}
	return vs
}

// expiryMoves: two reads of the same grant see the same server-side
// expiry unless a Renew of it (ok or unknown) could have come between.
func expiryMoves(name string, ops []Op) []Violation {
	var gets, renews []Op
	for _, op := range ops {
		switch {
		case op.Kind == Get && op.Outcome == OK && op.RespHolder != "":
			gets = append(gets, op)
		case op.Kind == Renew && op.Outcome != Refused:
			renews = append(renews, op)
		}
	}
	var vs []Violation
	for _, a := range gets {
		for _, c := range gets {
			if a.Return >= c.Call || a.RespToken != c.RespToken || a.ServerExpiryMs == c.ServerExpiryMs {
				continue
			}
			renewed := slices.ContainsFunc(renews, func(r Op) bool {
				// closed intervals: a starved history clock can give equal instants
				return r.Token == a.RespToken && r.Call <= c.Return && (r.Outcome == Unknown || r.Return >= a.Call)
			})
			if !renewed {
				vs = append(vs, Violation{Check: "expiry_moved", Ticket: name, Ops: []int{a.ID, c.ID},
					Detail: fmt.Sprintf("token %d: server expiry %d at read #%d, %d at read #%d, no Renew between", a.RespToken, a.ServerExpiryMs, a.ID, c.ServerExpiryMs, c.ID)})
			}
		}
	}
	return vs
}

// globalTokenChecks: no token is granted on two tickets.
func globalTokenChecks(ops []Op) []Violation {
	seen := map[uint64]Op{}
	var vs []Violation
	for _, op := range ops {
		if op.Kind != Grant || op.Outcome != OK {
			continue
		}
		if p, ok := seen[op.Token]; ok && p.Ticket != op.Ticket {
			vs = append(vs, Violation{Check: "token_reuse", Ticket: op.Ticket, Ops: []int{p.ID, op.ID},
				Detail: fmt.Sprintf("token %d granted on %s and on %s", op.Token, p.Ticket, op.Ticket)})
			continue
		}
		seen[op.Token] = op
	}
	return vs
}

// heldNamesAGrant: a "409 held" names a holder who sent a grant of the
// ticket before the answer came, with the token that grant got (when its
// answer is known).
func heldNamesAGrant(name string, ops []Op) []Violation {
	var vs []Violation
	for _, r := range ops {
		if r.Kind != Grant || r.Outcome != Refused || r.Code != "held" {
			continue
		}
		ok := slices.ContainsFunc(ops, func(g Op) bool {
			return g.Kind == Grant && g.Holder == r.RespHolder && g.Call <= r.Return &&
				(g.Outcome == Unknown || g.Outcome == OK && g.Token == r.RespToken)
		})
		if !ok {
			vs = append(vs, Violation{Check: "held_unknown_holder", Ticket: name, Ops: []int{r.ID},
				Detail: fmt.Sprintf("grant #%d refused as held by %s with token %d, which no grant of the ticket could have given", r.ID, r.RespHolder, r.RespToken)})
		}
	}
	return vs
}
