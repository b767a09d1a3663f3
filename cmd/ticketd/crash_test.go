package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

type acked struct {
	holder    string
	token     uint64
	expiry    uint64 // 0: not read back before the crash
	releasing bool   // a release was sent (it may have applied unacknowledged)
	released  bool   // the release was acknowledged
}

// SPEC §4 (durability): kill -9 under concurrent load, restart — every
// acknowledged grant is there with its token, every expiry read before the
// crash is byte-identical, acknowledged releases stay released, and tokens
// keep increasing.
func TestKill9UnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real ticketd")
	}
	dir := filepath.Join(t.TempDir(), "data")
	p := startTicketd(t, dir)

	var mu sync.Mutex
	state := map[string]*acked{}
	var maxToken uint64
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	const workers = 16
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("w%02d-%05d", w, i)
				holder := fmt.Sprintf("holder-%d", w)
				g, err := p.c.Grant(ctx, name, holder, 250)
				if err != nil {
					return // the process is gone
				}
				mu.Lock()
				a := &acked{holder: holder, token: g.Token}
				state[name] = a
				maxToken = max(maxToken, g.Token)
				mu.Unlock()
				got, err := p.c.Get(ctx, name)
				if err != nil {
					return
				}
				mu.Lock()
				a.expiry = got.ServerExpiryUnixMs
				mu.Unlock()
				if i%3 == 2 {
					mu.Lock()
					a.releasing = true
					mu.Unlock()
					if _, err := p.c.Release(ctx, name, holder, g.Token); err != nil {
						return
					}
					mu.Lock()
					a.released = true
					mu.Unlock()
				}
			}
		}()
	}
	// Kill once a good number of grants are acknowledged, mid-load.
	waitUntil := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(state)
		mu.Unlock()
		if n >= 600 {
			break
		}
		if time.Now().After(waitUntil) {
			t.Fatalf("only %d grants acknowledged in 60s", n)
		}
		time.Sleep(5 * time.Millisecond) // progress poll with a deadline
	}
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	err := <-p.done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("ticketd did not die by signal: %v", err)
	}
	stop()
	wg.Wait()
	p.tr.CloseIdleConnections()

	p2 := startTicketd(t, dir)
	mu.Lock()
	defer mu.Unlock()
	var withExpiry, released int
	for name, a := range state {
		got, err := p2.c.Get(context.Background(), name)
		if a.released {
			released++
			if !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("%s: acknowledged release lost: %+v %v", name, got, err)
			}
			continue
		}
		if a.releasing && errors.Is(err, client.ErrNotFound) {
			continue // the unacknowledged release applied: allowed
		}
		if err != nil {
			t.Fatalf("%s: acknowledged grant lost: %v", name, err)
		}
		if got.Holder != a.holder || got.Token != a.token {
			t.Fatalf("%s: holder/token changed: %+v, acknowledged %+v", name, got, a)
		}
		if a.expiry != 0 {
			withExpiry++
			if got.ServerExpiryUnixMs != a.expiry {
				t.Fatalf("%s: expiry %d, was %d before the crash", name, got.ServerExpiryUnixMs, a.expiry)
			}
		}
	}
	g, err := p2.c.Grant(context.Background(), "after-crash", "h", 5)
	if err != nil || g.Token <= maxToken {
		t.Fatalf("token after restart %+v %v; highest acknowledged %d", g, err, maxToken)
	}
	t.Logf("kill -9 after %d acknowledged grants (%d expiries read back, %d released); all present after restart, new token %d > %d",
		len(state), withExpiry, released, g.Token, maxToken)
	if err := p2.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := <-p2.done; err != nil {
		t.Fatalf("clean shutdown exit: %v", err)
	}
}
