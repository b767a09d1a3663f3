package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

type waitResult struct {
	who string
	l   *client.Lease
	err error
}

// startWaiter runs one blocking grant and waits until the node counts it
// (ticket_waiters reaches want), so the waiters queue in a known order.
func startWaiter(t *testing.T, ctx context.Context, tn *testNode, name, holder string, wait time.Duration, want int, out chan<- waitResult) {
	t.Helper()
	go func() {
		l, err := tn.c.GrantWait(ctx, name, holder, 30, wait)
		out <- waitResult{holder, l, err}
	}()
	waitFor(t, fmt.Sprintf("%d waiters", want), 10*time.Second, func() bool {
		return metricLine(t, tn, "ticket_waiters") == fmt.Sprint(want)
	})
}

func nextResult(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no waiter answered within 20 s")
	}
	return waitResult{}
}

// SPEC §4.2: waiters on one ticket are served first come, first served,
// each as soon as the ticket is released.
func TestGrantWaitFIFO(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Guard: &switchGuard{}})
	first, err := tn.c.Grant(bg, "lock", "h0", 30)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan waitResult, 3)
	for i, h := range []string{"w1", "w2", "w3"} {
		startWaiter(t, bg, tn, "lock", h, 60*time.Second, i+1, ch)
	}
	holder, token := "h0", first.Token
	for _, want := range []string{"w1", "w2", "w3"} {
		if _, err := tn.c.Release(bg, "lock", holder, token); err != nil {
			t.Fatalf("release by %s: %v", holder, err)
		}
		r := nextResult(t, ch)
		if r.err != nil || r.who != want {
			t.Fatalf("after %s released: %s answered (%v), want %s granted first", holder, r.who, r.err, want)
		}
		if r.l.Token <= token || r.l.Holder != want {
			t.Fatalf("%s got %+v after token %d", want, r.l.Grant, token)
		}
		got, err := tn.c.Get(bg, "lock")
		if err != nil || got.Holder != want {
			t.Fatalf("get after %s's grant: %+v %v", want, got, err)
		}
		holder, token = want, r.l.Token
	}
	if v := metricLine(t, tn, "ticket_waiters"); v != "0" {
		t.Fatalf("ticket_waiters %s after all were served", v)
	}
}

// SPEC §4.2: a waiter gets the ticket once it expires (the expiry loop's
// Expire wakes it), not before; waiting never extends the old lease.
func TestGrantWaitWakesOnExpiry(t *testing.T) {
	clk := newManualClock()
	g := &switchGuard{}
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Wall: clk, Guard: g})
	old, err := tn.c.Grant(bg, "lock", "h0", 1)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan waitResult, 1)
	startWaiter(t, bg, tn, "lock", "w1", 60*time.Second, 1, ch)
	cur, _ := tn.c.Get(bg, "lock")
	// A millisecond short of the server-side expiry: rounds pass, no grant.
	clk.Advance(time.Duration(cur.ServerExpiryUnixMs-uint64(clk.Now().UnixMilli())-1) * time.Millisecond)
	calls := g.calls.Load()
	waitFor(t, "five expiry-loop rounds", 5*time.Second, func() bool { return g.calls.Load() >= calls+5 })
	select {
	case r := <-ch:
		t.Fatalf("granted before the expiry: %+v %v", r.l, r.err)
	default:
	}
	clk.Advance(time.Millisecond)
	r := nextResult(t, ch)
	if r.err != nil || r.l.Holder != "w1" || r.l.Token <= old.Token {
		t.Fatalf("after the expiry: %+v %v", r.l, r.err)
	}
	// SPEC §4.2: the answer says how long it waited on the leader, so the
	// local deadline counts from when the grant can have been made at the
	// earliest, not from the send time of the wait (a wait longer than the
	// lease would leave no time at all).
	if r.l.WaitedMs == 0 {
		t.Fatalf("a grant after five expiry rounds of waiting says waited_ms 0: %+v", r.l.Grant)
	}
}

// SPEC §4.2: when wait_ms passes the answer is the usual 409 held, and the
// waiter is gone from the count.
func TestGrantWaitTimesOut(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Guard: &switchGuard{}})
	if _, err := tn.c.Grant(bg, "lock", "h0", 30); err != nil {
		t.Fatal(err)
	}
	_, err := tn.c.GrantWait(bg, "lock", "w1", 30, 150*time.Millisecond)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != 409 || ce.Holder != "h0" {
		t.Fatalf("wait that ran out: %v", err)
	}
	if v := metricLine(t, tn, "ticket_waiters"); v != "0" {
		t.Fatalf("ticket_waiters %s after the wait ran out", v)
	}
	// A free ticket is granted at once, wait or not.
	l, err := tn.c.GrantWait(bg, "free", "w1", 30, time.Minute)
	if err != nil || l.Holder != "w1" {
		t.Fatalf("wait on a free ticket: %+v %v", l, err)
	}
}

