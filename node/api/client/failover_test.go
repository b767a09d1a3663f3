package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// reset is a scripted node's answer that hangs up after reading the whole
// request: the client sent it, and its answer is lost.
const reset = -1

// hit is one request a scripted node received.
type hit struct {
	at     time.Time
	method string
	path   string // with the query
	body   string
}

// scripted is a ticketd stand-in at one address: answer decides each
// request's status and JSON body (status reset: hang up).
type scripted struct {
	url    string
	answer func(h hit, n int) (int, string)

	mu   sync.Mutex
	hits []hit
}

func newScripted(t *testing.T, answer func(h hit, n int) (int, string)) *scripted {
	s := &scripted{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := hit{at: time.Now(), method: r.Method, path: r.URL.RequestURI(), body: string(b)}
		s.mu.Lock()
		s.hits = append(s.hits, h)
		n := len(s.hits)
		s.mu.Unlock()
		status, body := s.answer(h, n)
		if status == reset {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *scripted) got() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hit(nil), s.hits...)
}

// downAddr is an address nothing listens on (connection refused).
func downAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	return addr
}

func multi(t *testing.T, opts []Option, addrs ...string) *Client {
	t.Helper()
	c, err := New(strings.Join(addrs, ","), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Answers a scripted node gives.
const (
	grantOK    = `{"name":"a","holder":"h","token":7,"lease_s":30,"conservative_valid_before_unix_ms":1,"remaining_ms":30000}`
	releasedOK = `{"name":"a","holder":"h","token":7,"released":true}`
	notLeader  = `{"error":"not_leader","message":"this node is not the leader of the current term","stage":"raft"}`
	noLeader   = `{"error":"unavailable","message":"the node is not ready (stage raft: no_leader)","stage":"raft","reason":"no_leader"}`
	clockFail  = `{"error":"unavailable","message":"clock health FAILED (rtt)","stage":"failed","reason":"rtt"}`
	unknownOut = `{"error":"unavailable","message":"forwarded to the leader, no answer","reason":"unknown_outcome"}`
	notHeld    = `{"error":"not_held","message":"ticket \"a\" is not held"}`
)

func always(status int, body string) func(hit, int) (int, string) {
	return func(hit, int) (int, string) { return status, body }
}

// SPEC §4.1: a client with several addresses moves on after a connection
// error (nothing was sent) and after a 503 not_leader or a readiness stage
// (the node refused before doing anything), and prefers the address that
// answered from then on.
func TestFailoverMovesOn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(t *testing.T) (string, *scripted)
	}{
		{"connection refused", func(t *testing.T) (string, *scripted) { return downAddr(t), nil }},
		{"503 not_leader", func(t *testing.T) (string, *scripted) {
			s := newScripted(t, always(503, notLeader))
			return s.url, s
		}},
		{"503 no_leader", func(t *testing.T) (string, *scripted) {
			s := newScripted(t, always(503, noLeader))
			return s.url, s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, as := tc.first(t)
			b := newScripted(t, func(h hit, _ int) (int, string) {
				if strings.HasSuffix(h.path, "/release") {
					return 200, releasedOK
				}
				return 200, grantOK
			})
			c := multi(t, []Option{WithFailover(0)}, a, b.url)
			l, err := c.Grant(context.Background(), "a", "h", 30)
			if err != nil || l.Token != 7 {
				t.Fatalf("grant: %+v, %v", l, err)
			}
			if as != nil && len(as.got()) != 1 {
				t.Fatalf("the first address got %d requests, want 1", len(as.got()))
			}
			// The address that answered is preferred: the next ops go there
			// first (the first address is not asked again).
			if _, err := c.Release(context.Background(), "a", "h", 7); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Renew(context.Background(), "a", "h", 7, 30); err != nil {
				t.Fatal(err)
			}
			if as != nil && len(as.got()) != 1 {
				t.Fatalf("the first address got %d requests after it failed once, want 1", len(as.got()))
			}
			if got := len(b.got()); got != 3 {
				t.Fatalf("the second address got %d requests, want 3", got)
			}
		})
	}
}

