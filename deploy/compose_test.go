package deploy_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// composeRun is one docker-compose project of deploy/compose: its own
// name, network and images, so that runs in parallel never meet.
type composeRun struct {
	t       *testing.T
	project string
	file    string
	env     []string
}

// compose runs docker-compose on the project; profile adds
// --profile replacement (node-4 and clock-4).
func (c *composeRun) compose(profile bool, args ...string) (string, error) {
	full := []string{"-p", c.project, "-f", c.file}
	if profile {
		full = append(full, "--profile", "replacement")
	}
	cmd := exec.Command("docker-compose", append(full, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// containers maps each service of the project to its container's name and
// state (docker ps: one call, quicker than docker-compose's Python).
func (c *composeRun) containers() (map[string][2]string, error) {
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=com.docker.compose.project="+c.project,
		"--format", `{{.Label "com.docker.compose.service"}} {{.Names}} {{.Status}}`).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("docker ps: %w: %s", err, out)
	}
	m := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.SplitN(line, " ", 3); len(f) == 3 {
			m[f[0]] = [2]string{f[1], f[2]}
		}
	}
	return m, nil
}

// ctl runs ticketctl inside node's container (the image's own binary,
// against its own API on 127.0.0.1:7980).
func (c *composeRun) ctl(node string, args ...string) (string, error) {
	m, err := c.containers()
	if err != nil {
		return "", err
	}
	name, ok := m[node]
	if !ok {
		return "", fmt.Errorf("no container for %s", node)
	}
	out, err := exec.Command("docker", append([]string{"exec", name[0], "/usr/local/bin/ticketctl",
		"--admin-token-file", "/run/secrets/admin.token", "--timeout", "5s"}, args...)...).CombinedOutput()
	return string(out), err
}

// unhealthy says which of services is not "(healthy)" by its Docker
// HEALTHCHECK, or "" when all are.
func (c *composeRun) unhealthy(services ...string) string {
	m, err := c.containers()
	if err != nil {
		return err.Error()
	}
	for _, s := range services {
		if st, ok := m[s]; !ok || !strings.Contains(st[1], "(healthy)") {
			return fmt.Sprintf("%s: %q", s, st[1])
		}
	}
	return ""
}

// eventually polls cond until it returns "" (done) or the deadline passes;
// the last non-empty answer says what was still wrong.
func eventually(t *testing.T, within time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, within, why)
		}
		time.Sleep(500 * time.Millisecond) // poll a condition with a deadline
	}
}

// e2ePrefix starts the project name of every run of TestComposeCluster.
const e2ePrefix = "tckclke2e"

