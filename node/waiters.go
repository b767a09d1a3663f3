package node

// Blocking grants and watches (SPEC §4.2). The leader keeps, per ticket, a
// FIFO of waiting Grants and a set of watchers; the FSM's change hook
// (ticket.FSM.OnChange, called under the FSM's lock) wakes the head waiter
// and every watcher of the changed ticket with a non-blocking send. Each
// waiter's Grant is an ordinary writeLocal: the clock check, the hold-off
// and the FSM's rules all apply. A lost leadership closes the term channel
// every waiter selects on, ending its wait with a 503 not_leader.
//
// Memory per waiter or watcher: one struct and a one-slot channel; the
// counts are capped by api.max_waiters and api.max_watchers (429 beyond).

import (
	"context"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/ticket"
)

// waiter is one blocking grant or one watch.
type waiter struct {
	wake chan struct{} // one slot: a wake-up is never lost, never queued twice
}

func newWaiter() *waiter { return &waiter{wake: make(chan struct{}, 1)} }

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// waitHub holds the waiters and watchers of one node.
type waitHub struct {
	maxWaiters, maxWatchers int

	mu       sync.Mutex
	queues   map[string][]*waiter // FIFO per ticket
	watchers map[string]map[*waiter]struct{}
	nWait    int
	nWatch   int
	term     chan struct{}      // closed when this node's leadership ends; nil when not leading
	closed   bool               // the node is stopping: no new term
	stopCtx  context.Context    // ends with close
	stop     context.CancelFunc // ends stopCtx
}

func newWaitHub(maxWaiters, maxWatchers int) *waitHub {
	h := &waitHub{maxWaiters: maxWaiters, maxWatchers: maxWatchers,
		queues: map[string][]*waiter{}, watchers: map[string]map[*waiter]struct{}{}}
	h.stopCtx, h.stop = context.WithCancel(context.Background())
	return h
}

// bind returns ctx ended also by close: a wait this node forwards ends
// when the node stops, not only when the caller goes away.
func (h *waitHub) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(h.stopCtx, cancel)
	return ctx, func() { unhook(); cancel() }
}

// close ends the current term's waits and refuses new ones: the node is
// stopping. Idempotent.
func (h *waitHub) close() {
	h.endTerm()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.stop()
	}
}

var (
	errTooManyWaiters  = api.Refuse(api.KindTooMany, "too_many_waiters", "too many blocking grants wait on this node (api.max_waiters); retry later")
	errTooManyWatchers = api.Refuse(api.KindTooMany, "too_many_watchers", "too many blocking reads wait on this node (api.max_watchers); retry later")
	errWaitLeader      = api.NotLeader(string(StageRaft), "this node stopped leading while the request waited; retry (the new leader serves it)")
	errWaitGone        = api.Unavailable("", "cancelled", "the request ended while it waited")
)

// changed is the FSM's change hook: name's head waiter and watchers wake
// ("" wakes everyone: a snapshot was restored).
func (h *waitHub) changed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == "" {
		for _, q := range h.queues {
			q[0].signal()
		}
		for _, ws := range h.watchers {
			for w := range ws {
				w.signal()
			}
		}
		return
	}
	if q := h.queues[name]; len(q) > 0 {
		q[0].signal()
	}
	for w := range h.watchers[name] {
		w.signal()
	}
}

// startTerm is called once this node leads and serves; endTerm when that
// ends: every waiter and watcher of the term wakes to a 503.
func (h *waitHub) startTerm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term == nil && !h.closed {
		h.term = make(chan struct{})
	}
}

func (h *waitHub) endTerm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term != nil {
		close(h.term)
		h.term = nil
	}
}

// enqueue adds a waiter at the tail of name's queue.
func (h *waitHub) enqueue(name string) (*waiter, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term == nil {
		return nil, nil, errWaitLeader
	}
	if h.nWait >= h.maxWaiters {
		return nil, nil, errTooManyWaiters
	}
	w := newWaiter()
	h.queues[name] = append(h.queues[name], w)
	h.nWait++
	return w, h.term, nil
}

// head reports whether w is first in name's queue.
func (h *waitHub) head(name string, w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[name]
	return len(q) > 0 && q[0] == w
}

// dequeue removes w; when it was the head, the next one wakes to try.
func (h *waitHub) dequeue(name string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[name]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		h.nWait--
		if len(q) == 0 {
			delete(h.queues, name)
			return
		}
		h.queues[name] = q
		if i == 0 {
			q[0].signal()
		}
		return
	}
}

// watch registers a watcher of name.
func (h *waitHub) watch(name string) (*waiter, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term == nil {
		return nil, nil, errWaitLeader
	}
	if h.nWatch >= h.maxWatchers {
		return nil, nil, errTooManyWatchers
	}
	w := newWaiter()
	ws := h.watchers[name]
	if ws == nil {
		ws = map[*waiter]struct{}{}
		h.watchers[name] = ws
	}
	ws[w] = struct{}{}
	h.nWatch++
	return w, h.term, nil
}

