package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// WithCoalescing makes Grant, TryGrant, Renew and Release calls that run
// concurrently share requests, the way etcd's client shares one gRPC
// connection: each call is queued and sent with the others queued with it
// as one POST /v1/batch, at most inFlight requests at a time (1 or 2 is
// enough; inFlight < 1 means 1). A call never waits for a timer: when a
// slot is free its batch leaves at once, and the next batch takes
// everything queued meanwhile (up to wire.MaxBatchOps ops). A call that
// finds a free slot and nothing queued is sent alone to its own endpoint
// (on its own ctx), so a lone caller pays nothing for coalescing.
//
// Each call keeps its own semantics: its own answer or error (a 409 held
// is its own ErrHeld), its own unknown outcome when the batch request
// fails in flight (a transport error, as for a single request), and its
// local deadline counted from the moment it was queued, which is no later
// than the batch's send (SPEC §4). Ending one call's ctx ends only that
// call: queued and not yet sent, it is dropped and never reaches the
// server; already sent, the call returns at once with ctx's error and its
// outcome is unknown (read the ticket), while the batch goes on for the
// others. GrantWait, Acquire's waits, reads and admin calls are not
// batched.
//
// POST /v1/batch is ticketd's since issue 16. A server without it (an
// older ticketd) answers the batch request itself 404 or 405: then
// nothing of the batch was applied, so each of its calls is sent again
// alone, and for noBatchRetry (a minute) every call goes alone on its own
// ctx, unqueued, as without coalescing; the first batch after that asks
// again (an upgraded server is used again). Nothing else on a batch
// request, an error status or a lost answer, sends an op twice; nor does
// an op's own 404 inside a batch's results.
func WithCoalescing(inFlight int) Option {
	return func(c *Client) { c.coInFlight = max(inFlight, 1) }
}

// batchBudget bounds a batch's encoded ops below the server's 256 KiB.
const batchBudget = 192 << 10

// coalescer queues calls and sends them as batches.
type coalescer struct {
	c   *Client
	max int

	mu       sync.Mutex
	queue    []*queued
	inFlight int       // senders running
	noBatch  time.Time // until then every call goes alone (see WithCoalescing)
}

// noBatchRetry is how long calls go alone after the server answered a
// batch request 404 or 405.
const noBatchRetry = time.Minute

// errNoBatch is the result of the calls of a batch the server answered
// 404 or 405: nothing of it was applied, and each call is sent alone.
var errNoBatch = errors.New("client: the server has no POST /v1/batch")

// queued is one call waiting for its result.
type queued struct {
	op   wire.BatchOp
	done chan struct{} // closed when status, body and err are set
	sent bool          // under coalescer.mu: taken into a batch

	status int
	body   json.RawMessage
	err    error
}

// coLease is Grant or Renew through the coalescer.
func (c *Client) coLease(ctx context.Context, op wire.BatchOp) (*Lease, error) {
	sent := c.now() // before queueing: no later than the batch's send
	raw, err := c.co.do(ctx, op)
	if err != nil {
		return nil, err
	}
	return decodeLease(sent, op.Op, raw)
}

// do queues op, waits for its result and returns the body of a 2xx
// answer, or the op's error.
func (q *coalescer) do(ctx context.Context, op wire.BatchOp) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: %s %q not sent: %w", op.Op, op.Name, err)
	}
	q.mu.Lock()
	if q.c.now().Before(q.noBatch) {
		q.mu.Unlock()
		return q.single(ctx, op)
	}
	if q.inFlight < q.max && len(q.queue) == 0 {
		// Nothing to share this request with: send it alone, as a plain
		// single request on the caller's ctx (the batch envelope and the
		// sender's hand-off would only cost). Calls arriving meanwhile
		// queue behind its slot.
		q.inFlight++
		q.mu.Unlock()
		raw, err := q.single(ctx, op)
		q.mu.Lock()
		if len(q.queue) > 0 {
			go q.run() // the slot passes to a sender
		} else {
			q.inFlight--
		}
		q.mu.Unlock()
		return raw, err
	}
	it := &queued{op: op, done: make(chan struct{})}
	q.queue = append(q.queue, it)
	start := q.inFlight < q.max
	if start {
		q.inFlight++
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
	select {
	case <-it.done:
	case <-ctx.Done():
		q.mu.Lock()
		sent := it.sent
		if !sent {
			q.queue = slices.DeleteFunc(q.queue, func(x *queued) bool { return x == it })
		}
		q.mu.Unlock()
		if !sent {
			return nil, fmt.Errorf("client: %s %q not sent: %w", op.Op, op.Name, ctx.Err())
		}
		return nil, fmt.Errorf("client: POST /v1/batch: %s %q was sent, its outcome is unknown: %w", op.Op, op.Name, ctx.Err())
	}
	if it.err == errNoBatch {
		return q.single(ctx, op) // nothing of the batch was applied
	}
	if it.err != nil {
		return nil, it.err
	}
	if it.status/100 != 2 {
		return nil, answerError(it.status, it.body)
	}
	return it.body, nil
}

