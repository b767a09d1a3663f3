package main

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SPEC §3.5 / §2.3 (readiness is /readyz, never a bound port), for the
// Type=notify unit deploy/systemd/tckclk-agent.service: the agent sends
// READY=1 once it is synced (its /readyz answers 200 then), never for a
// bound port alone, and STOPPING=1 at SIGTERM.
func TestSystemdNotifyReadyMeansSynced(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	sock := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no sd_notify message: %v", err)
		}
		return string(buf[:n])
	}
	sec := writeFile(t, "s", secretBytes, 0o600)
	hport := freePort(t)
	a := startDevAgent(t, []string{"NOTIFY_SOCKET=" + sock}, freePort(t), hport, sec)

	m := read()
	for strings.HasPrefix(m, "STATUS=") {
		m = read()
	}
	if !strings.HasPrefix(m, "READY=1\nSTATUS=synced from ") {
		t.Fatalf("first non-status message %q, want READY=1 with the source", m)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", hport))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("READY=1 sent while /readyz is %d", resp.StatusCode)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	for m = read(); !strings.HasPrefix(m, "STOPPING=1"); m = read() {
		if strings.Contains(m, "READY=1") {
			t.Fatalf("READY=1 twice: %q", m)
		}
	}
	a.waitExit0()
}