// SPEC §4.2: the waiters per node are capped; one more is a 429 and
// changes nothing.
func TestGrantWaitCap(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.API.MaxWaiters, cfg.API.MaxWaitersPerCaller = 2, 2 // one caller: the node's cap, not the caller's share
	tn := startNode(t, cfg, Deps{Guard: &switchGuard{}})
	for _, name := range []string{"lock", "other"} {
		if _, err := tn.c.Grant(bg, name, "h0", 30); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	ch := make(chan waitResult, 2)
	startWaiter(t, ctx, tn, "lock", "w1", time.Minute, 1, ch)
	startWaiter(t, ctx, tn, "other", "w2", time.Minute, 2, ch) // the cap is per node, not per ticket
	_, err := tn.c.GrantWait(bg, "lock", "w3", 30, time.Minute)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != 429 || !errors.Is(err, client.ErrTooManyWaiters) ||
		ce.Reason != "node_cap" || !strings.Contains(ce.Message, "api.max_waiters") {
		t.Fatalf("third waiter over a cap of 2: %v (reason %q)", err, ce.Reason)
	}
	cancel()
	for range 2 {
		if r := nextResult(t, ch); r.err == nil {
			t.Fatalf("a cancelled waiter was granted: %+v", r.l)
		}
	}
	waitFor(t, "the cancelled waiters to be dropped", 10*time.Second, func() bool {
		return metricLine(t, tn, "ticket_waiters") == "0"
	})
	if l, err := tn.c.GrantWait(bg, "free", "w4", 30, time.Minute); err != nil || l.Holder != "w4" {
		t.Fatalf("after the cap freed: %+v %v", l, err)
	}
}

// SPEC §4.2: a waiter whose caller went away is dropped at once and never
// granted the ticket: the next waiter in line gets it.
func TestGrantWaitCancelledNeverHolds(t *testing.T) {
	g := &switchGuard{}
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Guard: g})
	first, err := tn.c.Grant(bg, "lock", "h0", 30)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	gone := make(chan waitResult, 1)
	startWaiter(t, ctx, tn, "lock", "gone", time.Minute, 1, gone)
	cancel()
	if r := nextResult(t, gone); r.err == nil {
		t.Fatalf("cancelled waiter answered %+v", r.l)
	}
	waitFor(t, "the cancelled waiter to be dropped", 10*time.Second, func() bool {
		return metricLine(t, tn, "ticket_waiters") == "0"
	})
	next := make(chan waitResult, 1)
	startWaiter(t, bg, tn, "lock", "next", time.Minute, 1, next)
	if _, err := tn.c.Release(bg, "lock", "h0", first.Token); err != nil {
		t.Fatal(err)
	}
	r := nextResult(t, next)
	if r.err != nil || r.l.Holder != "next" {
		t.Fatalf("the waiter behind the cancelled one: %+v %v", r.l, r.err)
	}
	if _, err := tn.c.Release(bg, "lock", "next", r.l.Token); err != nil {
		t.Fatal(err)
	}
	calls := g.calls.Load()
	waitFor(t, "five expiry-loop rounds", 5*time.Second, func() bool { return g.calls.Load() >= calls+5 })
	if got, err := tn.c.Get(bg, "lock"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the ticket after the last release: %+v %v (the cancelled waiter must not hold it)", got, err)
	}
}

// SPEC §4.2: a stopping leader ends its waits with a 503 the client retries.
func TestGrantWaitEndsWith503OnStop(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Guard: &switchGuard{}})
	if _, err := tn.c.Grant(bg, "lock", "h0", 30); err != nil {
		t.Fatal(err)
	}
	ch := make(chan waitResult, 1)
	startWaiter(t, bg, tn, "lock", "w1", time.Minute, 1, ch)
	go tn.stop()
	r := nextResult(t, ch)
	var ce *client.Error
	if !errors.As(r.err, &ce) || ce.StatusCode != 503 {
		t.Fatalf("a wait on a stopping leader: %+v %v", r.l, r.err)
	}
}