// SPEC §4.1, §4: a request sent and then reset may have been applied. A
// Grant is sent again to the next address (a repeat by the same holder
// returns the current grant, never extends it) and its local deadline
// counts from the first send, before the first address even received it.
func TestFailoverResetGrantRepeats(t *testing.T) {
	a := newScripted(t, always(reset, ""))
	b := newScripted(t, always(200, grantOK))
	c := multi(t, []Option{WithFailover(0)}, a.url, b.url)
	l, err := c.Grant(context.Background(), "a", "h", 30)
	if err != nil || l.Token != 7 {
		t.Fatalf("grant: %+v, %v", l, err)
	}
	ah, bh := a.got(), b.got()
	if len(ah) != 1 || len(bh) != 1 || ah[0].body != bh[0].body {
		t.Fatalf("requests %+v then %+v; want the same grant at each address once", ah, bh)
	}
	if !l.SentAt.Before(ah[0].at) {
		t.Fatalf("the deadline counts from %v, after the first send reached the first address at %v", l.SentAt, ah[0].at)
	}
	if want := LocalDeadline(l.SentAt, 30000); !l.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want first send + 30 s − 500 ppm", l.Deadline.Sub(l.SentAt))
	}
}

// SPEC §4.1: a Release whose first send was reset is sent again; a repeat
// that finds the ticket free (the first send released it) is the success
// the caller asked for. Without a lost answer the same 409 is the
// caller's error; held under another token after a lost answer, it is
// that 409 with the outcome unknown.
func TestFailoverResetReleaseRepeats(t *testing.T) {
	a := newScripted(t, always(reset, ""))
	b := newScripted(t, always(409, notHeld))
	c := multi(t, []Option{WithFailover(0)}, a.url, b.url)
	r, err := c.Release(context.Background(), "a", "h", 7)
	if err != nil || !r.Released || r.Token != 7 || r.Name != "a" {
		t.Fatalf("release after a lost answer, repeat 409 not_held: %+v, %v; want released", r, err)
	}
	if len(b.got()) != 1 {
		t.Fatalf("the repeat reached the second address %d times", len(b.got()))
	}
	// Now the second address is preferred, and answers 409 to a release
	// that lost nothing: that is the caller's error.
	if _, err := c.Release(context.Background(), "a", "h", 7); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a plain 409: %v, want ErrNotHeld", err)
	}
	// A repeat that finds the ticket held under another token cannot tell
	// whether the lost send freed it: the 409, outcome unknown.
	w := newScripted(t, always(409, `{"error":"wrong_token","message":"held under another token"}`))
	c = multi(t, []Option{WithFailover(0)}, a.url, w.url)
	if r, err := c.Release(context.Background(), "a", "h", 7); r != nil || !errors.Is(err, ErrWrongToken) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("release after a lost answer, repeat 409 wrong_token: %+v, %v; want wrong_token, outcome unknown", r, err)
	}
}

// SPEC §4.1, §4: a Grant or Renew whose first send was reset and whose
// repeat is refused (409) may still have been applied by the lost send —
// granted, then revoked before the repeat arrived (the repeat is then a
// 409 revoked), or renewed — so the 409 comes with the outcome unknown;
// without a lost answer the same 409 is a plain refusal. (The safety
// long run's reset fault caught a grant recorded as refused that had
// been applied.)
func TestFailoverResetLeaseRepeatRefused(t *testing.T) {
	a := newScripted(t, always(reset, ""))
	revoked := newScripted(t, always(409, `{"error":"revoked","message":"ticket \"a\" was revoked"}`))
	c := multi(t, []Option{WithFailover(0)}, a.url, revoked.url)
	if l, err := c.Grant(context.Background(), "a", "h", 30); l != nil || !errors.Is(err, ErrRevoked) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("grant after a lost answer, repeat 409 revoked: %+v, %v; want revoked, outcome unknown", l, err)
	}
	c = multi(t, []Option{WithFailover(0)}, a.url, revoked.url)
	if l, err := c.Renew(context.Background(), "a", "h", 7, 30); l != nil || !errors.Is(err, ErrRevoked) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("renew after a lost answer, repeat 409 revoked: %+v, %v; want revoked, outcome unknown", l, err)
	}
	// The second address is preferred now: its 409 to a send that lost
	// nothing is the caller's answer.
	if _, err := c.Grant(context.Background(), "a", "h", 30); !errors.Is(err, ErrRevoked) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a plain 409: %v, want ErrRevoked only", err)
	}
}

// SPEC §4.1: an op that is not safe to repeat (an admin write) is never
// sent again after a lost answer: the caller is told the outcome is
// unknown. A not_leader is a refusal, so it moves on (the leader is found).
func TestFailoverAdminNotRepeated(t *testing.T) {
	replaced := `{"old":"n1","new":"n4","new_suffrage":"nonvoter"}`
	a := newScripted(t, always(reset, ""))
	b := newScripted(t, always(200, replaced))
	c := multi(t, []Option{WithFailover(0), WithAdminToken("x")}, a.url, b.url)
	if _, err := c.Replace(context.Background(), "n1", "n4"); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("replace after a reset: %v, want ErrOutcomeUnknown", err)
	}
	if len(b.got()) != 0 {
		t.Fatal("an admin write was sent again after a lost answer")
	}
	f := newScripted(t, always(503, `{"error":"not_leader","message":"members can only be replaced by the leader","stage":"raft"}`))
	c = multi(t, []Option{WithFailover(0), WithAdminToken("x")}, f.url, b.url)
	if r, err := c.Replace(context.Background(), "n1", "n4"); err != nil || r.New != "n4" {
		t.Fatalf("replace via a follower: %+v, %v; want the leader found", r, err)
	}
}

