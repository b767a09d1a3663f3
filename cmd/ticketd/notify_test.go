package main

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notifySocket listens like systemd's notify socket and returns its path
// and a channel of the datagrams received.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return path, msgs
}

// next waits for the next datagram.
func next(t *testing.T, msgs <-chan string, timeout time.Duration) string {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("notify socket closed")
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no sd_notify message within %v", timeout)
		return ""
	}
}

// SPEC §3.5 (a TCP connect is never readiness), for the Type=notify unit
// deploy/systemd/ticketd.service: ticketd sends READY=1
// once, when /readyz first answers 200 — never for a bound port alone —
// STATUS= with the stage while starting, and STOPPING=1 at SIGTERM.
func TestSystemdNotifyReadyMeansReadyz(t *testing.T) {
	path, msgs := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", path)
	p, ok := startProc(t, "--data-dir", t.TempDir(), "--http", "127.0.0.1:0")
	if !ok {
		t.Fatalf("ticketd exited: %v\n%s", <-p.done, p.logText())
	}
	var statuses []string
	for {
		m := next(t, msgs, 30*time.Second)
		if strings.Contains(m, "STOPPING=1") {
			t.Fatalf("stopping before ready: %q", m)
		}
		if strings.HasPrefix(m, "READY=1") {
			if m != "READY=1\nSTATUS=ready" {
				t.Fatalf("READY message %q", m)
			}
			break
		}
		statuses = append(statuses, m)
	}
	// READY=1 was sent after /readyz said ok: it says so now.
	resp, err := http.Get("http://" + p.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("READY=1 sent but /readyz is %d", resp.StatusCode)
	}
	for _, s := range statuses {
		if !strings.HasPrefix(s, "STATUS=") {
			t.Fatalf("before ready: %q, want STATUS= only", s)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		m := next(t, msgs, 30*time.Second)
		if strings.Contains(m, "READY=1") {
			t.Fatalf("READY=1 sent twice: %q", m)
		}
		if m == "STOPPING=1\nSTATUS=stopping" {
			break
		}
	}
	if code, err := p.exitCodeOf(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
}

// A node that never becomes ready (its agent cannot be reached at
// clock_check: exit 1) never tells systemd it is ready.
func TestSystemdNotifyNeverReadyWithoutClock(t *testing.T) {
	path, msgs := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", path)
	secret := writeSecret(t, "0123456789abcdef0123456789abcdef")
	p, ok := startProc(t, "--data-dir", t.TempDir(), "--http", "127.0.0.1:0",
		"--clock.agent_addr", "127.0.0.1:1", "--clock.secret_file", secret)
	if ok {
		if code, _ := p.exitCodeOf(60 * time.Second); code != 1 {
			t.Fatalf("exit %d, want 1 (clock_check failed)\n%s", code, p.logText())
		}
	}
	// Every message up to STOPPING=1 (sent before exit, so already queued).
	for {
		m := next(t, msgs, 10*time.Second)
		if strings.Contains(m, "READY=1") {
			t.Fatalf("READY=1 from a node that never was ready: %q", m)
		}
		if strings.Contains(m, "STOPPING=1") {
			return
		}
	}
}
