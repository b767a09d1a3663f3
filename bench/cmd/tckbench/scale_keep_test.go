package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRenewals answers POST /v1/batch renew ops as a node would: 200 for
// a known ticket with its token, 409 otherwise; when busy returns true,
// the op gets a 503 instead. It records each ticket's renewal times.
type fakeRenewals struct {
	mu     sync.Mutex
	tokens map[string]uint64
	at     map[string][]time.Time
	busy   func() bool
}

func (f *fakeRenewals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Ops []struct {
			Op, Name, Holder string
			Token            uint64
			LeaseS           int `json:"lease_s"`
		}
	}
	if r.URL.Path != "/v1/batch" || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var ans struct {
		Results []batchResult `json:"results"`
	}
	f.mu.Lock()
	for _, op := range req.Ops {
		st := http.StatusOK
		switch {
		case f.busy != nil && f.busy():
			st = http.StatusServiceUnavailable
		case op.Op != "renew" || f.tokens[op.Name] != op.Token || op.Holder != "filler" || op.LeaseS != 3:
			st = http.StatusConflict
		default:
			f.at[op.Name] = append(f.at[op.Name], time.Now())
		}
		ans.Results = append(ans.Results, batchResult{Status: st, Body: json.RawMessage(`{}`)})
	}
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(&ans)
}

// The keeper renews every granted ticket before two thirds of its lease
// have passed, again and again, skips the ones the fill did not grant,
// moves to the next node when a node cannot serve, and counts what it
// loses.
func TestKeeperRenewsBeforeLeasesEnd(t *testing.T) {
	const n = 40
	busy := &fakeRenewals{tokens: map[string]uint64{}, at: map[string][]time.Time{}, busy: func() bool { return true }}
	good := &fakeRenewals{tokens: map[string]uint64{}, at: map[string][]time.Time{}}
	k := newKeeper(n, 8, 3)
	start := time.Now()
	for i := range int64(n) {
		switch i {
		case 7:
			k.granted(i, 0, start) // the fill gave up on it
		case 9:
			good.tokens[fillName(i)] = 999 // the keeper holds another token: a 409, lost
			k.granted(i, 9, start)
		default:
			good.tokens[fillName(i)] = uint64(i + 1)
			k.granted(i, uint64(i+1), start)
		}
	}
	srvBusy, srvGood := httptest.NewServer(busy), httptest.NewServer(good)
	defer srvBusy.Close()
	defer srvGood.Close()
	addrs := []string{srvBusy.URL, srvGood.URL}
	var target atomic.Int64 // the busy node first
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Second)
	defer cancel()
	k.run(ctx, srvGood.Client(), addrs, func() int { return int(target.Load()) },
		func(from int) { target.CompareAndSwap(int64(from), int64((from+1)%len(addrs))) }, 2)
	end := time.Now()

	good.mu.Lock()
	defer good.mu.Unlock()
	for i := range int64(n) {
		at := good.at[fillName(i)]
		if i == 7 || i == 9 {
			if len(at) != 0 {
				t.Errorf("%s renewed %d times, want never", fillName(i), len(at))
			}
			continue
		}
		if len(at) < 2 {
			t.Fatalf("%s renewed %d times in %v, want ≥ 2 (a lease of 3 s)", fillName(i), len(at), end.Sub(start))
		}
		prev := start
		for _, a := range append(at, end) {
			if gap := a.Sub(prev); gap >= 3*time.Second {
				t.Errorf("%s: %v without a renewal, past its 3 s lease", fillName(i), gap)
			}
			prev = a
		}
	}
	if k.failed.Load() != 1 || k.renewed.Load() < 2*(n-2) {
		t.Errorf("failed %d (want 1: the wrong token), renewed %d", k.failed.Load(), k.renewed.Load())
	}
	if target.Load() != 1 {
		t.Errorf("the keeper stayed on node %d, want the one that serves", target.Load())
	}
}

