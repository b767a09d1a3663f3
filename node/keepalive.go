package node

import (
	"context"
	"sync"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// keepAliveChunk is the most renewals one KeepAlive entry carries on the
// write path (ticket.MaxKeepAliveItems bounds the format).
const keepAliveChunk = ticket.MaxKeepAliveItems

// Renews proposes renewals together (api.Renewer, POST /v1/batch): a
// leader whose servers all read KeepAlive entries proposes them as
// KeepAlives of up to keepAliveChunk renewals each; a follower forwards
// them to the leader one by one, as Write does. Each outcome is what
// Write would have returned for that renewal alone.
func (n *server) Renews(ctx context.Context, ws []api.Write) []api.Outcome {
	if leader, ok := n.mode.route(); ok {
		return eachWrite(ctx, ws, leader.Write)
	}
	return n.renewsLocal(ctx, ws)
}

// eachWrite runs write for every w of ws concurrently (as a batch's
// single ops run).
func eachWrite(ctx context.Context, ws []api.Write, write func(context.Context, api.Write) (api.Written, error)) []api.Outcome {
	out := make([]api.Outcome, len(ws))
	var wg sync.WaitGroup
	for i := range ws {
		wg.Go(func() { out[i].Written, out[i].Err = write(ctx, ws[i]) })
	}
	wg.Wait()
	return out
}

// renewsLocal is Renews on this node, as the leader. What writeLocal
// checks for one Renew it checks once for all (SPEC §4, §3.2): serving,
// the clock (once per proposal: the KeepAlives of one call are proposed
// together under the one check), one now and receive time, the
// replicated Δ; each renewal's expiry is now + lease_s×1000 + Δ.
func (n *server) renewsLocal(ctx context.Context, ws []api.Write) []api.Outcome {
	out := make([]api.Outcome, len(ws))
	failAll := func(err error) []api.Outcome {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	if err := n.serving(); err != nil {
		return failAll(err)
	}
	if !n.mode.keepAliveEntries() {
		return eachWrite(ctx, ws, n.writeLocal) // servers of a release without them
	}
	if err := n.clockOK(); err != nil {
		return failAll(err)
	}
	wall := n.wall.Now()
	nowMs, ok1 := protocol.CeilUnixMs(wall)
	recvMs, ok2 := protocol.FloorUnixMs(wall)
	if !ok1 || !ok2 {
		return failAll(api.Unavailable("clock", "clock", "the wall clock reads before 1970"))
	}
	delta := n.fsm.Delta()
	var (
		idx   []int // ws's index of each item
		items []ticket.RenewItem
		other []int // not a renewal: its own Write
	)
	for i, w := range ws {
		if w.Op != ticket.OpRenew {
			other = append(other, i)
			continue
		}
		exp, ok := ticket.ExpiryFor(nowMs, w.LeaseS, delta)
		if !ok {
			out[i].Err = api.Unavailable("clock", "clock", "the wall clock overflows the expiry")
			continue
		}
		// Refused here as writeLocal's EncodeEntry refuses a Renew.
		e := ticket.Entry{Op: ticket.OpRenew, NowMs: nowMs, RecvMs: recvMs, Name: w.Name, Holder: w.Holder, Token: w.Token, LeaseS: w.LeaseS, ExpiryMs: exp}
		if err := e.Validate(); err != nil {
			out[i].Err = api.Refuse(api.KindBadRequest, "bad_request", "ticket: encode %s: %v", e.Op, err)
			continue
		}
		idx = append(idx, i)
		items = append(items, ticket.RenewItem{Name: w.Name, Holder: w.Holder, Token: w.Token, LeaseS: w.LeaseS, ExpiryMs: exp})
	}
	var wg sync.WaitGroup
	for _, i := range other {
		wg.Go(func() { out[i].Written, out[i].Err = n.writeLocal(ctx, ws[i]) })
	}
	for from := 0; from < len(items); from += keepAliveChunk {
		to := min(from+keepAliveChunk, len(items))
		wg.Go(func() { n.keepAlive(ctx, nowMs, recvMs, items[from:to], idx[from:to], out) })
	}
	wg.Wait()
	return out
}

// keepAlive proposes one KeepAlive of items and puts each item's outcome
// at out[idx[j]].
func (n *server) keepAlive(ctx context.Context, nowMs, recvMs uint64, items []ticket.RenewItem, idx []int, out []api.Outcome) {
	set := func(err error) {
		for _, i := range idx {
			out[i].Err = err
		}
	}
	data, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpKeepAlive, NowMs: nowMs, RecvMs: recvMs, Items: items})
	if err != nil { // every item was checked: this is a bug, not the input
		set(api.Unavailable("", "keepalive", "%v", err))
		return
	}
	res, err := n.propose(ctx, data)
	switch {
	case err != nil:
		set(err)
	case res.Code == ticket.CodeFatal:
		for _, i := range idx {
			out[i].Written = api.Written{Result: res, RecvMs: recvMs}
		}
	case res.Code != ticket.CodeOK || len(res.Items) != len(items):
		set(api.Unavailable(string(stage.Raft), "keepalive", "a keepalive of %d renewals applied as %v with %d results", len(items), res.Code, len(res.Items)))
	default:
		for j, i := range idx {
			out[i].Written = api.Written{Result: res.Items[j], RecvMs: recvMs}
		}
	}
}
