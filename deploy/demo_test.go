package deploy_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// freePorts returns n distinct loopback ports free for TCP and UDP (gossip
// needs both) at the time of the call.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var hold []func() error
	defer func() {
		for _, c := range hold {
			c()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			l.Close()
			continue
		}
		hold = append(hold, l.Close, u.Close)
		ports = append(ports, port)
	}
	return ports
}

func words(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, " ")
}

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
	p := freePorts(t, 8)
	work := t.TempDir()
	cmd := exec.Command("sh", "demo.sh")
	cmd.Env = append(os.Environ(), "TCKCLK_DEMO_ONESHOT=1", "TCKCLK_DEMO_DIR="+work,
		"TCKCLK_API_PORTS="+words(p[0:3]), "TCKCLK_GOSSIP_PORTS="+words(p[3:6]),
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
	voter := regexp.MustCompile(`(?m)^node-[123]\s+127\.0\.0\.1:\d+\s+voter\s+(\*\s+)?alive\s+\S+\s+healthy\s+\d+ / 250 ms$`)
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
