package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/client"
	"pgregory.net/rapid"
)

// SPEC §4.2: whatever the other nodes hold, a node below its guarantee
// (⌊max / 2N⌋) always gets a slot; the cap is never passed; a refusal
// names the share that is full.
func TestWaitSharesGuarantee(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		maxN := rapid.IntRange(1, 64).Draw(rt, "max")
		nodes := rapid.IntRange(1, 6).Draw(rt, "nodes")
		s := newSlots(api.CodeTooManyWaiters, "blocking grants", "api.max_waiters", maxN, maxN)
		g := s.guarantee(nodes)
		var held []share
		for i := range rapid.IntRange(1, 300).Draw(rt, "steps") {
			if len(held) > 0 && rapid.Bool().Draw(rt, fmt.Sprint("give", i)) {
				j := rapid.IntRange(0, len(held)-1).Draw(rt, fmt.Sprint("which", i))
				s.give(held[j])
				held = append(held[:j], held[j+1:]...)
				continue
			}
			sh := share{node: fmt.Sprintf("n%d", rapid.IntRange(0, nodes-1).Draw(rt, fmt.Sprint("node", i)))}
			below := s.byNode[sh.node] < g
			err := s.take(sh, "n0", nodes)
			if err == nil {
				held = append(held, sh)
			} else {
				var ae *api.Error
				if !errors.As(err, &ae) || ae.Kind != api.KindTooMany || (ae.Reason != "node_share" && ae.Reason != "node_cap") {
					rt.Fatalf("refusal %v", err)
				}
				if below {
					rt.Fatalf("%s holds %d, below its guarantee %d, and was refused: %v", sh.node, s.byNode[sh.node], g, err)
				}
			}
			if s.n > maxN || s.n != len(held) {
				rt.Fatalf("%d held, %d counted, cap %d", len(held), s.n, maxN)
			}
		}
	})
}

// sourceClient is a client whose connections come from the loopback
// address src (a caller of its own).
func sourceClient(t *testing.T, url, src string) *client.Client {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(url, client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// SPEC §4.2: one caller holds at most api.max_waiters_per_caller blocking
// grants (and max_watchers_per_caller watches) on a node; one more is a
// 429 naming the caller's share, and another caller is still served.
func TestWaitCallerShare(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.API.MaxWaiters, cfg.API.MaxWaitersPerCaller = 8, 2
	cfg.API.MaxWatchers, cfg.API.MaxWatchersPerCaller = 8, 1
	tn := startNode(t, cfg, Deps{Guard: &switchGuard{}})
	if _, err := tn.c.Grant(bg, "lock", "h0", 30); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ch := make(chan waitResult, 8)
	one, two := sourceClient(t, tn.url, "127.0.0.2"), sourceClient(t, tn.url, "127.0.0.3")
	for i := 1; i <= 2; i++ {
		go func() {
			l, err := one.GrantWait(ctx, "lock", fmt.Sprint("w", i), 30, time.Minute)
			ch <- waitResult{"one", l, err}
		}()
		waitFor(t, fmt.Sprintf("%d waiters", i), 10*time.Second, func() bool { return metricLine(t, tn, "ticket_waiters") == fmt.Sprint(i) })
	}
	_, err := one.GrantWait(bg, "lock", "w3", 30, time.Minute)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != 429 || !errors.Is(err, client.ErrTooManyWaiters) || ce.Reason != "caller_share" ||
		!strings.Contains(ce.Message, "caller 127.0.0.2") || !strings.Contains(ce.Message, "api.max_waiters_per_caller") {
		t.Fatalf("a third blocking grant of one caller with a share of 2: %v", err)
	}
	go func() {
		l, err := two.GrantWait(ctx, "lock", "w4", 30, time.Minute)
		ch <- waitResult{"two", l, err}
	}()
	waitFor(t, "another caller's waiter", 10*time.Second, func() bool { return metricLine(t, tn, "ticket_waiters") == "3" })

	// Watches: one each.
	go func() {
		_, err := one.Watch(ctx, "lock", 1<<40, time.Minute)
		ch <- waitResult{"watch", nil, err}
	}()
	waitFor(t, "one watcher", 10*time.Second, func() bool { return metricLine(t, tn, "ticket_watchers") == "1" })
	_, err = one.Watch(bg, "lock", 1<<40, time.Minute)
	if !errors.As(err, &ce) || ce.StatusCode != 429 || !errors.Is(err, client.ErrTooManyWatchers) || ce.Reason != "caller_share" {
		t.Fatalf("a second watch of one caller with a share of 1: %v", err)
	}
	go func() {
		_, err := two.Watch(ctx, "lock", 1<<40, time.Minute)
		ch <- waitResult{"watch", nil, err}
	}()
	waitFor(t, "another caller's watcher", 10*time.Second, func() bool { return metricLine(t, tn, "ticket_watchers") == "2" })
	cancel()
	for range 5 {
		nextResult(t, ch)
	}
}

// SECURITY.md ("What a client token holder can do to other clients"): a
// 409 shows any client the holder and the token, and with them another
// client holding the same token releases the ticket. If access control
// ever separates clients, this test and that section change together.
func TestClientTokenTrustsEveryTicket(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir+"/data")
	tok := strings.Repeat("c", 40)
	cfg.API.TokenFile = writeFile(t, dir, "client.token", tok, 0o600)
	tn := startNode(t, cfg, Deps{}, client.WithToken(tok))
	mine, err := tn.c.Grant(bg, "job", "alice", 30)
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.New(tn.url, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Grant(bg, "job", "mallory", 30)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != 409 || ce.Holder != "alice" || ce.Token != mine.Token {
		t.Fatalf("a 409 to another client: %v (holder %q, token %d)", err, ce.Holder, ce.Token)
	}
	if _, err := other.Release(bg, "job", ce.Holder, ce.Token); err != nil {
		t.Fatalf("another client with the token, the holder and the token from a 409 could not release: %v", err)
	}
	if _, err := tn.c.Get(bg, "job"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the ticket is still held after another client released it: %v", err)
	}
}
