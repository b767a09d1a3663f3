package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// Black-box clock tests (issue 5 item 6): real ticketd processes, built by
// the test, against agents that misbehave.

const bbSecret = "black-box-clock-agent-secret-0123456789abcdef"

// detectAllowance is added to probe interval + probe timeout when asserting
// how fast a process goes FAILED: process scheduling on a loaded 2-core
// host and the log pipe to this test (the FAILED instant is when the test
// reads the process's FAILED log line, not a poll).
const detectAllowance = 150 * time.Millisecond

func writeSecret(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "clock.secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// clockConfig writes a ticketd.yaml for one node against agent addr.
func clockConfig(t *testing.T, dataDir, addr, secretFile, extra string) string {
	t.Helper()
	body := fmt.Sprintf("cluster:\n  raft:\n    data_dir: %s\nclock:\n  agent_addr: %s\n  secret_file: %s\n%sapi:\n  addr: 127.0.0.1:0\n",
		dataDir, addr, secretFile, extra)
	p := filepath.Join(t.TempDir(), "ticketd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// healthyReply answers with the real clock: R = now, u = 3 ms, synced,
// source age 100 ms. After each exchange it offers a value on answered
// (if set) to a receiver waiting at that moment.
func healthyReply(a **clockhealthtest.Agent, answered chan struct{}) clockhealthtest.Handler {
	return func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{
			Bytes: (*a).Sign(req.Nonce, uint64(time.Now().UnixMilli()), 3, true, 100),
			After: func() {
				select {
				case answered <- struct{}{}:
				default:
				}
			},
		}
	}
}

// SPEC §3.4, §3.5: ticketd started against a dead agent port exits 1
// during clock_check, with the reason, and leaves no marker and no Raft
// data (it may be started again).
func TestBlackBoxDeadAgentAtStart(t *testing.T) {
	t.Parallel()
	a := clockhealthtest.StartAgent(t, []byte(bbSecret), func(protocol.Request) clockhealthtest.Reply { return clockhealthtest.Reply{} })
	addr := a.Addr()
	a.Close()
	dir := filepath.Join(t.TempDir(), "data")
	p, _ := startProc(t, "--config", clockConfig(t, dir, addr, writeSecret(t, bbSecret), "  probe_interval_ms: 200\n  probe_timeout_ms: 200\n"))
	code, err := p.exitCodeOf(30 * time.Second)
	if err != nil || code != 1 {
		t.Fatalf("exit %d (%v); want 1", code, err)
	}
	log := p.logText()
	if !strings.Contains(log, "clock_check failed") || !strings.Contains(log, "FAILED (connect)") {
		t.Fatalf("exit log lacks the clock_check failure and its reason:\n%s", log)
	}
	for _, f := range []string{"clock-failed", "retired", "raft.db"} {
		if fileExists(filepath.Join(dir, f)) {
			t.Errorf("%s left after a clock_check failure", f)
		}
	}
}

// startDevAgent runs the real `tckclk-agent --dev` on loopback and returns
// its TCKCLK/2 address.
func startDevAgent(t *testing.T, secretFile string) string {
	t.Helper()
	return startDevAgentArgv(t, []string{binary(t, "tckclk-agent")}, "127.0.0.1:0", secretFile)
}

// startDevAgentArgv is startDevAgent for the command prefix argv0 (the
// agent binary, perhaps behind `ip netns exec NS`) listening on listen.
func startDevAgentArgv(t *testing.T, argv0 []string, listen, secretFile string) string {
	t.Helper()
	addr, _ := startDevAgentHTTP(t, argv0, listen, secretFile)
	return addr
}

// startDevAgentHTTP is startDevAgentArgv returning the agent's HTTP
// address (/metrics, /v1/status) too.
func startDevAgentHTTP(t *testing.T, argv0 []string, listen, secretFile string) (string, string) {
	t.Helper()
	cmd, stderr := spawnArgv(t, nil, append(append([]string(nil), argv0...), "--dev", "--listen", listen, "--http", "127.0.0.1:0", "--secret-file", secretFile))
	done := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	addrCh := make(chan [2]string, 1)
	serving := regexp.MustCompile(`msg="agent serving".* listen=(\S+) http=(\S+)`)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				addrCh <- [2]string{m[1], m[2]}
			}
		}
		cmd.Wait()
	}()
	select {
	case addrs := <-addrCh:
		return addrs[0], addrs[1]
	case <-done:
		t.Fatal("tckclk-agent --dev exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("tckclk-agent --dev did not report its address")
	}
	return "", ""
}

// SPEC §2.2, §1.3, §3.5: against the real `tckclk-agent --dev`, a node with
// clock.dev_reference: true becomes ready, grants and labels the
// development reference; the same agent without dev_reference is refused
// during clock_check with reason mac (a dev agent never passes for a real
// one).
func TestBlackBoxDevAgent(t *testing.T) {
	t.Parallel()
	secretFile := writeSecret(t, bbSecret)
	addr := startDevAgent(t, secretFile)

	refusedDir := filepath.Join(t.TempDir(), "data")
	refused, _ := startProc(t, "--config", clockConfig(t, refusedDir, addr, secretFile, "  probe_interval_ms: 200\n  probe_timeout_ms: 200\n"))
	dev, ok := startProc(t, "--config", clockConfig(t, filepath.Join(t.TempDir(), "data"), addr, secretFile,
		"  dev_reference: true\n  probe_interval_ms: 200\n  probe_timeout_ms: 200\n"))
	if !ok {
		t.Fatalf("dev node exited: %v\n%s", <-dev.done, dev.logText())
	}
	if err := dev.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	h, err := dev.c.Ready(context.Background())
	if err != nil || !h.DevReference {
		t.Fatalf("/readyz %+v %v; want dev_reference", h, err)
	}
	if _, err := dev.c.Grant(context.Background(), "dev-lock", "dev holder", 10); err != nil {
		t.Fatalf("grant against the dev agent: %v", err)
	}
	st, err := dev.c.Status(context.Background())
	if err != nil || !st.Clock.DevReference || st.Clock.Source != "agent" || !st.Clock.Healthy || st.Clock.LastSample == nil {
		t.Fatalf("status clock %+v %v", st.Clock, err)
	}

	code, err := refused.exitCodeOf(30 * time.Second)
	if err != nil || code != 1 || !strings.Contains(refused.logText(), "FAILED (mac)") {
		t.Fatalf("node without dev_reference against the dev agent: exit %d (%v); want 1 with reason mac\n%s", code, err, refused.logText())
	}
	if fileExists(filepath.Join(refusedDir, "clock-failed")) {
		t.Error("a clock_check failure left a FAILED marker")
	}
}
