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
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// versionServer is a ticketd of some version. The single endpoints answer
// each op by its holder ("held": 409 held, "gone": 404 not_found, anything
// else a grant or release). POST /v1/batch answers the same per op inside
// a 200 when batch is 0; otherwise the batch request itself gets status
// batch with the error body ticketd writes for it (404: the usual answer
// of a ticketd from before the route). While a gate is set, single
// requests wait for it; while batchGate is, batch requests do.
type versionServer struct {
	t       *testing.T
	batch   int
	arrived chan string // each single op's name as it arrives, "/v1/batch" for a batch

	mu        sync.Mutex
	gate      chan struct{}
	batchGate chan struct{}
	batches   int            // batch requests received
	got       map[string]int // how often each op (by name) reached the server
}

func newVersionServer(t *testing.T, batch int) (*versionServer, *Client, *atomic.Int64) {
	s := &versionServer{t: t, batch: batch, arrived: make(chan string, 4096), got: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { s.hold(false); s.holdBatches(false) })
	skew := new(atomic.Int64)
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	c, err := New(srv.URL, WithHTTPClient(srv.Client()), WithCoalescing(1), WithClock(now), WithFailover(0))
	if err != nil {
		t.Fatal(err)
	}
	return s, c, skew
}

// hold sets (true) or opens (false) the gate of single requests.
func (s *versionServer) hold(on bool) { s.setGate(&s.gate, on) }

// holdBatches is hold for batch requests.
func (s *versionServer) holdBatches(on bool) { s.setGate(&s.batchGate, on) }

func (s *versionServer) setGate(g *chan struct{}, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *g != nil {
		close(*g)
		*g = nil
	}
	if on {
		*g = make(chan struct{})
	}
}

func (s *versionServer) counts() (batches int, got map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got = map[string]int{}
	for k, v := range s.got {
		got[k] = v
	}
	return s.batches, got
}

func (s *versionServer) answer(op wire.BatchOp) (int, any) {
	switch op.Holder {
	case "held":
		return 409, wire.ErrorBody{Error: "held", Message: "held by x", Holder: "x", Token: 99}
	case "gone":
		return 404, wire.ErrorBody{Error: "not_found", Message: fmt.Sprintf("ticket %q is not held", op.Name)}
	}
	if op.Op == "release" {
		return 200, wire.Released{Name: op.Name, Holder: op.Holder, Token: *op.Token, Released: true}
	}
	return 200, wire.Grant{Name: op.Name, Holder: op.Holder, Token: 5, LeaseS: uint8(*op.LeaseS), RemainingMs: 30000}
}

