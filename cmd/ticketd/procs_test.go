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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// buildSet is a set of commands built once per test run (go build, not
// -race: these are the real commands) into a directory removed by
// TestMain.
type buildSet struct {
	once sync.Once
	dir  string
	err  error
}

// path builds on first use (go build with args, into the set's directory)
// and returns the path of the command name.
func (b *buildSet) path(t *testing.T, name string, args ...string) string {
	t.Helper()
	b.once.Do(func() {
		goBin, err := exec.LookPath("go") // go test puts GOROOT/bin first on PATH
		if err != nil {
			b.err = err
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "ticketd-test-bin-"); b.err != nil {
			return
		}
		out, err := exec.Command(goBin, append([]string{"build", "-o", b.dir + string(os.PathSeparator)}, args...)...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return filepath.Join(b.dir, name)
}

// built: ticketd and tckclk-agent; builtFaults: ticketd with -tags
// tckclk_testfaults (testfaults.go: a wall-clock offset and the broken
// expiry from the environment); builtCtl: ticketctl (the operator's side
// of a rolling restart); builtUpgrade: ticketd again with another
// revision in --version (the new build of a rolling upgrade).
var built, builtFaults, builtCtl, builtUpgrade buildSet

// binary returns the path of a command of this module (ticketd,
// tckclk-agent), building both on first use.
func binary(t *testing.T, name string) string {
	return built.path(t, name, ".", "../tckclk-agent")
}

// faultsBinary returns the path of the tckclk_testfaults build of ticketd.
func faultsBinary(t *testing.T) string {
	return builtFaults.path(t, "ticketd", "-tags", "tckclk_testfaults", ".")
}

func removeBinaries() {
	for _, dir := range []string{built.dir, builtFaults.dir, builtCtl.dir, builtUpgrade.dir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
}

// proc is a ticketd process started by a test, logging JSON to a pipe the
// test reads.
type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan error // Wait's result, once the process exited and its log is read
	tr   *http.Transport
	c    *client.Client

	mu       sync.Mutex
	log      []string
	failedCh chan failedEvent // the first "clock health FAILED" log line
}

// failedEvent is when the test read the FAILED log line, and its reason.
type failedEvent struct {
	at     time.Time
	reason string
}

// childEnv is this process's environment without the clock-secret
// variables (SPEC §1.4): a child gets its secret from its config only.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CLUSTER_CLOCK_AGENT_SECRET") {
			env = append(env, kv)
		}
	}
	return env
}

// spawnArgv starts argv (a command of this module, or one wrapped in `ip
// netns exec`, which execs it in place: the process is the command itself)
// with childEnv plus env and returns its stderr pipe.
func spawnArgv(t *testing.T, env, argv []string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd, stderr, err := startArgv(env, argv)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, stderr
}

// startArgv is spawnArgv returning its error (for a goroutine other than
// the test's, which may not fail it).
func startArgv(env, argv []string) (*exec.Cmd, io.ReadCloser, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(childEnv(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, stderr, nil
}

// startProc starts ticketd with args (plus JSON logging) and waits until it
// reports its API address; it does not wait for readiness. ok false means
// the process exited first (its exit is then in done). The process is
// killed at cleanup if still running.
func startProc(t *testing.T, args ...string) (p *proc, ok bool) {
	t.Helper()
	return startProcArgv(t, nil, []string{binary(t, "ticketd")}, args...)
}

// startProcArgv is startProc for the command prefix argv0 (a ticketd
// binary, perhaps behind `ip netns exec NS`) with env added.
func startProcArgv(t *testing.T, env, argv0 []string, args ...string) (p *proc, ok bool) {
	t.Helper()
	argv := append(append(append([]string(nil), argv0...), args...), "--log.format", "json")
	cmd, stderr := spawnArgv(t, env, argv)
	p, addrCh := newProc(cmd, stderr)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
		p.tr.CloseIdleConnections()
		if t.Failed() {
			t.Logf("ticketd %v log:\n%s", args, p.logText())
		}
	})
	select {
	case p.addr = <-addrCh:
	case err := <-p.done:
		p.done <- err
		return p, false
	case <-time.After(30 * time.Second):
		t.Fatal("ticketd did not report its address")
	}
	p.c, _ = client.New(p.addr, client.WithHTTPClient(&http.Client{Transport: p.tr, Timeout: 10 * time.Second}))
	return p, true
}

// newProc reads the JSON log of a started ticketd (cmd, its stderr) into a
// proc, whose done gets Wait's result once the process exited and its log
// is read; the address it reports listening on comes on the channel.
func newProc(cmd *exec.Cmd, stderr io.Reader) (*proc, <-chan string) {
	p := &proc{cmd: cmd, done: make(chan error, 1), tr: &http.Transport{MaxIdleConnsPerHost: 64}, failedCh: make(chan failedEvent, 1)}
	addrCh := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sawFailed := false
		for sc.Scan() {
			var rec struct{ Msg, Addr, Reason string }
			_ = json.Unmarshal(sc.Bytes(), &rec)
			switch {
			case rec.Msg == "API listening":
				addrCh <- rec.Addr
			case strings.HasPrefix(rec.Msg, "clock health FAILED") && !sawFailed:
				sawFailed = true
				p.failedCh <- failedEvent{at: time.Now(), reason: rec.Reason}
			}
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-logDone
		p.done <- cmd.Wait()
	}()
	return p, addrCh
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// waitReady polls /readyz (every 10 ms) until it answers 200.
func (p *proc) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := p.c.Ready(context.Background())
		if err == nil {
			return nil
		}
		select {
		case exit := <-p.done:
			p.done <- exit
			return fmt.Errorf("ticketd exited before it was ready (%v)", exit)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a readiness probe with a deadline
	}
}

// exitCodeOf waits for the process to exit and returns its status.
func (p *proc) exitCodeOf(timeout time.Duration) (int, error) {
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), nil
		}
		if err != nil {
			return -1, err
		}
		return 0, nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("still running after %v", timeout)
	}
}

// startTicketd runs ticketd on dataDir with the API on a free loopback port
// (no config: host clock) and waits for /readyz.
func startTicketd(t *testing.T, dataDir string) *proc {
	t.Helper()
	p, ok := startProc(t, "--data-dir", dataDir, "--http", "127.0.0.1:0")
	if !ok {
		t.Fatalf("ticketd exited before listening: %v\n%s", <-p.done, p.logText())
	}
	if err := p.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}
