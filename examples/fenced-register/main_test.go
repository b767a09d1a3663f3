package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/api/client"
)

// startTicketd runs a single-node ticketd in this process.
func startTicketd(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Cluster.Raft.DataDir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.RunWith(ctx, cfg, node.Deps{Listener: ln}) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := "http://" + ln.Addr().String()
	c, _ := client.New(addr)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Ready(context.Background()); err == nil {
			return addr
		} else if time.Now().After(deadline) {
			t.Fatalf("ticketd not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a readiness probe with a deadline
	}
}

// The fencing example (issue 14 item 5): worker a checks that it holds the
// ticket, is then paused (SIGSTOP) past its lease; worker b gets the
// ticket with a higher token and writes; a resumes and writes with its old
// token: the store refuses it, and b's value stands.
func TestPausedHolderIsFenced(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fenced-register")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := startTicketd(t)
	store := httptest.NewServer(&Register{})
	defer store.Close()
	args := func(holder, value string, extra ...string) []string {
		return append([]string{"worker", "--ticketd", addr, "--store", store.URL, "--name", "register", "--holder", holder, "--lease", "2", "--value", value}, extra...)
	}

	a := exec.Command(bin, args("a", "from-a", "--step")...)
	stdin, _ := a.StdinPipe()
	stdout, _ := a.StdoutPipe()
	var aErr bytes.Buffer
	a.Stderr = &aErr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Process.Kill()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	var tokA uint64
	if _, serr := fmt.Sscanf(line, "checked token %d", &tokA); err != nil || serr != nil {
		t.Fatalf("worker a: %q %v (%s)", line, err, aErr.String())
	}
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	// b waits (Acquire) until a's lease has run out on the server, then writes.
	var bOut, bErr bytes.Buffer
	b := exec.Command(bin, args("b", "from-b")...)
	b.Stdout, b.Stderr = &bOut, &bErr
	if err := b.Run(); err != nil {
		t.Fatalf("worker b: %v\n%s%s", err, bOut.String(), bErr.String())
	}
	var tokB uint64
	if _, err := fmt.Sscanf(strings.TrimPrefix(bOut.String(), "checked token "), "%d", &tokB); err != nil || tokB <= tokA {
		t.Fatalf("worker b wrote %q; want a token above a's %d", bOut.String(), tokA)
	}

	// a wakes up believing it still holds the ticket and writes.
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	err = a.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(aErr.String(), "stale fencing token") {
		t.Fatalf("worker a's late write: %v, stderr %q; want exit 3 (refused as stale)", err, aErr.String())
	}
	resp, err := http.Get(store.URL + "/register")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("%d from-b\n", tokB); string(got) != want {
		t.Fatalf("the register holds %q, want %q", got, want)
	}
}