// run sends batches until the queue is empty.
func (q *coalescer) run() {
	for {
		q.mu.Lock()
		if q.c.now().Before(q.noBatch) {
			// The server has no batch route: the calls queued meanwhile
			// go alone, none of them sent yet.
			for _, it := range q.queue {
				it.err = errNoBatch
				close(it.done)
			}
			q.queue = nil
			q.inFlight--
			q.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(q.queue) && n < wire.MaxBatchOps {
			size += len(q.queue[n].op.Name) + len(q.queue[n].op.Holder) + 96
			if n > 0 && size > batchBudget {
				break
			}
			n++
		}
		if n == 0 {
			q.inFlight--
			q.mu.Unlock()
			return
		}
		batch := q.queue[:n:n]
		q.queue = slices.Clone(q.queue[n:])
		for _, it := range batch {
			it.sent = true
		}
		q.mu.Unlock()
		q.send(batch)
	}
}

// batchTimeout bounds one batch request, whatever the HTTP client's own
// timeout (WithHTTPClient may bring none): a server that never answers
// must not hold a sender's slot, and every call queued behind it, forever.
var batchTimeout = 30 * time.Second

// send posts one batch and hands each call its result. The request's
// context is none of the callers' (one caller going away must not cancel
// the others): batchTimeout and the HTTP client's timeout bound it.
func (q *coalescer) send(batch []*queued) {
	req := wire.BatchRequest{Ops: make([]wire.BatchOp, len(batch))}
	for i, it := range batch {
		req.Ops[i] = it.op
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	raw, err := q.c.do(ctx, http.MethodPost, "/v1/batch", req, false)
	if e, ok := err.(*Error); ok && (e.StatusCode == http.StatusNotFound || e.StatusCode == http.StatusMethodNotAllowed) {
		// The answer to the batch request itself (an op's own 404 is a
		// result inside a 200): the server has no such route.
		q.mu.Lock()
		q.noBatch = q.c.now().Add(noBatchRetry)
		q.mu.Unlock()
		err = errNoBatch
	}
	var resp wire.BatchResponse
	if err == nil {
		if uerr := json.Unmarshal(raw, &resp); uerr != nil {
			err = fmt.Errorf("client: POST /v1/batch: decoding the answer: %w", uerr)
		} else if len(resp.Results) != len(batch) {
			err = fmt.Errorf("client: POST /v1/batch: %d results for %d ops", len(resp.Results), len(batch))
		}
	}
	for i, it := range batch {
		if e, ok := err.(*Error); ok {
			ec := *e // each caller its own copy
			it.err = &ec
		} else if err != nil {
			it.err = err
		} else {
			it.status, it.body = resp.Results[i].Status, resp.Results[i].Body
		}
		close(it.done)
	}
}

// single sends op alone to its own endpoint.
func (q *coalescer) single(ctx context.Context, op wire.BatchOp) (json.RawMessage, error) {
	var body any
	switch op.Op {
	case "grant":
		body = wire.GrantRequest{Holder: op.Holder, LeaseS: *op.LeaseS}
	case "renew":
		body = wire.RenewRequest{Holder: op.Holder, Token: *op.Token, LeaseS: *op.LeaseS}
	default:
		body = wire.ReleaseRequest{Holder: op.Holder, Token: *op.Token}
	}
	return q.c.do(ctx, http.MethodPost, ticketPath(op.Name, op.Op), body, false)
}