// SPEC §4.1: when the answer is lost at every address, the caller gets
// the truth — the outcome is unknown — with the addresses tried.
func TestFailoverUnknownEverywhere(t *testing.T) {
	a := newScripted(t, always(reset, ""))
	b := newScripted(t, always(503, unknownOut))
	c := multi(t, []Option{WithFailover(0)}, a.url, b.url)
	_, err := c.Grant(context.Background(), "a", "h", 30)
	var e *Error
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &e) || e.Reason != "unknown_outcome" ||
		!strings.Contains(err.Error(), a.url) || !strings.Contains(err.Error(), b.url) {
		t.Fatalf("grant lost everywhere: %v; want ErrOutcomeUnknown naming both addresses", err)
	}
	if !retryable(err) {
		t.Fatal("an unknown outcome is not retryable for Acquire and Session")
	}
}

// While the leader restarts every node answers 503 no_leader: the client
// goes round the addresses again with a short back-off, within ctx and
// the failover budget, instead of surfacing the 503 at once.
func TestFailoverRoundsUntilALeader(t *testing.T) {
	var mu sync.Mutex
	elected := false
	node := func(h hit, _ int) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if !elected {
			return 503, noLeader
		}
		return 200, grantOK
	}
	a, b := newScripted(t, node), newScripted(t, node)
	c := multi(t, nil, a.url, b.url)
	done := make(chan error, 1)
	go func() {
		_, err := c.Grant(context.Background(), "a", "h", 30)
		done <- err
	}()
	waitUntil(t, "three rounds over both addresses", func() bool { return len(a.got()) >= 3 && len(b.got()) >= 3 })
	select {
	case err := <-done:
		t.Fatalf("the grant returned while no node had a leader: %v", err)
	default:
	}
	mu.Lock()
	elected = true
	mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("grant once a leader is elected: %v", err)
	}
}

