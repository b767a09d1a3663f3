package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeNode is a scripted ticketd: grant answers come from grants (the
// last one repeats), renew answers from renew(n) for the n-th renew.
type fakeNode struct {
	mu       sync.Mutex
	grants   []int // statuses: 200 grants, others answer that error
	renew    func(n int) int
	renews   atomic.Int64
	released atomic.Int64
	waits    []int64 // wait_ms of each grant
}

func (f *fakeNode) start(t *testing.T) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			WaitMs int64 `json:"wait_ms"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		ok := `{"name":"a","holder":"h","token":7,"lease_s":1,"conservative_valid_before_unix_ms":1,"remaining_ms":1000}`
		status := http.StatusOK
		switch {
		case strings.HasSuffix(r.URL.Path, "/grant"):
			f.mu.Lock()
			f.waits = append(f.waits, body.WaitMs)
			status = f.grants[0]
			if len(f.grants) > 1 {
				f.grants = f.grants[1:]
			}
			f.mu.Unlock()
		case strings.HasSuffix(r.URL.Path, "/renew"):
			status = f.renew(int(f.renews.Add(1)))
		case strings.HasSuffix(r.URL.Path, "/release"):
			f.released.Add(1)
			ok = `{"name":"a","holder":"h","token":7,"released":true}`
		}
		w.WriteHeader(status)
		switch status {
		case http.StatusOK:
			fmt.Fprint(w, ok)
		case http.StatusConflict:
			fmt.Fprint(w, `{"error":"held","message":"held","holder":"x","token":3}`)
		case http.StatusTooManyRequests:
			fmt.Fprint(w, `{"error":"too_many_waiters","message":"cap"}`)
		default:
			fmt.Fprintf(w, `{"error":"unavailable","message":"status %d","stage":"raft"}`, status)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// SPEC §4.2: Acquire waits on the server, and retries 503s (leader
// changes), 429s and held-after-the-wait until it is granted.
func TestAcquireRetries(t *testing.T) {
	f := &fakeNode{grants: []int{503, 429, 409, 200}}
	c := f.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "a", "h", 1)
	if err != nil || l.Token != 7 {
		t.Fatalf("acquire: %+v %v", l, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waits) != 4 {
		t.Fatalf("%d grant requests, want 4", len(f.waits))
	}
	for i, w := range f.waits {
		if w <= 0 || w > 300_000 {
			t.Errorf("grant %d asked wait_ms %d, want a blocking grant within 1..=300000", i, w)
		}
	}
}

// Acquire returns refusals it cannot cure (here a 400) and ends with ctx.
func TestAcquireStops(t *testing.T) {
	f := &fakeNode{grants: []int{400, 200}}
	var e *Error
	if _, err := f.start(t).Acquire(context.Background(), "a", "h", 1); !errors.As(err, &e) || e.StatusCode != 400 || len(f.waits) != 1 {
		t.Fatalf("a 400: %v after %d grants; want it returned, not retried", err, len(f.waits))
	}
	f = &fakeNode{grants: []int{503}}
	c := f.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(ctx, "a", "h", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire against a node that never serves: %v, want the ctx's deadline", err)
	}
}

// When ctx ends first, Acquire's error says what it waited for, how long,
// and the last answer: who holds the ticket (errors.Is still finds the
// deadline), or why the node could not serve.
func TestAcquireTimeoutSaysWhoHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := (&fakeNode{grants: []int{409}}).start(t).Acquire(ctx, "a", "h", 1)
	switch {
	case err == nil:
		t.Fatal("acquired a held ticket")
	case errors.Is(err, ErrHeld): // the last try came with no time left to wait
		var e *Error
		if !errors.As(err, &e) || e.Holder != "x" || !strings.Contains(err.Error(), `waited`) {
			t.Fatalf("%v: does not say how long it waited, or who holds it", err)
		}
	case !errors.Is(err, context.DeadlineExceeded) || !regexp.MustCompile(`waited [0-9.]+m?s for ticket "a", still held by "x" \(token 3\)`).MatchString(err.Error()):
		t.Fatalf("%v: want how long it waited for \"a\" and its holder", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = (&fakeNode{grants: []int{503}}).start(t).Acquire(ctx, "a", "h", 1)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `for ticket "a"`) || !strings.Contains(err.Error(), "status 503") {
		t.Fatalf("%v: want what it waited for and the last refusal", err)
	}
}

// SPEC §4.2: a Session renews at a third of the lease and moves its
// deadline with every successful renew; Close stops renewing and releases.
func TestSessionRenews(t *testing.T) {
	f := &fakeNode{grants: []int{200}, renew: func(int) int { return 200 }}
	c := f.start(t)
	s, err := c.NewSession(context.Background(), "a", "h", 1)
	if err != nil {
		t.Fatal(err)
	}
	first := s.Deadline()
	deadline := time.Now().Add(20 * time.Second)
	for f.renews.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 renews in 20 s with a 1 s lease")
		}
		select {
		case <-s.Done():
			t.Fatalf("session ended while renews succeed: %v", s.Err())
		case <-time.After(10 * time.Millisecond): // poll interval
		}
	}
	if !s.Deadline().After(first) || s.Token() != 7 {
		t.Fatalf("deadline %v after renews, first %v", s.Deadline(), first)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.released.Load() != 1 || !errors.Is(s.Err(), ErrSessionClosed) {
		t.Fatalf("close: %d releases, err %v", f.released.Load(), s.Err())
	}
	n := f.renews.Load()
	select {
	case <-s.Done():
	default:
		t.Fatal("Done open after Close")
	}
	if err := s.Close(context.Background()); err != nil || f.renews.Load() != n {
		t.Fatalf("second close: %v; renews after close: %d → %d", err, n, f.renews.Load())
	}
}

// lostSession starts a 1 s session on f and waits (20 s at most) for its
// Done.
func lostSession(t *testing.T, f *fakeNode) *Session {
	t.Helper()
	s, err := f.start(t).NewSession(context.Background(), "a", "h", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("session not lost 20 s after a 1 s lease")
	}
	return s
}

// SPEC §4.2: when renews fail, Done closes once the local deadline has
// passed, not before.
func TestSessionLostAtDeadline(t *testing.T) {
	f := &fakeNode{grants: []int{200}, renew: func(int) int { return 503 }}
	s := lostSession(t, f)
	if now := time.Now(); now.Before(s.Deadline()) {
		t.Fatalf("Done closed %v before the deadline", s.Deadline().Sub(now))
	}
	if !errors.Is(s.Err(), ErrSessionLost) || f.renews.Load() < 2 {
		t.Fatalf("err %v after %d renews (a failed renew is retried)", s.Err(), f.renews.Load())
	}
}

// A renew the server refuses (409: the ticket is not ours any more) ends
// the session at once, before the deadline.
func TestSessionLostOnRefusal(t *testing.T) {
	f := &fakeNode{grants: []int{200}, renew: func(int) int { return 409 }}
	s := lostSession(t, f)
	if !errors.Is(s.Err(), ErrSessionLost) || f.renews.Load() != 1 {
		t.Fatalf("err %v after %d renews", s.Err(), f.renews.Load())
	}
}