func (s *versionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, body any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
	if r.URL.Path == "/v1/batch" {
		var req wire.BatchRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			s.t.Errorf("batch body: %v", err)
		}
		s.mu.Lock()
		s.batches++
		batch := s.batch
		if batch == 0 {
			for _, op := range req.Ops {
				s.got[op.Name]++
			}
		}
		gate := s.batchGate
		s.mu.Unlock()
		s.arrived <- r.URL.Path
		if gate != nil {
			<-gate
		}
		switch batch {
		case 0:
			var resp wire.BatchResponse
			for _, op := range req.Ops {
				status, body := s.answer(op)
				raw, _ := json.Marshal(body)
				resp.Results = append(resp.Results, wire.BatchResult{Status: status, Body: raw})
			}
			reply(200, resp)
		case 404:
			reply(404, wire.ErrorBody{Error: "not_found", Message: "no endpoint /v1/batch (see SPEC §4.1)"})
		case 405:
			w.Header().Set("Allow", "GET")
			reply(405, wire.ErrorBody{Error: "method_not_allowed", Message: "/v1/batch takes GET, not POST"})
		default:
			reply(batch, wire.ErrorBody{Error: "unavailable", Message: "m"})
		}
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/tickets/")
	name, action, _ := strings.Cut(rest, "/")
	var body struct {
		Holder string  `json:"holder"`
		Token  *uint64 `json:"token"`
		LeaseS *int64  `json:"lease_s"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); !ok || err != nil || r.Method != "POST" {
		s.t.Errorf("%s %s: not a write (%v)", r.Method, r.URL.Path, err)
	}
	s.mu.Lock()
	s.got[name]++
	gate := s.gate
	s.mu.Unlock()
	s.arrived <- name
	if gate != nil {
		<-gate
	}
	reply(s.answer(wire.BatchOp{Op: action, Name: name, Holder: body.Holder, Token: body.Token, LeaseS: body.LeaseS}))
}

// drain forgets the arrivals of requests already answered.
func (s *versionServer) drain() {
	for {
		select {
		case <-s.arrived:
		default:
			return
		}
	}
}

// batchOf makes the calls of holders (ticket prefix+i) share one batch:
// a first call goes alone and is held while the others queue behind it.
// It returns each call's error (the first's is checked here).
func batchOf(t *testing.T, s *versionServer, c *Client, prefix string, holders ...string) []error {
	t.Helper()
	waitIdle(t, c) // the last batch's sender has handed back its slot
	s.drain()
	s.hold(true)
	first := make(chan error, 1)
	go func() { _, err := c.Grant(context.Background(), prefix+"-first", "h", 30); first <- err }()
	if got := <-s.arrived; got != prefix+"-first" {
		t.Fatalf("%s arrived first, want the lone call", got)
	}
	errs := make([]error, len(holders))
	var wg sync.WaitGroup
	for i, h := range holders {
		wg.Go(func() { _, errs[i] = c.Grant(context.Background(), fmt.Sprintf("%s%d", prefix, i), h, 30) })
	}
	waitQueued(t, c, len(holders))
	s.hold(false)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("the lone call: %v", err)
	}
	return errs
}

// waitIdle waits until no sender of c's runs: a call made now is sent
// alone (its callers may return before the sender frees its slot).
func waitIdle(t *testing.T, c *Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.co.mu.Lock()
		n := c.co.inFlight
		c.co.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d senders still running", n)
		}
		time.Sleep(time.Millisecond) // poll with a deadline
	}
}

// onceEach checks that every op of prefix (the lone one and n others)
// reached the server exactly once.
func onceEach(t *testing.T, s *versionServer, prefix string, n int) {
	t.Helper()
	_, got := s.counts()
	for i := range n {
		if k := fmt.Sprintf("%s%d", prefix, i); got[k] != 1 {
			t.Errorf("%s reached the server %d times, want once", k, got[k])
		}
	}
	if got[prefix+"-first"] != 1 {
		t.Errorf("the lone call reached the server %d times", got[prefix+"-first"])
	}
}

// A server without POST /v1/batch (an older ticketd: 404 with its usual
// body, or 405) refuses the batch request itself, so nothing of it was
// applied: each of its calls is sent alone, exactly once, and gets its
// own answer; for noBatchRetry every call then goes alone at once,
// unqueued; after that the next batch asks again.
func TestCoalescingFallsBackWithoutBatch(t *testing.T) {
	for _, status := range []int{404, 405} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			s, c, skew := newVersionServer(t, status)
			holders := []string{"h", "held", "h", "gone", "h"}
			errs := batchOf(t, s, c, "a", holders...)
			if b, _ := s.counts(); b != 1 {
				t.Fatalf("%d batch requests, want 1", b)
			}
			onceEach(t, s, "a", len(holders))
			for i, err := range errs {
				switch holders[i] {
				case "held":
					if !errors.Is(err, ErrHeld) {
						t.Errorf("call %d: %v, want its own 409 held", i, err)
					}
				case "gone":
					if !errors.Is(err, ErrNotFound) {
						t.Errorf("call %d: %v, want its own 404 not_found", i, err)
					}
				default:
					if err != nil {
						t.Errorf("call %d: %v", i, err)
					}
				}
			}

			// Within noBatchRetry: while one call is held by the server,
			// the others reach it too (they do not queue behind it).
			s.drain()
			s.hold(true)
			const n = 6
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if _, err := c.Grant(context.Background(), fmt.Sprintf("b%d", i), "h", 30); err != nil {
						t.Errorf("b%d: %v", i, err)
					}
				})
			}
			timeout := time.After(10 * time.Second)
			for i := range n {
				select {
				case <-s.arrived:
				case <-timeout:
					s.hold(false)
					wg.Wait()
					t.Fatalf("only %d of %d concurrent calls reached the server while one was held: they queue for a batch", i, n)
				}
			}
			s.hold(false)
			wg.Wait()
			if b, _ := s.counts(); b != 1 {
				t.Fatalf("%d batch requests within noBatchRetry, want still 1", b)
			}

			// After noBatchRetry the next batch asks again.
			skew.Add(int64(noBatchRetry + time.Second))
			errs = batchOf(t, s, c, "c", "h", "h", "h")
			if b, _ := s.counts(); b != 2 {
				t.Fatalf("%d batch requests after noBatchRetry, want 2", b)
			}
			onceEach(t, s, "c", 3)
			for i, err := range errs {
				if err != nil {
					t.Errorf("c%d: %v", i, err)
				}
			}
		})
	}
}

// An op's 404 inside a batch's results is that op's answer, never sent
// again. A 503 on the batch request itself (the address cannot serve it)
// sends the ops alone to the other addresses (TestFailoverBatch); with
// one address and no failover budget it is each call's error, and no op
// is sent twice. Neither stops the next batch.
func TestCoalescingNeverResendsAnAnsweredBatch(t *testing.T) {
	s, c, _ := newVersionServer(t, 0)
	errs := batchOf(t, s, c, "a", "h", "gone", "h")
	onceEach(t, s, "a", 3)
	if !errors.Is(errs[1], ErrNotFound) || errs[0] != nil || errs[2] != nil {
		t.Fatalf("errors %v, want the second call's own 404 only", errs)
	}
	s.mu.Lock()
	s.batch = 503
	s.mu.Unlock()
	errs = batchOf(t, s, c, "b", "h", "h")
	for i, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != 503 {
			t.Errorf("call %d: %v, want the batch's 503", i, err)
		}
	}
	_, got := s.counts()
	if got["b0"] != 0 || got["b1"] != 0 {
		t.Fatalf("the ops of a batch answered 503 were sent again alone: %v", got)
	}
	if b, _ := s.counts(); b != 2 {
		t.Fatalf("%d batch requests, want 2", b)
	}
}

// Calls that queue while the refused batch is in flight are not sent as
// another batch: they go alone as soon as the refusal is in.
func TestCoalescingFallbackDrainsTheQueue(t *testing.T) {
	s, c, _ := newVersionServer(t, 404)
	s.holdBatches(true)
	s.hold(true)
	call := func(name string, wg *sync.WaitGroup) {
		wg.Go(func() {
			if _, err := c.Grant(context.Background(), name, "h", 30); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	var wg sync.WaitGroup
	call("a-first", &wg)
	if got := <-s.arrived; got != "a-first" {
		t.Fatalf("%s arrived first, want the lone call", got)
	}
	for i := range 3 {
		call(fmt.Sprintf("a%d", i), &wg)
	}
	waitQueued(t, c, 3)
	s.hold(false)
	if got := <-s.arrived; got != "/v1/batch" {
		t.Fatalf("%s arrived, want the batch", got)
	}
	for i := range 2 {
		call(fmt.Sprintf("b%d", i), &wg)
	}
	waitQueued(t, c, 2) // behind the batch in flight
	s.holdBatches(false)
	wg.Wait()
	onceEach(t, s, "a", 3)
	_, got := s.counts()
	if b, _ := s.counts(); b != 1 || got["b0"] != 1 || got["b1"] != 1 {
		t.Fatalf("%d batch requests, ops seen %v; want 1 batch, and b0, b1 sent alone once", b, got)
	}
}
