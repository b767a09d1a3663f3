package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

var secretBytes = []byte("cmd-test-secret-0123456789abcdefghijklmnop")

func writeFile(t *testing.T, name string, b []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func runCmd(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a run that gets this far returns at once
	code := run(ctx, args, &out, &errb, envOf(env))
	return code, out.String(), errb.String()
}

// SPEC §8 / issue item 1: bad usage and config exit 2 and name the flag or key.
func TestExitTwoNamesTheProblem(t *testing.T) {
	sec := writeFile(t, "s", secretBytes, 0o600)
	loose := writeFile(t, "loose", secretBytes, 0o644)
	short := writeFile(t, "short", []byte("short"), 0o600)
	badYAML := writeFile(t, "a.yaml", []byte("listen: 127.0.0.1:1\nsources:\n  ntp:\n    servers: [a]\n    min_truechimer: 1\n"), 0o644)
	range0 := writeFile(t, "b.yaml", []byte("read_timeout_ms: 60000\nsources: {kernel: {enabled: true}}\n"), 0o644)
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"unknown flag", nil, []string{"--nope"}, []string{"-nope"}},
		{"stray argument", nil, []string{"--kernel", "x"}, []string{`"x"`}},
		{"no source", nil, []string{"--secret-file", sec}, []string{"sources", "--ntp"}},
		{"bad ntp flag", nil, []string{"--ntp", "h:99999", "--secret-file", sec}, []string{"--ntp", "sources.ntp.servers[0]", "invalid port"}},
		{"bad chrony flag", nil, []string{"--chrony", "tcp://x:1", "--secret-file", sec}, []string{"--chrony", "sources.chrony.address"}},
		{"relative ptp4l", nil, []string{"--ptp4l", "ptp4l", "--secret-file", sec}, []string{"--ptp4l", "sources.ptp.uds"}},
		{"dev off loopback", nil, []string{"--dev", "--listen", "0.0.0.0:7970", "--secret-file", sec}, []string{"--listen", "loopback"}},
		{"bad listen", nil, []string{"--kernel", "--listen", "nope", "--secret-file", sec}, []string{"--listen", "HOST:PORT"}},
		{"unknown yaml key", nil, []string{"--config", badYAML}, []string{"sources.ntp.min_truechimer", "unknown key"}},
		{"out of range yaml", nil, []string{"--config", range0, "--secret-file", sec}, []string{"read_timeout_ms", "10 s"}},
		{"missing config", nil, []string{"--config", "/nonexistent.yaml"}, []string{"--config"}},
		{"no secret", nil, []string{"--kernel"}, []string{"secret_file", "no clock secret"}},
		{"loose secret mode", nil, []string{"--kernel", "--secret-file", loose}, []string{"--secret-file", "0644", "0600"}},
		{"short secret", nil, []string{"--kernel", "--secret-file", short}, []string{"--secret-file", "at least 32"}},
		{"ambiguous secret", map[string]string{"CLUSTER_CLOCK_AGENT_SECRET": string(secretBytes)}, []string{"--kernel", "--secret-file", sec}, []string{"ambiguous"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCmd(t, c.env, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, errs)
			}
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q does not contain %q", errs, w)
				}
			}
			if strings.Contains(out+errs, string(secretBytes)) {
				t.Fatal("the secret was printed")
			}
		})
	}
}

// SPEC §6: flags override the file only when set; --print-config shows the
// effective config and never the secret.
func TestPrintConfigOverridesAndRedacts(t *testing.T) {
	sec := writeFile(t, "s", secretBytes, 0o600)
	yml := writeFile(t, "agent.yaml", []byte("listen: 127.0.0.1:7000\nhttp: 127.0.0.1:7001\nmax_drift_ppm: 80\nsources:\n  ntp:\n    servers: [a.example:123, b.example]\n"), 0o644)
	code, out, errs := runCmd(t, nil, "--config", yml, "--listen", "127.0.0.1:7100", "--secret-file", sec, "--print-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, w := range []string{"listen: 127.0.0.1:7100", "http: 127.0.0.1:7001", "max_drift_ppm: 80", "a.example:123", "[redacted]"} {
		if !strings.Contains(out, w) {
			t.Errorf("print-config lacks %q:\n%s", w, out)
		}
	}
	code, out, _ = runCmd(t, map[string]string{"CLUSTER_CLOCK_AGENT_SECRET": string(secretBytes)}, "--config", yml, "--ntp", "c.example", "--print-config")
	if code != 0 || strings.Contains(out, string(secretBytes)) || !strings.Contains(out, "[redacted]") {
		t.Fatalf("exit %d, secret shown or not redacted:\n%s", code, out)
	}
	if strings.Contains(out, "a.example") || !strings.Contains(out, "c.example") {
		t.Fatalf("--ntp did not replace the file's servers:\n%s", out)
	}
}

// The conformance suite's black-box use (issue 4): build the binary, start
// it as `--dev --listen --http --secret-file`, wait for /readyz 200, do an
// exchange, reload the secret on SIGHUP, stop on SIGTERM with status 0.
func TestBinaryDevBlackBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	sec := writeFile(t, "s", secretBytes, 0o600)
	port := freePort(t)
	hport := freePort(t)
	a := startDevAgent(t, nil, port, hport, sec)
	cmd, stderr := a.cmd, &a.stderr
	a.waitReady(hport)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	keys := protocol.KeyRing{protocol.NewKey(protocol.DevKey(secretBytes))}
	if err := oneExchange(addr, keys); err != nil {
		t.Fatal(err)
	}
	// Rotate: write a new secret, SIGHUP, answers now verify under it.
	next := []byte("cmd-test-secret-NEXT-0123456789abcdefghijk")
	if err := os.WriteFile(sec, next, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	nextKeys := protocol.KeyRing{protocol.NewKey(protocol.DevKey(next))}
	deadline := time.Now().Add(5 * time.Second)
	for oneExchange(addr, nextKeys) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not switch the secret; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	a.waitExit0()
	if strings.Contains(stderr.String(), string(secretBytes)) || strings.Contains(stderr.String(), string(next)) {
		t.Fatal("a secret reached the log")
	}
}