// sweepStale takes down the projects of earlier runs that were killed
// before their cleanup (a go test -timeout panic, SIGKILL): those created
// over 30 minutes ago, far beyond a run's length, so never a live run.
func sweepStale(t *testing.T, file string) {
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=com.docker.compose.project",
		"--format", `{{.Label "com.docker.compose.project"}}|{{.CreatedAt}}`).CombinedOutput()
	if err != nil {
		t.Logf("docker ps for stale runs: %v: %s", err, out)
		return
	}
	stale := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		project, created, ok := strings.Cut(line, "|")
		if !ok || !strings.HasPrefix(project, e2ePrefix) {
			continue
		}
		at, err := time.Parse("2006-01-02 15:04:05 -0700 MST", created)
		if err == nil && time.Since(at) > 30*time.Minute {
			stale[project] = true
		}
	}
	for project := range stale {
		old := &composeRun{t: t, project: project, file: file}
		out, err := old.compose(true, "down", "-v", "--remove-orphans", "-t", "1")
		t.Logf("took down %s, left by a run killed before its cleanup: %v %s", project, err, out)
	}
	out, err = exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}|{{.CreatedAt}}").CombinedOutput()
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		image, created, _ := strings.Cut(line, "|")
		at, err := time.Parse("2006-01-02 15:04:05 -0700 MST", created)
		if strings.Contains(image, ":e2e-"+e2ePrefix) && err == nil && time.Since(at) > 30*time.Minute {
			out, err := exec.Command("docker", "rmi", image).CombinedOutput()
			t.Logf("removed %s, left by a killed run: %v %s", image, err, out)
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Issue 15 item 2: deploy/compose end to end on this machine's Docker
// engine. The images (deploy/docker/build.sh) and the keys
// (deploy/compose/compose-keys.sh) are made as an operator makes them;
// three nodes come up and every container turns healthy through its
// HEALTHCHECK (/readyz, never a TCP connect); a ticket is granted through
// each node; the leader's container stops and grants go on through the
// other two; node-4, a new NodeId in the trust map from the start,
// joins and becomes a voter; down -v removes every container, network
// and volume of the run, even when it fails.
func TestComposeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and runs a cluster in containers")
	}
	for _, tool := range []string{"docker", "docker-compose", "openssl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: the compose end-to-end test needs docker, docker-compose (Debian's v1), openssl and go", tool)
		}
	}
	if out, err := exec.Command("docker", "info", "-f", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	if os.Geteuid() != 0 {
		t.Skip("compose-keys.sh must chown the secrets to the images' uid 65532: run as root")
	}
	start := time.Now()
	run := &composeRun{t: t, project: e2ePrefix + randHex(4), file: filepath.Join("compose", "docker-compose.yml")}
	sweepStale(t, run.file)
	tag := "e2e-" + run.project

	build := exec.Command("sh", "docker/build.sh")
	build.Env = append(os.Environ(), "TCKCLK_TAG="+tag)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/docker/build.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "rmi", "tckclk/agent:"+tag, "tckclk/ticketd:"+tag).CombinedOutput(); err != nil {
			t.Errorf("docker rmi: %v\n%s", err, out)
		}
	})
	t.Logf("images built in %v", time.Since(start).Round(time.Second))

	keys := filepath.Join(t.TempDir(), "keys")
	if out, err := exec.Command("sh", "compose/compose-keys.sh", keys).CombinedOutput(); err != nil {
		t.Fatalf("compose-keys.sh: %v\n%s", err, out)
	}
	if out, err := exec.Command("sh", "compose/compose-keys.sh", keys).CombinedOutput(); err == nil || !strings.Contains(string(out), "refusing to overwrite") {
		t.Fatalf("compose-keys.sh over existing keys: %v %s; want a refusal", err, out)
	}
	// Wider clock limits for a CI host loaded by other tests (as
	// testClockFlags in demo_test.go): at Δ 500 ms one agent exchange
	// delayed past max_rtt_ms 125 failed a node for good (seen: rtt 310 ms).
	widenClockLimits(t, keys)
	st, err := os.Stat(filepath.Join(keys, "gossip.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("gossip.key: %v %v; want mode 0600", st, err)
	}

	// Down first in the cleanups' order (they run last in, first out): the
	// images go after their containers.
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run.compose(true, "logs", "--no-color", "--tail", "30")
			t.Logf("logs of %s:\n%s", run.project, out)
		}
		if out, err := run.compose(true, "down", "-v", "--remove-orphans", "-t", "10"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, out)
		}
		label := "label=com.docker.compose.project=" + run.project
		for _, kind := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
			out, err := exec.Command("docker", append(kind, "-q", "--filter", label)...).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Errorf("after down, docker %s with %s: %v %q; want none", strings.Join(kind, " "), label, err, out)
			}
		}
	})

	// A free /24: another run (or network) may hold the one picked.
	for attempt := 1; ; attempt++ {
		n, _ := rand.Int(rand.Reader, big.NewInt(180))
		run.env = []string{"TCKCLK_KEYS=" + keys, "TCKCLK_TAG=" + tag, fmt.Sprintf("TCKCLK_NET=172.31.%d", 64+n.Int64())}
		out, err := run.compose(false, "up", "-d")
		if err == nil {
			break
		}
		if !strings.Contains(out, "overlaps") || attempt == 5 {
			t.Fatalf("docker-compose up: %v\n%s", err, out)
		}
		if out, err := run.compose(true, "down", "-v", "--remove-orphans"); err != nil {
			t.Fatalf("docker-compose down after an overlapping network: %v\n%s", err, out)
		}
	}

	nodes := []string{"node-1", "node-2", "node-3"}
	eventually(t, 120*time.Second, "every container healthy", func() string {
		return run.unhealthy("clock-1", "clock-2", "clock-3", "node-1", "node-2", "node-3")
	})
	for _, n := range nodes {
		if out, err := run.ctl(n, "health"); err != nil || !strings.Contains(out, `"ready"`) {
			t.Fatalf("ticketctl health in %s: %v %s", n, err, out)
		}
	}
	t.Logf("three nodes healthy %v after the start", time.Since(start).Round(time.Second))

	grant := func(node, name string) (uint64, error) {
		out, err := run.ctl(node, "--json", "grant", name, "--holder", "e2e", "--lease", "60")
		if err != nil {
			return 0, fmt.Errorf("%w: %s", err, out)
		}
		var g wire.Grant
		if err := json.Unmarshal([]byte(out), &g); err != nil || g.Token == 0 {
			return 0, fmt.Errorf("grant answer %q: %w", out, err)
		}
		return g.Token, nil
	}
	var last uint64
	for _, n := range nodes {
		tok, err := grant(n, "e2e-"+n)
		if err != nil {
			t.Fatalf("grant through %s: %v", n, err)
		}
		if tok <= last {
			t.Fatalf("grant through %s: token %d after %d; fencing tokens must grow", n, tok, last)
		}
		last = tok
	}

	status := func(node string) (wire.Status, error) {
		var s wire.Status
		out, err := run.ctl(node, "--json", "status")
		if err != nil {
			return s, fmt.Errorf("%w: %s", err, out)
		}
		return s, json.Unmarshal([]byte(out), &s)
	}
	s, err := status("node-1")
	if err != nil || s.Leader == "" {
		t.Fatalf("status of node-1: %+v %v; want a leader", s, err)
	}
	leader := s.Leader
	var others []string
	for _, n := range nodes {
		if n != leader {
			others = append(others, n)
		}
	}
	if len(others) != 2 {
		t.Fatalf("leader %q is not one of %v", leader, nodes)
	}
	if out, err := run.compose(false, "stop", "-t", "20", leader); err != nil {
		t.Fatalf("stopping the leader %s: %v\n%s", leader, err, out)
	}
	stopped := time.Now()
	for i, n := range others {
		eventually(t, 60*time.Second, "a grant through "+n+" after the leader stopped", func() string {
			tok, err := grant(n, fmt.Sprintf("after-stop-%d", i))
			if err != nil {
				return err.Error()
			}
			if tok <= last {
				return fmt.Sprintf("token %d after %d", tok, last)
			}
			last = tok
			return ""
		})
	}
	if s, err := status(others[0]); err != nil || s.Leader == leader || s.Leader == "" {
		t.Fatalf("status of %s after %s stopped: leader %q, %v", others[0], leader, s.Leader, err)
	}
	t.Logf("grants go on through %v %v after %s stopped", others, time.Since(stopped).Round(time.Second), leader)

	if out, err := run.compose(true, "up", "-d", "node-4"); err != nil {
		t.Fatalf("starting the replacement node-4: %v\n%s", err, out)
	}
	eventually(t, 120*time.Second, "node-4 healthy and a voter in place of "+leader, func() string {
		if why := run.unhealthy("clock-4", "node-4"); why != "" {
			return why
		}
		out, err := run.ctl(others[0], "--json", "cluster")
		if err != nil {
			return "cluster: " + err.Error() + ": " + out
		}
		var m wire.Members
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			return "cluster answer: " + err.Error()
		}
		voters := map[string]bool{}
		for _, mb := range m.Members {
			if mb.Suffrage == "voter" {
				voters[mb.ID] = true
			}
		}
		if !voters["node-4"] || voters[leader] || len(voters) != 3 {
			return fmt.Sprintf("voters %v; want node-4 and %v", voters, others)
		}
		return ""
	})
	if _, err := grant("node-4", "through-node-4"); err != nil {
		t.Fatalf("grant through the replacement node-4: %v", err)
	}
	t.Logf("node-4 replaced %s; whole run %v", leader, time.Since(start).Round(time.Second))
}

// widenClockLimits adds testClockFlags' limits to every node config
// compose-keys.sh wrote (keeping each file's owner and mode).
func widenClockLimits(t *testing.T, keys string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(keys, "node-*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("node configs in %s: %v", keys, err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		wide := strings.Replace(string(data), "\nclock:\n", "\nclock:\n  delta_ms: 12000\n  probe_interval_ms: 3000\n  probe_timeout_ms: 3000\n  staleness_ms: 30000\n", 1)
		if wide == string(data) {
			t.Fatalf("%s has no clock: section", p)
		}
		if err := os.WriteFile(p, []byte(wide), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
