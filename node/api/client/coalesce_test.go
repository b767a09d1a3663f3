package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// batchServer answers POST /v1/batch per op by holder: "held" is a 409
// held, "bad" a 400, "down" a 503; anything else succeeds (a grant or
// renew with 30 s left, a release). hold, when set, is received from
// before each batch is answered; arrived gets each batch as it arrives.
type batchServer struct {
	t       *testing.T
	hold    chan struct{}
	arrived chan batchSeen
	drop    bool // hang up on the batch instead of answering
	once    sync.Once

	mu      sync.Mutex
	batches []batchSeen
}

type batchSeen struct {
	at     time.Time
	ops    []wire.BatchOp
	single bool // sent alone to its own endpoint (nothing to share it with)
}

func (s *batchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seen := batchSeen{at: time.Now()}
	var req wire.BatchRequest
	switch rest, single := strings.CutPrefix(r.URL.Path, "/v1/tickets/"); {
	case r.Method != "POST":
		s.t.Errorf("%s %s: not a write", r.Method, r.URL.Path)
	case single:
		// A call sent alone: its own endpoint, recorded as a batch of one.
		name, action, _ := strings.Cut(rest, "/")
		var body struct {
			Holder string  `json:"holder"`
			Token  *uint64 `json:"token"`
			LeaseS *int64  `json:"lease_s"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			s.t.Errorf("single body: %v", err)
		}
		req.Ops = []wire.BatchOp{{Op: action, Name: name, Holder: body.Holder, Token: body.Token, LeaseS: body.LeaseS}}
		seen.single = true
	case r.URL.Path == "/v1/batch":
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			s.t.Errorf("batch body: %v", err)
		}
	default:
		s.t.Errorf("POST %s: no such endpoint", r.URL.Path)
	}
	seen.ops = req.Ops
	s.mu.Lock()
	s.batches = append(s.batches, seen)
	s.mu.Unlock()
	if s.arrived != nil {
		s.arrived <- seen
	}
	if s.hold != nil {
		<-s.hold
	}
	if s.drop {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
		return
	}
	var resp wire.BatchResponse
	for i, op := range req.Ops {
		var status int
		var body any
		switch op.Holder {
		case "held":
			status, body = 409, wire.ErrorBody{Error: "held", Message: "held by x", Holder: "x", Token: 99}
		case "bad":
			status, body = 400, wire.ErrorBody{Error: "bad_request", Message: `field "lease_s": 0 is outside 1..=250`}
		case "down":
			status, body = 503, wire.ErrorBody{Error: "unavailable", Message: "m", Reason: "unknown_outcome"}
		default:
			tok := uint64(1000 + i)
			if op.Token != nil {
				tok = *op.Token
			}
			status = 200
			if op.Op == "release" {
				body = wire.Released{Name: op.Name, Holder: op.Holder, Token: tok, Released: true}
			} else {
				body = wire.Grant{Name: op.Name, Holder: op.Holder, Token: tok, LeaseS: uint8(*op.LeaseS), RemainingMs: 30000, ConservativeValidBeforeUnixMs: 77}
			}
		}
		raw, _ := json.Marshal(body)
		resp.Results = append(resp.Results, wire.BatchResult{Status: status, Body: raw})
	}
	if seen.single && len(resp.Results) == 1 {
		w.WriteHeader(resp.Results[0].Status)
		w.Write(resp.Results[0].Body)
		return
	}
	json.NewEncoder(w).Encode(resp)
}

// open lets every held batch through (also at cleanup, so a failed test
// does not leave handlers hanging).
func (s *batchServer) open() {
	s.once.Do(func() {
		if s.hold != nil {
			close(s.hold)
		}
	})
}

func (s *batchServer) seen() []batchSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]batchSeen(nil), s.batches...)
}

func coalescing(t *testing.T, s *batchServer, inFlight int) *Client {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.open)
	c, err := New(srv.URL, WithHTTPClient(srv.Client()), WithCoalescing(inFlight), WithFailover(0))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// queuedOps is how many calls wait in c's queue, not yet sent.
func queuedOps(c *Client) int {
	c.co.mu.Lock()
	defer c.co.mu.Unlock()
	return len(c.co.queue)
}

// waitQueued waits until n calls are queued behind the batches in flight.
func waitQueued(t *testing.T, c *Client, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queuedOps(c) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queuedOps(c), n)
		}
		time.Sleep(time.Millisecond) // poll with a deadline
	}
}

// Calls from many goroutines share requests: while one batch is in
// flight every other call queues, and the next batch carries them all;
// each caller gets its own answer or error.
func TestCoalescingSharesRequests(t *testing.T) {
	const n = 64
	s := &batchServer{t: t, hold: make(chan struct{}), arrived: make(chan batchSeen, 256)}
	c := coalescing(t, s, 1)
	type got struct {
		l   *Lease
		err error
	}
	results := make([]got, n)
	var wg sync.WaitGroup
	wg.Go(func() { results[0].l, results[0].err = c.TryGrant(context.Background(), "t-0", "h-0", 30) })
	<-s.arrived // the first batch is in flight, held by the server
	for i := 1; i < n; i++ {
		holder := fmt.Sprintf("h-%d", i)
		switch i % 8 {
		case 3:
			holder = "held"
		case 5:
			holder = "bad"
		case 7:
			holder = "down"
		}
		wg.Go(func() {
			results[i].l, results[i].err = c.TryGrant(context.Background(), fmt.Sprintf("t-%d", i), holder, 30)
		})
	}
	waitQueued(t, c, n-1)
	s.open()
	wg.Wait()
	// The first call alone, the rest in one batch. The ops it answered 503
	// unknown_outcome are not sent again: one address, no failover budget
	// (TestFailoverBatch has two).
	b := s.seen()
	if len(b) != 2 || len(b[0].ops) != 1 || !b[0].single || len(b[1].ops) != n-1 || b[1].single {
		sizes := []int{}
		for _, x := range b {
			sizes = append(sizes, len(x.ops))
		}
		t.Fatalf("batches of %v ops, want [1 %d] (the first alone, the rest in one batch)", sizes, n-1)
	}
	for i, r := range results {
		name := fmt.Sprintf("t-%d", i)
		switch i % 8 {
		case 3:
			var e *Error
			if !errors.Is(r.err, ErrHeld) || !errors.As(r.err, &e) || e.Holder != "x" || e.Token != 99 || e.StatusCode != 409 {
				t.Errorf("%s: %v, want its own 409 held by x", name, r.err)
			}
		case 5:
			if !errors.Is(r.err, ErrBadRequest) || !strings.Contains(r.err.Error(), "lease_s") {
				t.Errorf("%s: %v, want its own 400", name, r.err)
			}
		case 7:
			var e *Error
			if !errors.Is(r.err, ErrUnavailable) || !errors.As(r.err, &e) || e.Reason != "unknown_outcome" || !errors.Is(r.err, ErrOutcomeUnknown) {
				t.Errorf("%s: %v, want its own 503, outcome unknown", name, r.err)
			}
		default:
			if r.err != nil || r.l.Name != name || r.l.Holder != fmt.Sprintf("h-%d", i) || r.l.LeaseS != 30 {
				t.Errorf("%s: %+v, %v: not its own grant", name, r.l, r.err)
			}
		}
	}
	// Renew and Release go the same way, with their tokens.
	l, err := c.Renew(context.Background(), "t-1", "h-1", 42, 20)
	if err != nil || l.Token != 42 || l.LeaseS != 20 {
		t.Fatalf("renew: %+v %v", l, err)
	}
	rel, err := c.Release(context.Background(), "t-1", "h-1", 42)
	if err != nil || !rel.Released || rel.Token != 42 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	last := s.seen()[3]
	if op := last.ops[0]; op.Op != "release" || *op.Token != 42 || op.LeaseS != nil || !last.single {
		t.Fatalf("a lone release was sent as %+v", last)
	}
}

// A batch that fails in flight (the server hangs up) fails each of its
// calls with a transport error: outcome unknown, retryable, as a single
// request's would be. (With one address and no failover budget there is
// nowhere else to send them: TestFailoverLostBatch has two.)
func TestCoalescingLostBatch(t *testing.T) {
	s := &batchServer{t: t, drop: true, hold: make(chan struct{}), arrived: make(chan batchSeen, 256)}
	c := coalescing(t, s, 1)
	errs := make([]error, 5)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = c.Grant(context.Background(), "a0", "h", 30) })
	<-s.arrived
	for i := 1; i < len(errs); i++ {
		wg.Go(func() { _, errs[i] = c.Grant(context.Background(), fmt.Sprintf("a%d", i), "h", 30) })
	}
	waitQueued(t, c, len(errs)-1)
	s.open()
	wg.Wait()
	for i, err := range errs {
		var e *Error
		if err == nil || errors.As(err, &e) || !retryable(err) || !errors.Is(err, ErrOutcomeUnknown) || (i > 0 && !strings.Contains(err.Error(), "/v1/batch")) {
			t.Errorf("call %d: %v, want a transport error (outcome unknown)", i, err)
		}
	}
}

// Ending one call's ctx ends only that call: sent, it returns at once
// (outcome unknown) while the others of its batch get their answers;
// queued, it is dropped and never sent.
func TestCoalescingCancelOneCall(t *testing.T) {
	s := &batchServer{t: t, hold: make(chan struct{}), arrived: make(chan batchSeen, 256)}
	c := coalescing(t, s, 1)
	call := func(ctx context.Context, name string) chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := c.Grant(ctx, name, "h", 30)
			ch <- err
		}()
		return ch
	}
	wait := func(what string, ch chan error) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return", what)
			return nil
		}
	}
	blocker := call(context.Background(), "blocker")
	<-s.arrived
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	a, b := call(ctxA, "a"), call(context.Background(), "b")
	waitQueued(t, c, 2)
	s.hold <- struct{}{} // answer the blocker's batch; a and b leave together
	if err := wait("blocker", blocker); err != nil {
		t.Fatal(err)
	}
	if got := <-s.arrived; len(got.ops) != 2 {
		t.Fatalf("second batch %+v, want a and b", got.ops)
	}
	cancelA()
	if err := wait("the cancelled call", a); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("cancelled in flight: %v, want context.Canceled, outcome unknown", err)
	}
	select {
	case err := <-b:
		t.Fatalf("cancelling a ended b too: %v", err)
	default:
	}
	ctxC, cancelC := context.WithCancel(context.Background())
	cq := call(ctxC, "c")
	waitQueued(t, c, 1)
	cancelC()
	if err := wait("the cancelled queued call", cq); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("cancelled while queued: %v, want context.Canceled, not sent", err)
	}
	if n := queuedOps(c); n != 0 {
		t.Fatalf("%d calls still queued after the cancel", n)
	}
	s.hold <- struct{}{}
	if err := wait("b", b); err != nil {
		t.Fatalf("b: %v", err)
	}
	for _, x := range s.seen() {
		for _, op := range x.ops {
			if op.Name == "c" {
				t.Fatal("the call cancelled while queued was sent")
			}
		}
	}
	if _, err := c.Grant(ctxC, "d", "h", 30); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call with an ended ctx: %v", err)
	}
}

// SPEC §4: a coalesced call's local deadline counts from a time no later
// than the batch's send (here: than the server's receipt of it).
func TestCoalescingDeadlineNotAfterSend(t *testing.T) {
	s := &batchServer{t: t}
	c := coalescing(t, s, 2)
	const n = 16
	leases := make([]*Lease, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if leases[i], err = c.Grant(context.Background(), fmt.Sprintf("d%d", i), "h", 30); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	at := map[string]time.Time{}
	for _, b := range s.seen() {
		for _, op := range b.ops {
			at[op.Name] = b.at
		}
	}
	for i, l := range leases {
		if l == nil {
			continue
		}
		recv := at[l.Name]
		if recv.IsZero() || l.SentAt.After(recv) {
			t.Errorf("call %d: sent at %v, after its batch reached the server at %v", i, l.SentAt, recv)
		}
		if l.Deadline != LocalDeadline(l.SentAt, 30000) {
			t.Errorf("call %d: deadline %v, want sent + 30 s less 500 ppm", i, l.Deadline.Sub(l.SentAt))
		}
	}
}

// A batch the server never answers is bounded by batchTimeout even when
// the HTTP client has no timeout (httptest's has none): its calls end
// with an unknown outcome instead of hanging, and the slot is freed.
func TestCoalescingBatchTimeout(t *testing.T) {
	old := batchTimeout
	batchTimeout = 300 * time.Millisecond
	t.Cleanup(func() { batchTimeout = old })
	s := &batchServer{t: t, hold: make(chan struct{}), arrived: make(chan batchSeen, 256)}
	c := coalescing(t, s, 1)
	// The first call goes alone on its own ctx and holds the only slot
	// until that ctx ends; the others queue behind it, then go as a batch.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = c.Grant(ctx, "a0", "h", 30) })
	<-s.arrived
	for i := 1; i < len(errs); i++ {
		wg.Go(func() { _, errs[i] = c.Grant(context.Background(), fmt.Sprintf("a%d", i), "h", 30) })
	}
	waitQueued(t, c, len(errs)-1)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.open()
		t.Fatal("calls in an unanswered batch still waiting after 20 s")
	}
	for i, err := range errs[1:] {
		if err == nil || !retryable(err) || !strings.Contains(err.Error(), "/v1/batch") {
			t.Errorf("call %d: %v, want a transport error of the batch (outcome unknown)", i+1, err)
		}
	}
	if got := len(s.seen()); got < 2 {
		t.Errorf("%d requests reached the server, want the lone call and the batch", got)
	}
}
