package main

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deploy/systemd/tckclk-agent.service is Type=notify: the agent sends
// READY=1 once it is synced (its /readyz answers 200 then), never for a
// bound port alone, and STOPPING=1 at SIGTERM.
func TestSystemdNotifyReadyMeansSynced(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "tckclk-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
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
	cmd := exec.Command(bin, "--dev", "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--http", fmt.Sprintf("127.0.0.1:%d", hport), "--secret-file", sec)
	cmd.Env = []string{"NOTIFY_SOCKET=" + sock}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-waited })

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
	cmd.Process.Signal(syscall.SIGTERM)
	for m = read(); !strings.HasPrefix(m, "STOPPING=1"); m = read() {
		if strings.Contains(m, "READY=1") {
			t.Fatalf("READY=1 twice: %q", m)
		}
	}
	select {
	case err := <-waited:
		waited <- err
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}
