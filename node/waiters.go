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
//
// Shares (SPEC §4.2's cap, shared so one node or one caller cannot take it
// all): every wait holds a slot on its entry node (the one the client
// called) and, when forwarded, one on the leader. On the entry node a
// caller (the client's address, node/api.CallerOf) holds at most
// api.max_waiters_per_caller (max_watchers_per_caller). On the leader of a
// cluster every node the waits come through is guaranteed
// ⌊max / (2 × alive nodes)⌋ slots; beyond that a node takes only what is
// not kept back for the other nodes' guarantees (slots.take). A 429 says
// which cap and whose share (Reason node_cap, caller_share, node_share).

import (
	"context"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// waiter is one blocking grant or one watch.
type waiter struct {
	wake chan struct{} // one slot: a wake-up is never lost, never queued twice
	sh   share         // whose slot it holds
}

func newWaiter(sh share) *waiter { return &waiter{wake: make(chan struct{}, 1), sh: sh} }

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// share says whose slot a wait holds: the node it came through (counted
// on the leader) and the caller on its entry node. Either may be "": a
// forwarded wait's caller is counted on its entry node, not the leader;
// a wait a follower forwards has no node share there.
type share struct{ node, caller string }

// slots counts one kind of wait (blocking grants or watches) against its
// cap and its shares.
type slots struct {
	code      string // the 429's error code
	what      string // "blocking grants", for messages
	key       string // the cap's config key
	callerKey string
	max       int
	perCaller int
	n         int
	byNode    map[string]int
	byCaller  map[string]int
}

func newSlots(code, what, key string, max, perCaller int) *slots {
	return &slots{code: code, what: what, key: key, callerKey: key + "_per_caller", max: max, perCaller: perCaller,
		byNode: map[string]int{}, byCaller: map[string]int{}}
}

// guarantee is what every one of nodes alive nodes may always hold on the
// leader: half the cap, split evenly (the other half is first come).
func (s *slots) guarantee(nodes int) int { return s.max / (2 * max(nodes, 1)) }

// take counts a wait of sh, or says which cap or share is full. self
// names this node; nodes is how many nodes are alive in the cluster (1 for
// a single node). A node at or above its guarantee takes a slot only if
// the slots still owed to the others' guarantees stay free, so every node
// keeps its guarantee whatever the others hold.
func (s *slots) take(sh share, self string, nodes int) error {
	if s.n >= s.max {
		return s.refuse("node_cap", "all %d %s of node %s are in use (%s); retry later", s.max, s.what, self, s.key)
	}
	if sh.caller != "" && s.byCaller[sh.caller] >= s.perCaller {
		return s.refuse("caller_share", "caller %s holds its share of %s on node %s (%d, %s); retry later",
			sh.caller, s.what, self, s.perCaller, s.callerKey)
	}
	if g := s.guarantee(nodes); sh.node != "" && s.byNode[sh.node] >= g {
		owed, holders := 0, 0
		for id, held := range s.byNode {
			if id != sh.node {
				owed += max(0, g-held)
				holders++
			}
		}
		owed += max(0, nodes-1-holders) * g // the nodes holding none
		if s.n+1+owed > s.max {
			return s.refuse("node_share", "%s through node %s hold its share on the leader %s (%d held, %d guaranteed; %d of %s %d are kept for the other nodes' guarantees); retry later or through another node",
				s.what, sh.node, self, s.byNode[sh.node], g, owed, s.key, s.max)
		}
	}
	s.n++
	if sh.node != "" {
		s.byNode[sh.node]++
	}
	if sh.caller != "" {
		s.byCaller[sh.caller]++
	}
	return nil
}

// give returns sh's slot.
func (s *slots) give(sh share) {
	s.n--
	dec(s.byNode, sh.node)
	dec(s.byCaller, sh.caller)
}

func dec(m map[string]int, k string) {
	if k == "" {
		return
	}
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}

func (s *slots) refuse(reason, format string, args ...any) error {
	e := api.Refuse(api.KindTooMany, s.code, format, args...)
	e.Reason = reason
	return e
}

// waitHub holds the waiters and watchers of one node.
type waitHub struct {
	self  string     // this node's NodeId (messages, the leader's own share)
	nodes func() int // alive nodes of the cluster (1: a single node)

	mu       sync.Mutex
	queues   map[string][]*waiter // FIFO per ticket
	watchers map[string]map[*waiter]struct{}
	waits    *slots             // blocking grants
	watches  *slots             // blocking reads
	term     chan struct{}      // closed when this node's leadership ends; nil when not leading
	closed   bool               // the node is stopping: no new term
	stopCtx  context.Context    // ends with close
	stop     context.CancelFunc // ends stopCtx
}

func newWaitHub(self string, a APIConfig, nodes func() int) *waitHub {
	h := &waitHub{self: self, nodes: nodes,
		waits:    newSlots(api.CodeTooManyWaiters, "blocking grants", "api.max_waiters", a.MaxWaiters, a.MaxWaitersPerCaller),
		watches:  newSlots(api.CodeTooManyWatchers, "blocking reads", "api.max_watchers", a.MaxWatchers, a.MaxWatchersPerCaller),
		queues:   map[string][]*waiter{},
		watchers: map[string]map[*waiter]struct{}{}}
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
	errWaitLeader = api.NotLeader(string(stage.Raft), "this node stopped leading while the request waited; retry (the new leader serves it)")
	errWaitGone   = api.Unavailable("", "cancelled", "the request ended while it waited")
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

// aliveNodes is h.nodes() (outside h.mu: it reads the membership).
func (h *waitHub) aliveNodes() int {
	if h.nodes == nil {
		return 1
	}
	return max(1, h.nodes())
}

// enqueue adds a waiter of sh at the tail of name's queue.
func (h *waitHub) enqueue(name string, sh share) (*waiter, <-chan struct{}, error) {
	nodes := h.aliveNodes()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term == nil {
		return nil, nil, errWaitLeader
	}
	if err := h.waits.take(sh, h.self, nodes); err != nil {
		return nil, nil, err
	}
	w := newWaiter(sh)
	h.queues[name] = append(h.queues[name], w)
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
		h.waits.give(w.sh)
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

// watch registers a watcher of name for sh.
func (h *waitHub) watch(name string, sh share) (*waiter, <-chan struct{}, error) {
	nodes := h.aliveNodes()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term == nil {
		return nil, nil, errWaitLeader
	}
	if err := h.watches.take(sh, h.self, nodes); err != nil {
		return nil, nil, err
	}
	w := newWaiter(sh)
	ws := h.watchers[name]
	if ws == nil {
		ws = map[*waiter]struct{}{}
		h.watchers[name] = ws
	}
	ws[w] = struct{}{}
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
	h.watches.give(w.sh)
	if len(ws) == 0 {
		delete(h.watchers, name)
	}
}

// reserve counts a wait this node forwards to the leader against its own
// cap and its caller's share (a follower's or a gossip-only client's); the
// func gives it back.
func (h *waitHub) reserve(watch bool, caller string) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.waits
	if watch {
		s = h.watches
	}
	sh := share{caller: caller}
	if err := s.take(sh, h.self, 1); err != nil {
		return nil, err
	}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		s.give(sh)
	}, nil
}

// queued sets each listed ticket's Waiters: the blocking grants queued
// for it on this node (the leader holds every queue).
func (h *waitHub) queued(ts []ticket.Ticket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range ts {
		ts[i].Waiters = uint32(min(len(h.queues[ts[i].Name]), 1<<32-1))
	}
}

// counts returns the waiters and watchers held now (metrics, tests).
func (h *waitHub) counts() (waiters, watchers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waits.n, h.watches.n
}

// shareOf is whose slot a wait on this node holds: forwarded, the node it
// came through (its caller was counted there); else this node and the
// caller.
func (h *waitHub) shareOf(ctx context.Context) share {
	if node, ok := cluster.Origin(ctx); ok {
		return share{node: node}
	}
	return share{node: h.self, caller: api.CallerOf(ctx)}
}

// grantWaiting is a Grant with wait_ms > 0 on the leader: first come,
// first served among the waiters of the ticket, until the Grant is
// answered other than "held", wait_ms passes (then the 409 held), the
// request's context ends (the caller went away: dropped, never granted),
// or the leadership ends (503).
func (n *server) grantWaiting(ctx context.Context, w api.Write) (api.Written, error) {
	arrived := time.Now() // monotonic: how long the caller waited (wire.Grant.WaitedMs)
	wctx, cancel := context.WithTimeout(ctx, time.Duration(w.WaitMs)*time.Millisecond)
	defer cancel()
	me, term, err := n.waits.enqueue(w.Name, n.waits.shareOf(ctx))
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
func (n *server) grantFor(ctx context.Context, w api.Write) (api.Written, error) {
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
func (n *server) watchLocal(ctx context.Context, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error) {
	if err := n.readable(ctx); err != nil {
		return ticket.Ticket{}, false, 0, err
	}
	t, ok, idx := n.fsm.GetIndexed(name)
	if idx > index || wait <= 0 {
		return t, ok, idx, nil
	}
	me, term, err := n.waits.watch(name, n.waits.shareOf(ctx))
	if err != nil {
		return ticket.Ticket{}, false, 0, err
	}
	defer n.waits.unwatch(name, me)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		// Registered before this read: a change after it wakes us.
		if _, _, idx := n.fsm.GetIndexed(name); idx > index {
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