// SPEC §4.2 "Bad input": wait_ms out of range is a 400 naming the field,
// and changes nothing.
func TestGrantWaitBadInput(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Guard: &switchGuard{}})
	for _, v := range []string{"-1", "300001", "1.5", `"10"`, "null", "1e3", "99999999999999999999"} {
		a := do(t, tn, "POST", "/v1/tickets/x/grant", `{"holder":"h","lease_s":30,"wait_ms":`+v+`}`)
		if a.status != 400 || !strings.Contains(a.body.Message, "wait_ms") {
			t.Errorf("wait_ms %s: %d %s", v, a.status, a.raw)
		}
	}
	if _, err := tn.c.Get(bg, "x"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused grant changed the state: %v", err)
	}
	if a := do(t, tn, "POST", "/v1/tickets/x/grant", `{"holder":"h","lease_s":30,"wait_ms":300000}`); a.status != 200 {
		t.Fatalf("wait_ms 300000 on a free ticket: %d %s", a.status, a.raw)
	}
}

// SPEC §4.2: a watch answers at once for index 0, blocks while the modify
// index is not above the one given, and answers on the next change
// (renew, release) with the state and its new index.
func TestWatch(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{Guard: &switchGuard{}})
	g, err := tn.c.Grant(bg, "lock", "h0", 30)
	if err != nil {
		t.Fatal(err)
	}
	w0, err := tn.c.Watch(bg, "lock", 0, time.Minute)
	if err != nil || w0.Ticket == nil || w0.Ticket.Holder != "h0" || w0.Index != g.Token {
		t.Fatalf("watch at index 0: %+v %v", w0, err)
	}
	// Nothing changes: the wait runs out with the same index.
	w1, err := tn.c.Watch(bg, "lock", w0.Index, 100*time.Millisecond)
	if err != nil || w1.Index != w0.Index || w1.Ticket == nil {
		t.Fatalf("watch without a change: %+v %v", w1, err)
	}
	type res struct {
		w   *client.Watched
		err error
	}
	ch := make(chan res, 1)
	go func() {
		w, err := tn.c.Watch(bg, "lock", w0.Index, time.Minute)
		ch <- res{w, err}
	}()
	waitFor(t, "one watcher", 10*time.Second, func() bool { return metricLine(t, tn, "ticket_watchers") == "1" })
	if _, err := tn.c.Renew(bg, "lock", "h0", g.Token, 30); err != nil {
		t.Fatal(err)
	}
	var r res
	select {
	case r = <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not answer the renew")
	}
	if r.err != nil || r.w.Index <= w0.Index || r.w.Ticket == nil || r.w.Ticket.Token != g.Token {
		t.Fatalf("watch after a renew: %+v %v", r.w, r.err)
	}
	go func() {
		w, err := tn.c.Watch(bg, "lock", r.w.Index, time.Minute)
		ch <- res{w, err}
	}()
	waitFor(t, "one watcher", 10*time.Second, func() bool { return metricLine(t, tn, "ticket_watchers") == "1" })
	if _, err := tn.c.Release(bg, "lock", "h0", g.Token); err != nil {
		t.Fatal(err)
	}
	r2 := <-ch
	if r2.err != nil || r2.w.Ticket != nil || r2.w.Index <= r.w.Index {
		t.Fatalf("watch after the release: %+v %v", r2.w, r2.err)
	}
}

// SPEC §4.2: watchers per node are capped (429), and bad wait/index values
// are 400s naming the parameter.
func TestWatchCapAndBadInput(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.API.MaxWatchers, cfg.API.MaxWatchersPerCaller = 1, 1
	tn := startNode(t, cfg, Deps{Guard: &switchGuard{}})
	for _, q := range []struct{ query, names string }{
		{"wait=-1s", "wait"}, {"wait=6m", "wait"}, {"wait=abc", "wait"}, {"wait=10s&wait=1s", "wait"},
		{"index=abc", "index"}, {"index=-1", "index"}, {"index=1.5", "index"}, {"other=1", "other"},
	} {
		a := do(t, tn, "GET", "/v1/tickets/x?"+q.query, "")
		if a.status != 400 || !strings.Contains(a.body.Message, q.names) {
			t.Errorf("?%s: %d %s", q.query, a.status, a.raw)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := tn.c.Watch(ctx, "x", 0, 0) // answers at once, holds nothing
		if err == nil {
			_, err = tn.c.Watch(ctx, "x", 1<<40, time.Minute)
		}
		done <- err
	}()
	waitFor(t, "one watcher", 10*time.Second, func() bool { return metricLine(t, tn, "ticket_watchers") == "1" })
	_, err := tn.c.Watch(bg, "y", 1<<40, time.Minute)
	if !errors.Is(err, client.ErrTooManyWatchers) {
		t.Fatalf("second watcher over a cap of 1: %v", err)
	}
	cancel()
	<-done
	waitFor(t, "the watcher to be dropped", 10*time.Second, func() bool { return metricLine(t, tn, "ticket_watchers") == "0" })
}
