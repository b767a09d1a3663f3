package cluster

// Forwarding (SPEC §4.1, §5): a follower sends Write, Get and List to the
// leader over a mesh stream of class forward; every node serves forwarded
// requests with its own local operations, so the leader stamps `now` with
// its own clock and runs its own clock check (a follower never pre-stamps).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/cluster/forward"
	"github.com/tckclk/tckclk/node/cluster/mesh"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// retireWait bounds how long the forwarding client to a previous leader
// waits for the answers to the requests in flight on it: a proposal
// there waits at most Options.ProposeWait for Raft, then
// consensus.FateWait for its entry's fate.
func (f *forwarder) retireWait() time.Duration {
	return f.cl.opts.ProposeWait + consensus.FateWait + time.Second
}

// A stopping node keeps answering forwarded requests until none has
// arrived for forwardQuiet (its followers have moved on to the next
// leader), at most forwardDrain, before it closes its forward server
// (forward.Server.Drain): a request cut off unanswered is an unknown
// outcome to its sender.
const (
	forwardQuiet = 250 * time.Millisecond
	forwardDrain = 3 * time.Second
)

// forwarder holds the forwarding client to the current leader.
type forwarder struct {
	cl *Node

	mu     sync.Mutex
	leader string // NodeId the client dials
	addr   string
	client *forward.Client
	closed bool
	// retiring: the clients to earlier leaders, each closing once the
	// requests in flight on it have their answers (forward.Client.Retire),
	// or at once when stopRetire closes (the forwarder stops).
	retiring   sync.WaitGroup
	stopRetire chan struct{}
}

// serve starts the forward server on the mesh's forward listener; the
// returned func stops it (and the client) and waits.
func (f *forwarder) serve(wg *sync.WaitGroup) func() {
	// Waiting grants and watches hold a slot each while they wait; they are
	// capped (api.max_waiters, api.max_watchers), so the slots above the
	// default stay free for renewals and everything else.
	inflight := forward.DefaultMaxInFlight + f.cl.opts.ForwardWaits
	srv := forward.NewServer(forward.ServerConfig{MaxInFlight: inflight, Logger: f.cl.log.With("component", "forward")})
	ln := f.cl.mesh.Listener(mesh.ClassForward)
	wg.Go(func() {
		if err := srv.Serve(ln, forward.HandlerFunc(f.cl.forwarded)); err != nil && !errors.Is(err, forward.ErrClosed) {
			f.cl.log.Warn("forward server stopped", "err", err)
		}
	})
	return func() {
		if !srv.Drain(forwardQuiet, forwardDrain) {
			f.cl.log.Warn("forwarded requests still arriving; closing the forward server anyway", "waited", forwardDrain)
		}
		_ = srv.Close()
		f.mu.Lock()
		f.closed = true
		c := f.client
		f.client = nil
		if f.stopRetire != nil {
			close(f.stopRetire)
		}
		f.mu.Unlock()
		if c != nil {
			_ = c.Close()
		}
		f.retiring.Wait()
	}
}

// route reports the leader to forward to: Raft is open, this node does
// not lead, and it knows a leader other than itself.
func (f *forwarder) route() (*forward.Client, bool) {
	cur, _ := f.cl.opts.Stage.Get()
	if cur == stage.Failed || cur == stage.Starting || cur == stage.ClockCheck || cur == stage.Stopping || f.cl.checkRemoved() {
		return nil, false
	}
	if f.cl.host.Serving() == nil {
		return nil, false // this node leads
	}
	id, addr := f.cl.Leader() // Raft's, or a gossip-only client's
	if id == "" || id == f.cl.cfg.Name {
		return nil, false
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, false
	}
	if f.client != nil && f.leader == id && f.addr == addr {
		c := f.client
		f.mu.Unlock()
		return c, true
	}
	if old := f.client; old != nil {
		// The requests in flight on it still get the previous leader's
		// answers (TestGracefulStopAnswersForwardedWrites).
		if f.stopRetire == nil {
			f.stopRetire = make(chan struct{})
		}
		f.retiring.Add(1)
		go func(stop <-chan struct{}) {
			defer f.retiring.Done()
			old.Retire(stop, f.retireWait())
		}(f.stopRetire)
	}
	m, leader, leaderAddr := f.cl.mesh, id, addr
	f.leader, f.addr = leader, leaderAddr
	c := forward.NewClient(func(ctx context.Context) (net.Conn, error) {
		return m.Dial(ctx, leaderAddr, leader, mesh.ClassForward) // exactly the leader's NodeId, generation included
	})
	f.client = c
	f.mu.Unlock()
	return c, true
}

