package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// buildTicketd compiles this command into a temp dir.
func buildTicketd(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "ticketd")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan error
	tr   *http.Transport
	c    *client.Client
}

// startTicketd runs the binary on dataDir with the API on a free loopback
// port and waits for /readyz.
func startTicketd(t *testing.T, bin, dataDir string) *proc {
	t.Helper()
	cmd := exec.Command(bin, "--data-dir", dataDir, "--http", "127.0.0.1:0", "--log.format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1), tr: &http.Transport{MaxIdleConnsPerHost: 64}}
	addrCh := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "API listening" {
				addrCh <- rec.Addr
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-logDone
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
		p.tr.CloseIdleConnections()
	})
	select {
	case p.addr = <-addrCh:
	case err := <-p.done:
		t.Fatalf("ticketd exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("ticketd did not report its address")
	}
	p.c, _ = client.New(p.addr, client.WithHTTPClient(&http.Client{Transport: p.tr, Timeout: 10 * time.Second}))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := p.c.Ready(context.Background()); err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatal("ticketd not ready after 30s")
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a readiness probe with a deadline
	}
}

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
	bin := buildTicketd(t)
	dir := filepath.Join(t.TempDir(), "data")
	p := startTicketd(t, bin, dir)

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

	p2 := startTicketd(t, bin, dir)
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
