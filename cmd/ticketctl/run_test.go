package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// bins are ticketd and ticketctl, built once per run (not -race: the real
// commands).
var bins struct {
	once sync.Once
	dir  string
	err  error
}

func bin(t *testing.T, name string) string {
	t.Helper()
	bins.once.Do(func() {
		if bins.dir, bins.err = os.MkdirTemp("", "ticketctl-test-bin-"); bins.err != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", bins.dir+string(os.PathSeparator), ".", "../ticketd").CombinedOutput()
		if err != nil {
			bins.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return filepath.Join(bins.dir, name)
}

// ticketd starts a real single-node ticketd on a free loopback port and
// waits until it is ready; it is killed (and continued, if stopped) at
// cleanup.
func ticketd(t *testing.T, args ...string) (*exec.Cmd, string, *client.Client) {
	t.Helper()
	cmd := exec.Command(bin(t, "ticketd"), append([]string{"--data-dir", t.TempDir(), "--http", "127.0.0.1:0", "--log.format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "API listening" {
				addr <- rec.Addr
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	var a string
	select {
	case a = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("ticketd did not report its address")
	}
	c, err := client.New(a)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Ready(context.Background()); err == nil {
			return cmd, "http://" + a, c
		} else if time.Now().After(deadline) {
			t.Fatalf("ticketd not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a readiness probe with a deadline
	}
}

// ticketctl runs the built ticketctl and returns its exit status and
// output.
func ticketctl(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin(t, "ticketctl"), args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// SPEC §4.2: run gives CMD the ticket's name, holder, token and deadline,
// exits with CMD's status, and releases the ticket; a held ticket is 75.
func TestRunPassesStatusAndReleases(t *testing.T) {
	_, addr, c := ticketd(t)
	script := `test "$TICKET_NAME" = job && test "$TICKET_HOLDER" = h && test "$TICKET_TOKEN" -gt 0 && test "$TICKET_DEADLINE_UNIX_MS" -gt 0 || exit 9; echo "token $TICKET_TOKEN"; exit 7`
	code, out, errs := ticketctl(t, t.TempDir(), "--addr", addr, "run", "job", "--holder", "h", "--lease", "30", "--", "sh", "-c", script)
	if code != 7 || !strings.HasPrefix(out, "token ") {
		t.Fatalf("run: exit %d, out %q, err %q; want CMD's 7", code, out, errs)
	}
	if _, err := c.Get(context.Background(), "job"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after run: %v, want the ticket released", err)
	}
	if code, _, _ := ticketctl(t, t.TempDir(), "--addr", addr, "run", "job", "--holder", "h", "--lease", "30", "--", "true"); code != 0 {
		t.Fatalf("run true: exit %d", code)
	}
	if _, err := c.Grant(context.Background(), "job", "other", 30); err != nil {
		t.Fatal(err)
	}
	code, _, errs = ticketctl(t, t.TempDir(), "--addr", addr, "run", "job", "--holder", "h", "--lease", "30", "--", "sh", "-c", "exit 0")
	if code != 75 || !strings.Contains(errs, "held") {
		t.Fatalf("run on a held ticket: exit %d %q, want 75", code, errs)
	}
}

// SPEC §4.2: with the node unreachable (a real ticketd stopped by
// SIGSTOP), run sends CMD's group SIGTERM as the local deadline nears,
// and SIGKILL before it to a CMD that ignores SIGTERM; the exit is 75.
func TestRunKillsBeforeTheDeadline(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	td, addr, _ := ticketd(t)
	dir := t.TempDir()
	const lease = 6 * time.Second
	script := `trap "" TERM; echo $$; while :; do date +%s%3N > beat.tmp && mv beat.tmp beat; sleep 0.05; done`
	cmd := exec.Command(bin(t, "ticketctl"), "--addr", addr, "run", "job", "--holder", "h", "--lease", "6", "--grace", "1s", "--", "sh", "-c", script)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("no pid from the command: %v (%s)", err, errb.String())
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	// Any successful renew came before this instant, so the local deadline
	// is before stopped + the lease.
	stopped := time.Now()
	if err := td.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("ticketctl run still running 30 s after the node stopped: %s", errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 75 {
		t.Fatalf("exit %d, want 75 (lost); stderr %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "SIGTERM") || !strings.Contains(errb.String(), "SIGKILL") {
		t.Fatalf("stderr does not say SIGTERM then SIGKILL: %s", errb.String())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the command (pid %d) is still there: %v", pid, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "beat"))
	if err != nil {
		t.Fatal(err)
	}
	last, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("beat %q: %v", raw, err)
	}
	if bound := stopped.Add(lease).UnixMilli(); last >= bound {
		t.Fatalf("the command still ran %d ms after the latest possible local deadline", last-bound)
	}
}

// SPEC §4 (Revoke) and §4.2: an administrator's revoke of the ticket run
// holds stops CMD at run's next renew, long before the local deadline,
// as a lost ticket does: SIGTERM to its group, exit 75, and stderr says
// the ticket was revoked.
func TestRunStopsOnRevoke(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(adminFile, []byte(strings.Repeat("r", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr, _ := ticketd(t, "--api.admin_token_file", adminFile)
	cmd := exec.Command(bin(t, "ticketctl"), "--addr", addr, "run", "job", "--holder", "h", "--lease", "12", "--grace", "2s", "--", "sh", "-c", "echo started; sleep 120")
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("the command did not start: %v (%s)", err, errb.String())
	}
	revoked := time.Now()
	code, out, errs := ticketctl(t, dir, "--addr", addr, "--admin-token-file", adminFile, "revoke", "job")
	if code != 0 || !strings.Contains(out, "revoked job (holder h, token") {
		t.Fatalf("ticketctl revoke: exit %d, %q %q", code, out, errs)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(25 * time.Second):
		t.Fatalf("ticketctl run still running 25 s after the revoke: %s", errb.String())
	}
	// Renewed every 4 s: stopped at the first renew after the revoke, not
	// near the 12 s deadline (grace 2 s).
	if took := time.Since(revoked); took > 9*time.Second {
		t.Fatalf("run stopped %v after the revoke", took)
	}
	if code := cmd.ProcessState.ExitCode(); code != 75 {
		t.Fatalf("exit %d, want 75; stderr %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "revoked by an administrator: SIGTERM") {
		t.Fatalf("stderr does not say the ticket was revoked: %s", errb.String())
	}
}

// run without --grace on a short lease: the default grace scales down to
// a quarter of the lease and run says so (before, --lease 5 was refused
// with "--grace 5s: must be less than half the lease" though no --grace
// was given); an explicit --grace of half the lease is still refused, and
// a long lease keeps the 5 s default without a word.
func TestRunDefaultGraceScalesWithLease(t *testing.T) {
	_, addr, _ := ticketd(t)
	code, _, errs := ticketctl(t, t.TempDir(), "--addr", addr, "run", "short", "--holder", "h", "--lease", "5", "--", "true")
	if code != 0 || !strings.Contains(errs, "grace 1.25s (a quarter of the 5s lease; --grace to choose)") {
		t.Fatalf("run --lease 5 without --grace: exit %d, stderr %q; want 0 and the grace it chose", code, errs)
	}
	code, _, errs = ticketctl(t, t.TempDir(), "--addr", addr, "run", "short", "--holder", "h", "--lease", "5", "--grace", "2500ms", "--", "true")
	if code != 2 || !strings.Contains(errs, "--grace 2.5s: must be less than half the lease (2.5s)") {
		t.Fatalf("run --lease 5 --grace 2500ms: exit %d, stderr %q; want 2 naming --grace", code, errs)
	}
	code, _, errs = ticketctl(t, t.TempDir(), "--addr", addr, "run", "long", "--holder", "h", "--lease", "30", "--", "true")
	if code != 0 || strings.Contains(errs, "grace") {
		t.Fatalf("run --lease 30: exit %d, stderr %q; want 0 and no word on the grace", code, errs)
	}
}

// A wait that runs out says what it waited for, how long, and who holds
// the ticket: run --wait (before: `client: acquiring "held": context
// deadline exceeded`) and wait --wait (before: `--wait passed`).
func TestTimeoutsSayWhoHolds(t *testing.T) {
	_, addr, c := ticketd(t)
	g, err := c.Grant(context.Background(), "held", "alice", 60)
	if err != nil {
		t.Fatal(err)
	}
	holder := fmt.Sprintf(`held by "alice" with token %d`, g.Token)
	code, _, errs := ticketctl(t, t.TempDir(), "--addr", addr, "run", "held", "--holder", "bob", "--lease", "30", "--wait", "1500ms", "--", "true")
	if code != 75 || !strings.Contains(errs, `could not get ticket "held" within --wait 1.5s: `+holder) {
		t.Fatalf("run --wait on a held ticket: exit %d, stderr %q; want 75 saying the wait and %s", code, errs, holder)
	}
	code, _, errs = ticketctl(t, t.TempDir(), "--addr", addr, "wait", "held", "--wait", "1500ms")
	if want := fmt.Sprintf(`waited 1.5s (--wait) for ticket "held": still held by alice with token %d`, g.Token); code != 1 || !strings.Contains(errs, want) {
		t.Fatalf("wait --wait on a held ticket: exit %d, stderr %q; want 1 and %q", code, errs, want)
	}
}