// A round in which every address will not serve soon (FAILED) ends the
// op at once, naming each address; the failover budget and ctx bound the
// rounds otherwise.
func TestFailoverGivesUp(t *testing.T) {
	a, b := newScripted(t, always(503, clockFail)), newScripted(t, always(503, clockFail))
	c := multi(t, nil, a.url, b.url)
	_, err := c.Grant(context.Background(), "a", "h", 30)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) || len(a.got()) != 1 || len(b.got()) != 1 ||
		!strings.Contains(err.Error(), a.url+": 503 unavailable stage failed (rtt)") {
		t.Fatalf("every node FAILED: %v after %d and %d requests; want one round", err, len(a.got()), len(b.got()))
	}

	x, y := newScripted(t, always(503, noLeader)), newScripted(t, always(503, noLeader))
	c = multi(t, []Option{WithFailover(300 * time.Millisecond)}, x.url, y.url)
	start := time.Now()
	_, err = c.Grant(context.Background(), "a", "h", 30)
	if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took < 300*time.Millisecond || len(x.got()) < 2 {
		t.Fatalf("no leader for longer than the budget: %v after %v, %d rounds", err, took, len(x.got()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c = multi(t, nil, x.url, y.url) // the default budget, longer than ctx
	if _, err = c.Grant(ctx, "a", "h", 30); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no leader until ctx ends: %v; want ctx's error with the last answer", err)
	}
}

// A blocking grant ended by a leader change goes on at the next address
// for what is left of its wait, never longer.
func TestFailoverGrantWaitShrinks(t *testing.T) {
	a := newScripted(t, func(hit, int) (int, string) {
		time.Sleep(300 * time.Millisecond) // it waited, then lost its leadership
		return 503, notLeader
	})
	b := newScripted(t, always(200, grantOK))
	c := multi(t, []Option{WithFailover(0)}, a.url, b.url)
	if _, err := c.GrantWait(context.Background(), "a", "h", 30, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var first, second wire.GrantRequest
	if err := json.Unmarshal([]byte(a.got()[0].body), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b.got()[0].body), &second); err != nil {
		t.Fatal(err)
	}
	if first.WaitMs != 10000 || second.WaitMs > 10000-300 || second.WaitMs < 5000 {
		t.Fatalf("wait_ms %d then %d; want 10000, then what is left of it", first.WaitMs, second.WaitMs)
	}
}

// Watches move on too.
func TestFailoverWatch(t *testing.T) {
	a := newScripted(t, always(503, noLeader))
	b := newScripted(t, always(200, `{"name":"a","holder":"h","token":7,"lease_s":30,"modify_index":9}`))
	c := multi(t, []Option{WithFailover(0)}, a.url, b.url)
	w, err := c.Watch(context.Background(), "a", 3, time.Second)
	if err != nil || w.Ticket == nil || w.Index != 9 {
		t.Fatalf("watch: %+v, %v", w, err)
	}
	if h := b.got(); len(h) != 1 || !strings.Contains(h[0].path, "index=3") {
		t.Fatalf("the second address got %+v", h)
	}
}

// Coalesced calls follow the cluster too: a batch the preferred address
// cannot serve (503 not_leader, a reset) or answers an op of it so sends
// those calls alone to the next address; every op a batch carries is
// safe to repeat (SPEC §4.1).
func TestFailoverBatch(t *testing.T) {
	batchOK := func(h hit, _ int) (int, string) {
		if h.path != "/v1/batch" {
			return 200, grantOK
		}
		var req wire.BatchRequest
		_ = json.Unmarshal([]byte(h.body), &req)
		var resp wire.BatchResponse
		for _, op := range req.Ops {
			raw, _ := json.Marshal(wire.Grant{Name: op.Name, Holder: op.Holder, Token: 7, LeaseS: 30, RemainingMs: 30000})
			resp.Results = append(resp.Results, wire.BatchResult{Status: 200, Body: raw})
		}
		raw, _ := json.Marshal(resp)
		return 200, string(raw)
	}
	perOp503 := func(h hit, _ int) (int, string) {
		var req wire.BatchRequest
		_ = json.Unmarshal([]byte(h.body), &req)
		var resp wire.BatchResponse
		for range req.Ops {
			resp.Results = append(resp.Results, wire.BatchResult{Status: 503, Body: json.RawMessage(noLeader)})
		}
		raw, _ := json.Marshal(resp)
		return 200, string(raw)
	}
	for _, tc := range []struct {
		name  string
		first func(hit, int) (int, string)
	}{
		{"batch 503 not_leader", always(503, notLeader)},
		{"batch reset", always(reset, "")},
		{"per-op 503 no_leader", perOp503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The first call goes alone (nothing to share a request with)
			// to a, which serves single requests and blocks it there so
			// that the others queue into one batch; a then cannot serve
			// the batch, and b serves everything.
			gate := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			t.Cleanup(open)
			a := newScripted(t, func(h hit, n int) (int, string) {
				if h.path != "/v1/batch" {
					<-gate
					return 200, grantOK
				}
				return tc.first(h, n)
			})
			b := newScripted(t, batchOK)
			c := multi(t, []Option{WithFailover(0), WithCoalescing(1)}, a.url, b.url)
			lone := make(chan error, 1)
			go func() { _, err := c.Grant(context.Background(), "lone", "h", 30); lone <- err }()
			waitUntil(t, "the lone call at a", func() bool { return len(a.got()) == 1 })
			const n = 5
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { _, errs[i] = c.Grant(context.Background(), fmt.Sprintf("q%d", i), "h", 30) })
			}
			waitQueued(t, c, n)
			open()
			wg.Wait()
			if err := <-lone; err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			}
			if got := a.got(); len(got) != 2 || got[1].path != "/v1/batch" {
				t.Fatalf("a got %+v, want the lone call and the one batch", got)
			}
			alone := 0
			for _, h := range b.got() {
				if strings.Contains(h.path, "/v1/tickets/q") {
					alone++
				}
			}
			if alone != n {
				t.Fatalf("%d calls sent alone to b, want %d", alone, n)
			}
		})
	}
}

// The address list: commas, spaces, http by default; empty entries and
// duplicates are refused.
func TestParseAddrs(t *testing.T) {
	got, err := ParseAddrs(" a:1, http://b:2 ,https://c:3/")
	if err != nil || strings.Join(got, ",") != "http://a:1,http://b:2,https://c:3" {
		t.Fatalf("%q, %v", got, err)
	}
	for _, bad := range []string{"a:1,", ",a:1", "a:1,,b:2", "a:1,http://a:1", "a:1,ftp://b:2"} {
		if _, err := ParseAddrs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // poll with a deadline
	}
}