func oneExchange(addr string, keys protocol.KeyRing) error {
	n, _ := protocol.NewNonce()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	c.Write(protocol.EncodeRequest(protocol.Request{Nonce: n}))
	lr := protocol.NewLineReader(c)
	line, err := lr.ReadLine()
	if err != nil {
		return err
	}
	if err := lr.ExpectEOF(); err != nil {
		return err
	}
	r, err := protocol.ParseVerify(line, n, keys)
	if err == nil && (!r.Synced || r.UncertaintyMs < 1) {
		err = fmt.Errorf("answer %+v not synced with uncertainty ≥ 1", r)
	}
	return err
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A runtime failure (the port is taken) exits 1, not 2.
func TestExitOneWhenThePortIsTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sec := writeFile(t, "s", secretBytes, 0o600)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--dev", "--listen", l.Addr().String(), "--http", "127.0.0.1:0", "--secret-file", sec}, &out, &errb, envOf(nil))
	if code != 1 || !strings.Contains(errb.String(), "address already in use") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// devAgent is a built `tckclk-agent --dev` process started by a test,
// killed at cleanup if still running.
type devAgent struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr bytes.Buffer
	waited chan error
}

// startDevAgent builds the command and runs it with --dev on the given
// ports and secret file, with env as its whole environment (never the
// test's CLUSTER_CLOCK_AGENT_SECRET).
func startDevAgent(t *testing.T, env []string, port, hport int, secretFile string) *devAgent {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tckclk-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	a := &devAgent{t: t, waited: make(chan error, 1)}
	a.cmd = exec.Command(bin, "--dev", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--http", fmt.Sprintf("127.0.0.1:%d", hport), "--secret-file", secretFile)
	a.cmd.Stderr = &a.stderr
	a.cmd.Env = append([]string{}, env...)
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.waited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.waited
	})
	return a
}

// waitReady waits (5 s at most) for /readyz on hport to answer 200.
func (a *devAgent) waitReady(hport int) {
	a.t.Helper()
	start := time.Now()
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", hport))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 5*time.Second {
			a.t.Fatalf("not ready within 5 s; stderr:\n%s", a.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.t.Logf("ready after %v", time.Since(start))
}

// SPEC §1.1, §3.1: an agent process that dies holding a connection whose
// bytes it has read ends it with a TCP reset — an exchange that could not
// complete (io, tried again within the burst) — never with the FIN a node
// reads as a missing LF (format: a lying agent's reason, which fails the
// node for good and refuses its replacement, SPEC §3.4).
func TestKilledAgentResetsHeldConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip("needs ss (iproute2) to see the agent take the bytes off its socket")
	}
	sec := writeFile(t, "s", secretBytes, 0o600)
	port, hport := freePort(t), freePort(t)
	a := startDevAgent(t, nil, port, hport, sec)
	a.waitReady(hport)

	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	partial := []byte("TCKCLK/2 REQ ") // no LF: the agent reads it and waits for the rest
	if _, err := c.Write(partial); err != nil {
		t.Fatal(err)
	}
	waitConsumed(t, port, c.LocalAddr().(*net.TCPAddr).Port, len(partial))

	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.waited <- <-a.waited // the cleanup's receive
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf [16]byte
	n, err := c.Read(buf[:])
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after kill -9 the held connection read %q, %v; want a reset (ECONNRESET), never a clean EOF", buf[:n], err)
	}
	// The agent's own read timeout (2 s) would reset it too: the reset must
	// be the dying process's.
	if took := time.Since(killed); took > time.Second {
		t.Fatalf("reset %v after the kill: the read timeout's, not the process's", took)
	}
}

// waitConsumed waits (5 s at most) until the agent's end of the connection
// from local to port has received want bytes and holds none unread (ss -ti:
// bytes_received, Recv-Q): the agent has read them.
func waitConsumed(t *testing.T, port, local, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	filter := fmt.Sprintf("( sport = :%d and dport = :%d )", port, local)
	last := ""
	for time.Now().Before(deadline) {
		out, err := exec.Command("ss", "-tinH", "state", "established", filter).Output()
		if err != nil {
			t.Fatalf("ss: %v", err)
		}
		last = string(out)
		if f := strings.Fields(last); len(f) > 0 && f[0] == "0" && strings.Contains(last, fmt.Sprintf("bytes_received:%d ", want)) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the agent did not read the %d bytes within 5 s; ss: %q", want, last)
}

// waitExit0 waits (10 s at most) for the process to exit with status 0.
func (a *devAgent) waitExit0() {
	a.t.Helper()
	select {
	case err := <-a.waited:
		a.waited <- err // the cleanup's receive
		if err != nil {
			a.t.Fatalf("exit after SIGTERM: %v\n%s", err, a.stderr.String())
		}
	case <-time.After(10 * time.Second):
		a.t.Fatal("no exit after SIGTERM")
	}
}