func (h *waitHub) unwatch(name string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.watchers[name]
	if _, ok := ws[w]; !ok {
		return
	}
	delete(ws, w)
	h.nWatch--
	if len(ws) == 0 {
		delete(h.watchers, name)
	}
}

// reserve counts a wait this node forwards to the leader against its own
// cap (a follower's or a gossip-only client's); the func gives it back.
func (h *waitHub) reserve(watch bool) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, limit, err := &h.nWait, h.maxWaiters, errTooManyWaiters
	if watch {
		n, limit, err = &h.nWatch, h.maxWatchers, errTooManyWatchers
	}
	if *n >= limit {
		return nil, err
	}
	*n++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		*n--
	}, nil
}

// counts returns the waiters and watchers held now (metrics, tests).
func (h *waitHub) counts() (waiters, watchers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nWait, h.nWatch
}

// grantWaiting is a Grant with wait_ms > 0 on the leader: first come,
// first served among the waiters of the ticket, until the Grant is
// answered other than "held", wait_ms passes (then the 409 held), the
// request's context ends (the caller went away: dropped, never granted),
// or the leadership ends (503).
func (n *Node) grantWaiting(ctx context.Context, w api.Write) (api.Written, error) {
	arrived := time.Now() // monotonic: how long the caller waited (wire.Grant.WaitedMs)
	wctx, cancel := context.WithTimeout(ctx, time.Duration(w.WaitMs)*time.Millisecond)
	defer cancel()
	me, term, err := n.waits.enqueue(w.Name)
	if err != nil {
		return api.Written{}, err
	}
	defer n.waits.dequeue(w.Name, me)
	var last api.Written
	tried := false
	for {
		if n.waits.head(w.Name, me) {
			waited := time.Since(arrived) // before the Grant's own receive time
			out, err := n.grantFor(ctx, w)
			if err != nil || out.Result.Code != ticket.CodeHeld {
				if err == nil && out.Result.Code == ticket.CodeOK {
					out.WaitedMs = uint64(waited.Milliseconds())
				}
				return out, err
			}
			last, tried = out, true
		}
		select {
		case <-me.wake:
		case <-term:
			return api.Written{}, errWaitLeader
		case <-wctx.Done():
			if ctx.Err() != nil {
				return api.Written{}, errWaitGone // the caller went away
			}
			if !tried {
				// Never at the head: the holder as it stands, unless the
				// ticket is free or ours (then as a Grant without wait).
				if t, held := n.fsm.Get(w.Name); held && t.Holder != w.Holder {
					return api.Written{Result: ticket.Result{Code: ticket.CodeHeld, Ticket: t}}, nil
				}
				return n.grantFor(ctx, w)
			}
			return last, nil
		}
	}
}

// grantFor proposes one Grant for a waiter whose caller may go away at any
// moment. The proposal itself is not cancelled by the caller's context
// (an entry in flight cannot be recalled); if the caller is gone when it
// applied and it made the caller the holder, it is released at once, so a
// caller that went away never holds the ticket.
func (n *Node) grantFor(ctx context.Context, w api.Write) (api.Written, error) {
	if ctx.Err() != nil {
		return api.Written{}, errWaitGone
	}
	w.WaitMs = 0
	out, err := n.writeLocal(context.WithoutCancel(ctx), w)
	if err != nil || out.Result.Code != ticket.CodeOK || ctx.Err() == nil {
		return out, err
	}
	t := out.Result.Ticket
	rel := api.Write{Op: ticket.OpRelease, Name: t.Name, Holder: t.Holder, Token: t.Token}
	if _, rerr := n.writeLocal(context.WithoutCancel(ctx), rel); rerr != nil {
		n.log.Warn("a waiter went away as its grant applied, and releasing it failed: the ticket expires with its lease",
			"ticket", t.Name, "holder", t.Holder, "token", t.Token, "err", rerr)
	}
	return api.Written{}, errWaitGone
}

// watchLocal answers when name's modify index is above index, or wait
// passes, with the state and its index (linearizable: the read follows
// VerifyLeader on this leader).
func (n *Node) watchLocal(ctx context.Context, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error) {
	if err := n.readable(ctx); err != nil {
		return ticket.Ticket{}, false, 0, err
	}
	t, ok, idx := n.fsm.GetIndexed(name)
	if idx > index || wait <= 0 {
		return t, ok, idx, nil
	}
	me, term, err := n.waits.watch(name)
	if err != nil {
		return ticket.Ticket{}, false, 0, err
	}
	defer n.waits.unwatch(name, me)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		// Registered before this read: a change after it wakes us.
		t, ok, idx = n.fsm.GetIndexed(name)
		if idx > index {
			break
		}
		select {
		case <-me.wake:
			continue
		case <-term:
			return ticket.Ticket{}, false, 0, errWaitLeader
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ticket.Ticket{}, false, 0, errWaitGone
			}
		}
		break
	}
	if err := n.readable(ctx); err != nil {
		return ticket.Ticket{}, false, 0, err
	}
	t, ok, idx = n.fsm.GetIndexed(name)
	return t, ok, idx, nil
}
