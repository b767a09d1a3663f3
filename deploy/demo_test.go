package deploy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
)

// testClockFlags widen the nodes' clock limits for a machine loaded by
// other tests (as cmd/ticketd's procClockFlags do): at the default Δ 500 ms
// max_rtt_ms is 125 and one agent exchange delayed by a busy scheduler
// fails a node for good (seen: rtt 210 ms at load average 15 on 2 cores).
// Δ 12 s makes the max_* limits 3 s. The clock rules are tested at their
// defaults elsewhere; these tests are about the deploy files.
const testClockFlags = "--clock.delta_ms 12000 --clock.probe_interval_ms 3000 --clock.probe_timeout_ms 3000 --clock.staleness_ms 30000"

// deploy/demo.sh, the README's one-command demo, on a machine like a
// fresh one: it builds, makes keys, starts an agent and three nodes, waits
// for every /readyz, grants, renews and releases through three different
// nodes and prints the cluster with three healthy voters, one leader —
// then stops every process it started (TCKCLK_DEMO_ONESHOT=1).
func TestDemoScript(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not on PATH: deploy/cluster-keys.sh needs it")
	}
	if testing.Short() {
		t.Skip("builds and runs a cluster")
	}
	p := clustertest.Ports(t, 8)
	work := t.TempDir()
	cmd := exec.Command("sh", "demo.sh")
	cmd.Env = append(os.Environ(), "TCKCLK_DEMO_ONESHOT=1", "TCKCLK_DEMO_DIR="+work, "TCKCLK_DEMO_TICKETD_FLAGS="+testClockFlags,
		"TCKCLK_API_PORTS="+clustertest.JoinPorts(p[0:3]), "TCKCLK_GOSSIP_PORTS="+clustertest.JoinPorts(p[3:6]),
		fmt.Sprintf("TCKCLK_AGENT_ADDR=127.0.0.1:%d", p[6]), fmt.Sprintf("TCKCLK_AGENT_HTTP=127.0.0.1:%d", p[7]))
	cmd.Env = withoutClockSecret(cmd.Env)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { defer close(done); out, err = cmd.CombinedOutput() }()
	select {
	case <-done:
	case <-time.After(4 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("demo.sh still running after 4 min:\n%s", out)
	}
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	text := string(out)
	voter := regexp.MustCompile(`(?m)^node-[123]\s+1\s+127\.0\.0\.1:\d+\s+voter\s+(\*\s+)?alive\s+\S+\s+healthy\s+\d+ / 6000 ms$`)
	if n := len(voter.FindAllString(text, -1)); n != 3 {
		t.Errorf("ticketctl cluster shows %d healthy voters, want 3:\n%s", n, text)
	}
	if n := strings.Count(text, " ready at http://127.0.0.1:"); n != 3 {
		t.Errorf("%d nodes reported ready, want 3", n)
	}
	for _, want := range []string{`"token": `, "released demo-lock (holder demo, token ", "stopped; keys, data and logs are in " + work} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// Everything it started is gone: the ports are free again.
	for _, port := range p[:3] {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still answers after the demo stopped", port)
		}
	}
}

func withoutClockSecret(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CLUSTER_CLOCK_AGENT_SECRET") {
			out = append(out, kv)
		}
	}
	return out
}

// runDemo starts deploy/demo.sh (not one-shot) on free ports and returns
// once it says it is running: p[0:3] are the nodes' API ports, p[3:6]
// their gossip ports, p[6] the agent's TCKCLK/2 port, p[7] its HTTP port,
// and p[8:] spare ports for the test. The admin token is
// work/keys/admin.token. At cleanup the demo gets SIGINT (it stops what it
// started), then SIGKILL on its process group if it is still there.
func runDemo(t *testing.T, ports int) ([]int, string) {
	t.Helper()
	p, d := runDemoWithLog(t, ports)
	return p, d.dir
}

// demoRun is a running demo: its directory and what it has printed.
type demoRun struct {
	dir  string
	mu   sync.Mutex
	log  strings.Builder
	more chan struct{} // closed and replaced on every new line
}

func (d *demoRun) text() string { d.mu.Lock(); defer d.mu.Unlock(); return d.log.String() }

// waitFor waits until the demo has printed s, or within passes.
func (d *demoRun) waitFor(s string, within time.Duration) bool {
	deadline := time.After(within)
	for {
		d.mu.Lock()
		found, more := strings.Contains(d.log.String(), s), d.more
		d.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-more:
		case <-deadline:
			return false
		}
	}
}

