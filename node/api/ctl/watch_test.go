package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// SPEC §4.2: `watch` prints the state and then each change (a renew, a
// release) with a growing modify index; `wait` returns once the ticket
// is free, and fails when --wait passes first.
func TestWaitAndWatch(t *testing.T) {
	addr, _ := startNode(t)
	env := map[string]string{"TICKETCTL_ADDR": addr}
	c, _ := client.New(addr)
	l, err := c.Grant(context.Background(), "lock", "alice", 30)
	if err != nil {
		t.Fatal(err)
	}
	if r := runCtl(t, env, "wait", "lock", "--wait", "100ms"); r.code != 1 || !strings.Contains(r.stderr, `waited 100ms (--wait) for ticket "lock": still held by alice with token`) {
		t.Fatalf("wait on a held ticket with --wait 100ms: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb bytes.Buffer
	e := testEnv(env, nil, &errb)
	e.Stdout = pw
	watchDone := make(chan int, 1)
	go func() { watchDone <- Main(ctx, []string{"watch", "lock", "--json"}, e); pw.Close() }()
	printed := make(chan WatchJSON, 16)
	go func() {
		defer close(printed)
		for dec := json.NewDecoder(pr); ; {
			var w WatchJSON
			if dec.Decode(&w) != nil {
				return
			}
			printed <- w
		}
	}()
	waitDone := make(chan result, 1)
	go func() { waitDone <- runCtl(t, env, "wait", "lock") }()

	var seen []WatchJSON
	read := func() WatchJSON {
		t.Helper()
		select {
		case w, ok := <-printed:
			if !ok {
				t.Fatalf("watch stopped printing: %s", errb.String())
			}
			seen = append(seen, w)
			return w
		case <-time.After(20 * time.Second):
			t.Fatal("watch printed nothing within 20 s")
		}
		return WatchJSON{}
	}
	if w := read(); !w.Held || w.Ticket.Holder != "alice" || w.ModifyIndex != l.Token {
		t.Fatalf("first watch line %+v, want alice at index %d", w, l.Token)
	}
	if _, err := c.Renew(context.Background(), "lock", "alice", l.Token, 30); err != nil {
		t.Fatal(err)
	}
	if w := read(); !w.Held || w.ModifyIndex <= seen[0].ModifyIndex {
		t.Fatalf("after a renew: %+v", w)
	}
	select {
	case r := <-waitDone:
		t.Fatalf("wait returned while the ticket is held: %+v", r)
	default:
	}
	if _, err := c.Release(context.Background(), "lock", "alice", l.Token); err != nil {
		t.Fatal(err)
	}
	if w := read(); w.Held || w.ModifyIndex <= seen[1].ModifyIndex {
		t.Fatalf("after the release: %+v", w)
	}
	select {
	case r := <-waitDone:
		if r.code != 0 || !strings.Contains(r.out, "lock free") {
			t.Fatalf("wait after the release: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("wait did not return after the release")
	}
	cancel()
	if code := <-watchDone; code != 0 {
		t.Fatalf("watch ended by its context: exit %d %s", code, errb.String())
	}
}