// forwardsTo is the leader a ticket op arriving now would be forwarded
// to, "" when this node would serve it itself or cannot forward.
func (f *forwarder) forwardsTo() string {
	if r := f.cl.raft(); r != nil && r.State() == raft.Leader {
		return "" // the common case, kept cheap: a leader serves its own
	}
	if _, ok := f.route(); !ok {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader
}

// Route is the leader's ticket operations when this node forwards to it:
// Raft is open, this node does not lead, and it knows a leader other
// than itself.
func (cl *Node) Route() (Tickets, bool) {
	c, ok := cl.fwd.route()
	if !ok {
		return nil, false
	}
	return routed{f: &cl.fwd, c: c}, true
}

// ForwardsTo is the leader a ticket op arriving now would be forwarded
// to, "" when this node would serve it itself or cannot forward.
func (cl *Node) ForwardsTo() string { return cl.fwd.forwardsTo() }

// forwarded is the forward.Handler: this node's own local operations. A
// wait holds a slot of peer's share (node/waiters.go: Origin).
func (cl *Node) forwarded(ctx context.Context, peer string, req forward.Request) forward.Response {
	ctx = withOrigin(ctx, peer)
	local := cl.host.Local()
	switch req.Op {
	case forward.OpGrant, forward.OpRenew, forward.OpRelease, forward.OpRevoke:
		if req.LeaseS > 255 {
			return forward.Response{Code: forward.CodeBadRequest, Message: "lease_s above 255"}
		}
		if req.WaitMs > api.MaxWaitMs {
			return forward.Response{Code: forward.CodeBadRequest, Message: fmt.Sprintf("field \"wait_ms\": %d is outside 0..=%d", req.WaitMs, api.MaxWaitMs)}
		}
		w := api.Write{Op: writeOps[req.Op], Name: req.Name, Holder: req.Holder, Token: req.Token, LeaseS: uint8(req.LeaseS), WaitMs: req.WaitMs}
		out, err := local.Write(ctx, w)
		if err != nil {
			return errResponse(err)
		}
		return writtenResponse(out)
	case forward.OpGet:
		t, ok, err := local.Get(ctx, req.Name)
		if err != nil {
			return errResponse(err)
		}
		if !ok {
			return forward.Response{Code: forward.CodeNotFound, Message: "no such ticket"}
		}
		ft := wireTicket(t, 0)
		return forward.Response{Code: forward.CodeOK, Ticket: &ft}
	case forward.OpWatch:
		wait := time.Duration(req.WaitMs) * time.Millisecond
		if wait > api.MaxWatchWait {
			return forward.Response{Code: forward.CodeBadRequest, Message: fmt.Sprintf("wait %v is outside 0..=%v", wait, api.MaxWatchWait)}
		}
		t, ok, idx, err := local.Watch(ctx, req.Name, req.Index, wait)
		if err != nil {
			return errResponse(err)
		}
		w := &forward.Watched{Index: idx}
		if ok {
			ft := wireTicket(t, 0)
			w.Ticket = &ft
		}
		return forward.Response{Code: forward.CodeOK, Watched: w}
	case forward.OpList:
		ts, more, err := local.List(ctx, req.Prefix, int(req.Limit))
		if err != nil {
			return errResponse(err)
		}
		l := &forward.List{Truncated: more}
		for _, t := range ts {
			l.Tickets = append(l.Tickets, wireTicket(t, 0))
		}
		return forward.Response{Code: forward.CodeOK, List: l}
	}
	return forward.Response{Code: forward.CodeBadRequest, Message: "unknown op"}
}

// forwardWrite sends a Write to the leader.
func (f *forwarder) forwardWrite(ctx context.Context, c *forward.Client, w api.Write) (api.Written, error) {
	req := forward.Request{Op: forwardOps[w.Op], Name: w.Name, Holder: w.Holder}
	if w.Op != ticket.OpGrant {
		req.Token = w.Token
	}
	if w.Op == ticket.OpGrant || w.Op == ticket.OpRenew {
		req.LeaseS = uint32(w.LeaseS)
	}
	do := c.Do
	if w.Op == ticket.OpGrant && w.WaitMs > 0 {
		// A blocking grant waits on the leader, on a connection of its
		// own: the caller going away closes it, which ends the wait there.
		release, err := f.cl.host.ReserveWait(false, api.CallerOf(ctx))
		if err != nil {
			return api.Written{}, err
		}
		defer release()
		var cancel context.CancelFunc
		ctx, cancel = f.cl.host.BindWait(ctx) // ends when this node stops, too
		defer cancel()
		req.WaitMs, do = w.WaitMs, c.DoAlone
	}
	resp, err := do(ctx, req)
	var fe *forward.Error
	switch {
	case errors.As(err, &fe) && fe.Code == forward.CodeHeld:
		return api.Written{Result: ticket.Result{Code: ticket.CodeHeld, Ticket: ticket.Ticket{Name: w.Name, Holder: fe.Holder, Token: fe.Token}}}, nil
	case errors.As(err, &fe) && fe.Code == forward.CodeMismatch:
		if code, ok := mismatchCodes[fe.Reason]; ok {
			return api.Written{Result: ticket.Result{Code: code}}, nil
		}
		return api.Written{}, forwardErr(err)
	case err != nil:
		return api.Written{}, forwardErr(err)
	}
	t := localTicket(resp.Ticket)
	code := ticket.CodeOK
	if resp.Reason == ticket.CodeExisting.String() {
		code = ticket.CodeExisting
	}
	recv := t.ValidBeforeMs
	if resp.Ticket != nil && resp.Ticket.RemainingMs <= recv {
		recv -= resp.Ticket.RemainingMs
	}
	return api.Written{Result: ticket.Result{Code: code, Ticket: t}, RecvMs: recv, WaitedMs: resp.WaitedMs}, nil
}

// forwardGet is a linearizable Get on the leader.
func (f *forwarder) forwardGet(ctx context.Context, c *forward.Client, name string) (ticket.Ticket, bool, error) {
	resp, err := c.Do(ctx, forward.Request{Op: forward.OpGet, Name: name})
	if errors.Is(err, forward.ErrNotFound) {
		return ticket.Ticket{}, false, nil
	}
	if err != nil {
		return ticket.Ticket{}, false, forwardErr(err)
	}
	return localTicket(resp.Ticket), resp.Ticket != nil, nil
}

// forwardWatch is a blocking read on the leader, on a connection of its
// own (see forwardWrite).
func (f *forwarder) forwardWatch(ctx context.Context, c *forward.Client, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error) {
	req := forward.Request{Op: forward.OpWatch, Name: name, Index: index, WaitMs: uint32(wait / time.Millisecond)}
	do := c.Do
	if wait > 0 {
		release, err := f.cl.host.ReserveWait(true, api.CallerOf(ctx))
		if err != nil {
			return ticket.Ticket{}, false, 0, err
		}
		defer release()
		var cancel context.CancelFunc
		ctx, cancel = f.cl.host.BindWait(ctx)
		defer cancel()
		do = c.DoAlone
	}
	resp, err := do(ctx, req)
	if err != nil {
		return ticket.Ticket{}, false, 0, forwardErr(err)
	}
	if resp.Watched == nil {
		return ticket.Ticket{}, false, 0, api.Unavailable("", "leader", "the leader answered a watch without its index")
	}
	return localTicket(resp.Watched.Ticket), resp.Watched.Ticket != nil, resp.Watched.Index, nil
}

// forwardList is a linearizable List on the leader.
func (f *forwarder) forwardList(ctx context.Context, c *forward.Client, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	resp, err := c.Do(ctx, forward.Request{Op: forward.OpList, Prefix: prefix, Limit: uint32(max(limit, 0))})
	if err != nil {
		return nil, false, forwardErr(err)
	}
	if resp.List == nil {
		return nil, false, nil
	}
	out := make([]ticket.Ticket, 0, len(resp.List.Tickets))
	for i := range resp.List.Tickets {
		out = append(out, localTicket(&resp.List.Tickets[i]))
	}
	return out, resp.List.Truncated, nil
}

// routed is the leader's ticket operations through the forwarding
// client c (mode.route).
type routed struct {
	f *forwarder
	c *forward.Client
}

func (r routed) Write(ctx context.Context, w api.Write) (api.Written, error) {
	return r.f.forwardWrite(ctx, r.c, w)
}

func (r routed) Get(ctx context.Context, name string) (ticket.Ticket, bool, error) {
	return r.f.forwardGet(ctx, r.c, name)
}

func (r routed) Watch(ctx context.Context, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error) {
	return r.f.forwardWatch(ctx, r.c, name, index, wait)
}

func (r routed) List(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	return r.f.forwardList(ctx, r.c, prefix, limit)
}

// originKey marks a wait forwarded to this leader with the node it came
// through.
type originKey struct{}

func withOrigin(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, originKey{}, node)
}

// Origin is the node a forwarded request came through (the leader counts
// its waits against that node's share), or false for a request this node
// took itself.
func Origin(ctx context.Context) (string, bool) {
	node, ok := ctx.Value(originKey{}).(string)
	return node, ok
}