// runDemoWithLog is runDemo that also returns what the demo prints.
func runDemoWithLog(t *testing.T, ports int) ([]int, *demoRun) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not on PATH: deploy/cluster-keys.sh needs it")
	}
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	p := clustertest.Ports(t, ports)
	work := t.TempDir()
	demo := exec.Command("sh", "demo.sh")
	demo.Env = withoutClockSecret(append(os.Environ(), "TCKCLK_DEMO_DIR="+work, "TCKCLK_DEMO_TICKETD_FLAGS="+testClockFlags,
		"TCKCLK_API_PORTS="+clustertest.JoinPorts(p[0:3]), "TCKCLK_GOSSIP_PORTS="+clustertest.JoinPorts(p[3:6]),
		fmt.Sprintf("TCKCLK_AGENT_ADDR=127.0.0.1:%d", p[6]), fmt.Sprintf("TCKCLK_AGENT_HTTP=127.0.0.1:%d", p[7])))
	demo.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	demo.Stderr = demo.Stdout
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	demoDone := make(chan struct{})
	running := make(chan struct{})
	d := &demoRun{dir: work, more: make(chan struct{})}
	go func() {
		defer close(demoDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.mu.Lock()
			d.log.WriteString(sc.Text() + "\n")
			close(d.more)
			d.more = make(chan struct{})
			d.mu.Unlock()
			if strings.HasPrefix(sc.Text(), "running; Ctrl-C") {
				close(running)
			}
		}
		io.Copy(io.Discard, out)
		demo.Wait()
	}()
	logText := d.text
	t.Cleanup(func() {
		syscall.Kill(-demo.Process.Pid, syscall.SIGINT) // the demo stops what it started
		select {
		case <-demoDone:
		case <-time.After(30 * time.Second):
			syscall.Kill(-demo.Process.Pid, syscall.SIGKILL)
			<-demoDone
		}
		// Ctrl-C stops the nodes before the agent: no node may see its
		// agent gone on its way out.
		for _, name := range []string{"node-1", "node-2", "node-3"} {
			b, err := os.ReadFile(filepath.Join(work, "logs", name+".log"))
			if err != nil {
				t.Errorf("%s's log: %v", name, err)
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "clock health FAILED") {
					t.Errorf("%s logged a clock FAILED while the demo stopped (the agent went first?): %s", name, line)
				}
			}
		}
		if t.Failed() {
			t.Logf("demo.sh output:\n%s", logText())
		}
	})
	select {
	case <-running:
	case <-demoDone:
		t.Fatalf("demo.sh exited:\n%s", logText())
	case <-time.After(3 * time.Minute):
		t.Fatalf("demo.sh not running after 3 min:\n%s", logText())
	}
	return p, d
}

// TestDemoRefusesPortsInUse: the demo checks every port it needs before
// it builds or starts anything, and names the port and the variable that
// moves it — a second demo must never talk to the first one's cluster.
func TestDemoRefusesPortsInUse(t *testing.T) {
	p := clustertest.Ports(t, 8)
	api, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	gossip, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p[4]))
	if err != nil {
		t.Fatal(err)
	}
	defer gossip.Close()
	agent, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p[7]))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	work := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command("sh", "demo.sh")
	cmd.Env = append(os.Environ(), "TCKCLK_DEMO_DIR="+work,
		"TCKCLK_API_PORTS="+clustertest.JoinPorts(p[0:3]), "TCKCLK_GOSSIP_PORTS="+clustertest.JoinPorts(p[3:6]),
		fmt.Sprintf("TCKCLK_AGENT_ADDR=127.0.0.1:%d", p[6]), fmt.Sprintf("TCKCLK_AGENT_HTTP=127.0.0.1:%d", p[7]))
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("demo.sh with ports in use: %v, want exit status 1\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		fmt.Sprintf("port %d (tcp) is in use", p[1]), "set TCKCLK_API_PORTS",
		fmt.Sprintf("port %d (udp) is in use", p[4]), "set TCKCLK_GOSSIP_PORTS",
		fmt.Sprintf("port %d (tcp) is in use", p[7]), "set TCKCLK_AGENT_HTTP",
		"nothing was started",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, free := range []int{p[0], p[3], p[6]} {
		if strings.Contains(text, fmt.Sprintf("port %d ", free)) {
			t.Errorf("a free port %d was reported in use:\n%s", free, text)
		}
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Errorf("the demo made %s (built or started something) before refusing: %v", work, err)
	}
}

// TestDemoRestartsANodeThatExits: while it runs the demo supervises its
// nodes as systemd's Restart=on-failure would: a node that dies is said,
// started again on its data dir, and seen ready again.
func TestDemoRestartsANodeThatExits(t *testing.T) {
	p, work := runDemoWithLog(t, 8)
	pid, err := os.ReadFile(filepath.Join(work.dir, "run", "node-2.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscan(string(pid), &n); err != nil {
		t.Fatalf("node-2.pid %q: %v", pid, err)
	}
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node-2 exited with status 137", "starting node-2 again", "-> ready"} {
		if !work.waitFor(want, 2*time.Minute) {
			t.Fatalf("the demo never said %q:\n%s", want, work.text())
		}
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p[1]), 5*time.Second); err != nil {
		t.Errorf("node-2's API after the restart: %v", err)
	} else {
		c.Close()
	}
}
