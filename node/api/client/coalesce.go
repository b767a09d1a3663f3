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
// is its own ErrHeld), and its local deadline counted from the moment it
// was queued, which is no later than the batch's send (SPEC §4). A batch
// goes to the address that answered last; when that address cannot serve
// it (unreachable, a "cannot serve" 503, or a lost answer: failover.go),
// or answers one of its ops so, each such call is sent again alone from
// the next address, on its own ctx — every op a batch carries is safe to
// repeat (SPEC §4.1) — and, when nothing answers, fails with
// ErrOutcomeUnknown if the batch may have been applied. Ending one call's
// ctx ends only that call: queued and not yet sent, it is dropped and
// never reaches the server; already sent, the call returns at once with
// ctx's error and its outcome is unknown (read the ticket), while the
// batch goes on for the others. GrantWait, Acquire's waits, reads and
// admin calls are not batched.
//
// A server without POST /v1/batch (an older ticketd) answers the batch request itself 404 or 405: then
// nothing of the batch was applied, so each of its calls is sent again
// alone, and for noBatchRetry (a minute) every call goes alone on its own
// ctx, unqueued, as without coalescing; the first batch after that asks
// again (an upgraded server is used again). An op's own answer inside a
// batch's results (a 404, a 409) is that op's answer, never sent again.
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
	done chan struct{} // closed when the fields below are set
	sent bool          // under coalescer.mu: taken into a batch

	status int
	body   json.RawMessage
	err    error
	// alone: send the op again alone, skipping address at (it could not
	// serve the batch or this op); uncertain: the batch may have applied it.
	alone     bool
	at        int
	uncertain bool
}

// coLease is Grant or Renew through the coalescer.
func (c *Client) coLease(ctx context.Context, op wire.BatchOp) (*Lease, error) {
	sent := c.now() // before queueing: no later than the batch's send
	r := c.co.do(ctx, op)
	if r.err != nil {
		return nil, repeatRefused(op.Op, r)
	}
	return decodeLease(sent, op.Op, r.raw)
}

// do queues op, waits for its result and returns the body of a 2xx
// answer, or the op's error.
func (q *coalescer) do(ctx context.Context, op wire.BatchOp) reply {
	if err := ctx.Err(); err != nil {
		return reply{err: fmt.Errorf("client: %s %q not sent: %w", op.Op, op.Name, err)}
	}
	q.mu.Lock()
	if q.c.now().Before(q.noBatch) {
		q.mu.Unlock()
		return q.single(ctx, op, nil)
	}
	if q.inFlight < q.max && len(q.queue) == 0 {
		// Nothing to share this request with: send it alone, as a plain
		// single request on the caller's ctx (the batch envelope and the
		// sender's hand-off would only cost). Calls arriving meanwhile
		// queue behind its slot.
		q.inFlight++
		q.mu.Unlock()
		r := q.single(ctx, op, nil)
		q.mu.Lock()
		if len(q.queue) > 0 {
			go q.run() // the slot passes to a sender
		} else {
			q.inFlight--
		}
		q.mu.Unlock()
		return r
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
			return reply{err: fmt.Errorf("client: %s %q not sent: %w", op.Op, op.Name, ctx.Err())}
		}
		return reply{err: fmt.Errorf("client: POST /v1/batch: %s %q was sent when ctx ended (%w): %w", op.Op, op.Name, ctx.Err(), ErrOutcomeUnknown), uncertain: true}
	}
	switch {
	case errors.Is(it.err, errNoBatch):
		return q.single(ctx, op, nil) // nothing of the batch was applied
	case it.alone:
		return q.single(ctx, op, it)
	case it.err != nil:
		return reply{err: it.err}
	case it.status/100 != 2:
		return reply{err: answerError(it.status, it.body)}
	}
	return reply{raw: it.body}
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

// send posts one batch to the preferred address and hands each call its
// result. The request's context is none of the callers' (one caller going
// away must not cancel the others): batchTimeout and the HTTP client's
// timeout bound it. When the address cannot serve the batch, or one of
// its ops, those calls go alone to the others (do).
func (q *coalescer) send(batch []*queued) {
	req := wire.BatchRequest{Ops: make([]wire.BatchOp, len(batch))}
	for i, it := range batch {
		req.Ops[i] = it.op
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	at := q.c.preferred()
	raw, h, err, sent := q.c.attempt(ctx, q.c.hc, q.c.addrs[at], http.MethodPost, "/v1/batch", mustJSON(req), false)
	var resp wire.BatchResponse
	var e *Error // attempt's answer errors are bare: As finds only those
	switch ok := errors.As(err, &e); {
	case ok && (e.StatusCode == http.StatusNotFound || e.StatusCode == http.StatusMethodNotAllowed):
		// The answer to the batch request itself (an op's own 404 is a
		// result inside a 200): the server has no such route.
		q.mu.Lock()
		q.noBatch = q.c.now().Add(noBatchRetry)
		q.mu.Unlock()
		err = errNoBatch
	case classify(err, sent) != answered:
		q.c.failed(at)
		uncertain := classify(err, sent) == unknown
		for _, it := range batch {
			it.err, it.alone, it.at, it.uncertain = err, true, at, uncertain
			close(it.done)
		}
		return
	case err == nil:
		q.c.answeredBy(at, h)
		if uerr := json.Unmarshal(raw, &resp); uerr != nil {
			err = fmt.Errorf("client: POST /v1/batch: decoding the answer: %w", uerr)
		} else if len(resp.Results) != len(batch) {
			err = fmt.Errorf("client: POST /v1/batch: %d results for %d ops", len(resp.Results), len(batch))
		}
	}
	refused := false
	for i, it := range batch {
		if e := (*Error)(nil); errors.As(err, &e) {
			ec := *e // each caller its own copy
			it.err = &ec
		} else if err != nil {
			it.err = err
		} else {
			it.status, it.body = resp.Results[i].Status, resp.Results[i].Body
			if it.status/100 != 2 {
				if v := classify(answerError(it.status, it.body), true); v != answered {
					it.err, it.alone, it.at, it.uncertain = answerError(it.status, it.body), true, at, v == unknown
					refused = true
				}
			}
		}
		close(it.done)
	}
	if refused {
		q.c.failed(at) // it cannot serve some ops: the calls sent alone start elsewhere
	}
}

// single sends op alone to its own endpoint; after a batch that could not
// be served at one address (failed), from the next address on.
func (q *coalescer) single(ctx context.Context, op wire.BatchOp, failed *queued) reply {
	var body any
	switch op.Op {
	case "grant":
		body = wire.GrantRequest{Holder: op.Holder, LeaseS: *op.LeaseS}
	case "renew":
		body = wire.RenewRequest{Holder: op.Holder, Token: *op.Token, LeaseS: *op.LeaseS}
	default:
		body = wire.ReleaseRequest{Holder: op.Holder, Token: *op.Token}
	}
	cl := &call{method: http.MethodPost, path: ticketPath(op.Name, op.Op), body: mustJSON(body), hc: q.c.hc, repeatable: true, skip: -1}
	if failed != nil {
		cl.skip, cl.uncertain, cl.cause = failed.at, failed.uncertain, failed.err
	}
	return q.c.send(ctx, cl)
}