// fakeNode is a node that grants every fill ticket and refuses every
// renewal (409), with /readyz and /v1/status as a leader's.
func fakeNode(t *testing.T) *httptest.Server {
	var next atomic.Uint64
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte(`{"status":"ok","stage":"ready"}`))
		case "/v1/status":
			_, _ = w.Write([]byte(`{"role":"leader"}`))
		case "/v1/batch":
			var req struct{ Ops []struct{ Op, Name string } }
			if json.NewDecoder(r.Body).Decode(&req) != nil {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			var ans struct {
				Results []batchResult `json:"results"`
			}
			for _, op := range req.Ops {
				if op.Op != "grant" {
					ans.Results = append(ans.Results, batchResult{Status: http.StatusConflict, Body: json.RawMessage(`{"error":"wrong_token"}`)})
					continue
				}
				b, _ := json.Marshal(map[string]any{"name": op.Name, "holder": "filler", "token": next.Add(1), "lease_s": 1})
				ans.Results = append(ans.Results, batchResult{Status: http.StatusOK, Body: b})
			}
			_ = json.NewEncoder(w).Encode(&ans)
		default:
			t.Errorf("fake node: unexpected %s %s", r.Method, r.URL.Path)
			http.NotFound(w, r)
		}
	}))
}

// A fill whose tickets the keeper cannot keep alive stops (at its next
// progress report) with the rates it needed and got, instead of grinding
// on with the keeper taking every op.
func TestScaleFillStopsWhenTheKeeperFallsBehind(t *testing.T) {
	srv := fakeNode(t)
	defer srv.Close()
	// More than the fill can send before its first report (10 s): 1 << 20
	// was all sent in 9 s on a quiet machine. 8M tickets: 192 MB of keeper
	// state.
	const n = 1 << 23
	k := newKeeper(n, 64, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.run(kctx, srv.Client(), []string{srv.URL}, func() int { return 0 }, func(int) {}, 2)
	}()
	var r scaleResult
	var out strings.Builder
	_, err := scaleFill(ctx, []string{srv.URL}, 0, n, 2, 64, 1, k, &r, &out, func(int) {})
	stop()
	<-done
	if err == nil || !strings.Contains(err.Error(), "the keeper lost") || !strings.Contains(err.Error(), "renewals/s") {
		t.Fatalf("fill ended with %v, want it stopped as the keeper lost tickets", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the fill ran until the test's deadline")
	}
}

// A fill longer than a lease: tickets granted one after another over
// two leases are each renewed again and again, none left a lease without
// a renewal — the ones granted first fall due again while the fill still
// grants (a keeper that renewed in ticket order renewed each once, then
// waited at the fill's front while the first ones' leases ran out).
func TestKeeperRenewsDuringAFillLongerThanALease(t *testing.T) {
	const n, lease = 30, 3
	srv := &fakeRenewals{tokens: map[string]uint64{}, at: map[string][]time.Time{}}
	for i := range int64(n) {
		srv.tokens[fillName(i)] = uint64(i + 1)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	k := newKeeper(n, 4, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	defer cancel()
	start := time.Now()
	granted := make([]time.Time, n)
	go func() { // the fill: a ticket every 200 ms, over two leases
		for i := range int64(n) {
			granted[i] = time.Now()
			k.granted(i, uint64(i+1), granted[i])
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}()
	k.run(ctx, hs.Client(), []string{hs.URL}, func() int { return 0 }, func(int) {}, 2)
	end := time.Now()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for i := range int64(n) {
		prev := granted[i]
		for _, a := range append(srv.at[fillName(i)], end) {
			if gap := a.Sub(prev); gap >= lease*time.Second {
				t.Errorf("%s (granted %v after the start): %v without a renewal, past its %d s lease", fillName(i), granted[i].Sub(start).Round(time.Millisecond), gap.Round(time.Millisecond), lease)
			}
			prev = a
		}
	}
	if k.failed.Load() != 0 {
		t.Errorf("lost %d", k.failed.Load())
	}
}
