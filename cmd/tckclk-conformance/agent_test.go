package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer collects a child's output from its copying goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startRealAgent builds cmd/tckclk-agent, runs it as a --dev reference on
// loopback and waits for /readyz; the process is killed at cleanup.
func startRealAgent(t *testing.T, secretFile string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tckclk-agent")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tckclk-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tckclk-agent: %v\n%s", err, out)
	}
	listen, ops := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "--dev", "--listen", listen, "--http", ops, "--secret-file", secretFile)
	cmd.Env = nil
	for _, kv := range os.Environ() { // the secret comes from the file only
		if !strings.HasPrefix(kv, "CLUSTER_CLOCK_AGENT_SECRET") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		t.Logf("tckclk-agent output:\n%s", logs.String())
	})

	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Second}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := client.Get("http://" + ops + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return listen
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("tckclk-agent exited before it was ready: %v", err)
		case <-deadline.C:
			t.Fatalf("tckclk-agent not ready within 30 s")
		case <-tick.C:
		}
	}
}

// SPEC §7: our own agent, as a --dev reference, passes every check; only
// the plausibility SHOULD may warn.
func TestRealAgentPassesEverything(t *testing.T) {
	secretFile := writeSecret(t, 0o600)
	addr := startRealAgent(t, secretFile)

	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--addr", addr, "--secret-file", secretFile, "--dev", "--format", "json"}, &out, &errb, env())
	var rep struct {
		Results []struct{ ID, Level, Result, Detail string }
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, %v\n%s\n%s", code, err, out.String(), errb.String())
	}
	if len(rep.Results) != 22 {
		t.Fatalf("%d results", len(rep.Results))
	}
	for _, r := range rep.Results {
		ok := r.Result == "PASS" || (r.Result == "WARN" && r.ID == "2.1-8")
		if !ok {
			t.Errorf("%s %s %s: %s", r.ID, r.Level, r.Result, r.Detail)
		}
	}
	if code != exitOK {
		t.Errorf("exit %d; stderr %s", code, errb.String())
	}

	// The same agent is a development reference: without --dev it fails the MAC.
	code = run(context.Background(), []string{"--addr", addr, "--secret-file", secretFile, "--only", "1.3-1"}, &out, &errb, env())
	if code != exitFail {
		t.Errorf("a --dev agent checked without --dev: exit %d, want 1", code)
	}

	var text bytes.Buffer
	code = run(context.Background(), []string{"--addr", addr, "--secret-file", secretFile, "--dev"}, &text, &errb, env())
	t.Logf("exit %d\n%s", code, text.String())
}
