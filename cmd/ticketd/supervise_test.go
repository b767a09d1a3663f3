package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// A supervised cluster (issue 24 item 6): three ticketd processes from
// deploy/cluster-keys.sh's configs, on the API and gossip ports of those
// configs (a restarted node is found where it was, as behind a service
// address), each run by a loop that does what systemd's
// Restart=on-failure, RestartSec=1, RestartPreventExitStatus=2 does (and
// deploy/demo.sh's loop): a node that exits with status 1, or crashes (a
// Go panic kills ticketd by SIGABRT: crash.go), is started again after
// restartDelay on the same data dir; one that exits 0, 2 or by another
// signal (the test's own kill) stays down (until the test starts it). The CPU-starvation and
// rolling-restart tests run on it.

// binDirEnv names a directory holding ticketd and tckclk-agent built
// elsewhere (e.g. from an older revision, for before/after figures): the
// supervised-cluster tests run those instead of this tree's.
const binDirEnv = "TCKCLK_BIN_DIR"

// procBinary is the path of a command (ticketd, tckclk-agent) the
// supervised-cluster tests run: from $TCKCLK_BIN_DIR when set, else this
// tree's build.
func procBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv(binDirEnv)
	if dir == "" {
		return binary(t, name)
	}
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("%s=%s: no executable %s there (%v)", binDirEnv, dir, name, err)
	}
	return p
}

// hasConfigKey says whether bin's effective configuration names key (a
// build with the feature the key configures, e.g. auto_replace).
func hasConfigKey(t *testing.T, bin, key string) bool {
	t.Helper()
	out, err := exec.Command(bin, "--print-config").Output() // printed also when it would not start (exit 2)
	if len(out) == 0 {
		t.Fatalf("%s --print-config printed nothing: %v", bin, err)
	}
	return strings.Contains(string(out), key+":")
}

// restartDelay is the supervisor's pause before it starts a node that exited
// with status 1 again (systemd's RestartSec=1 in deploy/systemd).
const restartDelay = time.Second

// procRun is one process a supervisor started.
type procRun struct {
	bin     string
	started time.Time
	p       *proc // nil: it could not be started (err)
	err     error
	exited  chan struct{} // closed once the fields below are set
	at      time.Time
	code    int // exit status; -1: killed by a signal
	failed  string
	nodeID  string // as /v1/status said while it ran ("" unknown)
}

// supervised is one node under its restart loop.
type supervised struct {
	name string
	wrap []string // put before the binary (a cgroup's shell wrapper), or nil
	args []string
	logf func(format string, args ...any)

	mu    sync.Mutex
	bin   string
	runs  []*procRun
	held  bool          // down until start: stopped by the test, or an exit the loop does not restart
	wake  chan struct{} // start was called
	quit  chan struct{}
	done  chan struct{}
	codes []int // exit statuses in order (for the report)
}

// superviseNode starts name's loop with the first process running bin.
func superviseNode(t *testing.T, name, bin string, wrap, args []string) *supervised {
	s := &supervised{name: name, bin: bin, wrap: wrap, args: args, logf: t.Logf,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	t.Cleanup(func() {
		s.close()
		if t.Failed() {
			s.keepLogs(t)
		}
	})
	return s
}

// keepLogs writes every run's log to a directory that outlives the test
// and names it, with each run's last lines.
func (s *supervised) keepLogs(t *testing.T) {
	dir, err := os.MkdirTemp("", "tckclk-"+strings.ReplaceAll(t.Name(), "/", "_")+"-"+s.name+"-")
	if err != nil {
		t.Logf("%s: logs not kept: %v", s.name, err)
		return
	}
	for i, r := range s.history() {
		if r.p == nil {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("%d.log", i+1))
		if err := os.WriteFile(path, []byte(r.p.logText()+"\n"), 0o600); err != nil {
			t.Logf("%s: %v", path, err)
		}
		t.Logf("%s run %d (%s), log in %s, last lines:\n%s", s.name, i+1, s.nodeIDOf(r), path, lastLines(r.p, 8))
	}
}

func (s *supervised) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		held, bin := s.held, s.bin
		s.mu.Unlock()
		if held {
			select {
			case <-s.wake:
				continue
			case <-s.quit:
				return
			}
		}
		r := &procRun{bin: bin, started: time.Now(), exited: make(chan struct{})}
		argv := append(append(append(append([]string(nil), s.wrap...), bin), s.args...), "--log.format", "json")
		cmd, stderr, err := startArgv(nil, argv)
		if err != nil {
			r.err, r.code, r.at = err, -1, time.Now()
			close(r.exited)
			s.mu.Lock()
			s.runs, s.held = append(s.runs, r), true
			s.mu.Unlock()
			s.logf("%s: cannot start %s: %v", s.name, bin, err)
			continue
		}
		r.p, _ = newProc(cmd, stderr)
		s.mu.Lock()
		s.runs = append(s.runs, r)
		s.mu.Unlock()
		var werr error
		select {
		case werr = <-r.p.done:
		case <-s.quit:
			cmd.Process.Kill()
			werr = <-r.p.done
		}
		r.p.done <- werr
		r.p.tr.CloseIdleConnections()
		r.at, r.code = time.Now(), exitStatus(werr)
		var ee *exec.ExitError
		crashed := false
		if errors.As(werr, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
			r.code = -1
			crashed = ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGABRT
		}
		select {
		case ev := <-r.p.failedCh:
			r.failed = ev.reason
		default:
		}
		s.mu.Lock()
		restart := (r.code == 1 || crashed) && !s.held
		if !restart {
			s.held = true
		}
		s.codes = append(s.codes, r.code)
		s.mu.Unlock()
		close(r.exited)
		select {
		case <-s.quit:
			return
		default:
		}
		if r.code != 0 && r.code != -1 || crashed {
			s.logf("%s (%s) exited with status %d after %v (FAILED: %q); restarted: %v; last lines:\n%s",
				s.name, s.nodeIDOf(r), r.code, r.at.Sub(r.started).Round(time.Millisecond), r.failed, restart, lastLines(r.p, 6))
		}
		if restart {
			select {
			case <-time.After(restartDelay):
			case <-s.quit:
				return
			}
		}
	}
}

// setNodeID records the NodeId run r reported.
func (s *supervised) setNodeID(r *procRun, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.nodeID = id
}

// nodeIDOf is the NodeId run r reported, or its NAME when unknown.
func (s *supervised) nodeIDOf(r *procRun) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.nodeID != "" {
		return r.nodeID
	}
	return s.name
}

// lastLines is the end of p's log.
func lastLines(p *proc, n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log[max(0, len(p.log)-n):], "\n")
}

// current is the running process's run, or nil between runs.
func (s *supervised) current() *procRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.currentLocked()
}

func (s *supervised) currentLocked() *procRun {
	if len(s.runs) == 0 {
		return nil
	}
	r := s.runs[len(s.runs)-1]
	select {
	case <-r.exited:
		return nil
	default:
		return r
	}
}

// stop sends sig to the running process, keeps the node down and waits
// (up to timeout) for its exit status.
func (s *supervised) stop(sig os.Signal, timeout time.Duration) (int, error) {
	s.mu.Lock()
	s.held = true
	s.mu.Unlock()
	r := s.current()
	if r == nil {
		return 0, fmt.Errorf("%s is not running", s.name)
	}
	if err := r.p.cmd.Process.Signal(sig); err != nil {
		return 0, err
	}
	select {
	case <-r.exited:
		return r.code, nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s still running %v after %v", s.name, sig, timeout)
	}
}

// start starts the node again (on bin when not ""), as an operator's
// systemctl start.
func (s *supervised) start(bin string) {
	s.mu.Lock()
	if bin != "" {
		s.bin = bin
	}
	s.held = false
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close kills the running process and ends the loop.
func (s *supervised) close() {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
}

// isHeld is whether the node is down until start is called.
func (s *supervised) isHeld() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held && s.currentLocked() == nil
}

// exitCodes is every exit status so far, in order (-1: a signal).
func (s *supervised) exitCodes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.codes)
}

// history is every run so far.
func (s *supervised) history() []*procRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.runs)
}

// superCluster is three supervised nodes and their agent.
type superCluster struct {
	t         *testing.T
	dir       string
	agentAddr string
	api       map[string]string // NAME → its API address (fixed)
	cl        map[string]*client.Client
	nodes     map[string]*supervised
	// adminTokenFile holds the admin token (api.admin_token_file) of
	// every node, for /v1/cluster/members and ticketctl cluster.
	adminTokenFile string
}

// startSuperCluster writes the keys and configs (fixed API and gossip
// ports), starts a dev agent outside wrap and the three nodes through
// wrap, each with extra flags after its config, and returns once a leader
// is agreed.
func startSuperCluster(t *testing.T, wrap []string, extra ...string) *superCluster {
	t.Helper()
	return startSuperClusterWith(t, wrap, nil, extra...)
}

// startSuperClusterWith is startSuperCluster with flags of each node's own
// after the common ones: perNode (if set) gets the node's name and the
// agent's address (e.g. to put a proxy in front of it for that node).
func startSuperClusterWith(t *testing.T, wrap []string, perNode func(name, agentAddr string) []string, extra ...string) *superCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs four real processes")
	}
	apiPorts := clustertest.Ports(t, len(clusterNames))
	dir := runClusterKeys(t, apiPorts, clustertest.Ports(t, len(clusterNames)), "127.0.0.1:1")
	sc := &superCluster{t: t, dir: dir, api: map[string]string{}, cl: map[string]*client.Client{}, nodes: map[string]*supervised{},
		adminTokenFile: filepath.Join(dir, "admin.token")}
	const adminToken = "supervised-cluster-admin-token-0123456789"
	if err := os.WriteFile(sc.adminTokenFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc.agentAddr = startDevAgentArgv(t, []string{procBinary(t, "tckclk-agent")}, "127.0.0.1:0", filepath.Join(dir, "clock.secret"))
	bin := procBinary(t, "ticketd")
	for i, name := range clusterNames {
		sc.api[name] = fmt.Sprintf("127.0.0.1:%d", apiPorts[i])
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		sc.cl[name], _ = client.New(sc.api[name], client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 5 * time.Second}), client.WithAdminToken(adminToken))
		args := append([]string{"--config", filepath.Join(dir, name+".yaml"), "--clock.agent_addr", sc.agentAddr, "--api.admin_token_file", sc.adminTokenFile}, extra...)
		if perNode != nil {
			args = append(args, perNode(name, sc.agentAddr)...)
		}
		sc.nodes[name] = superviseNode(t, name, bin, wrap, args)
	}
	if err := sc.waitHealthy(60*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	return sc
}

// addrs is every node's API address, comma-separated (a multi-address
// client's list, SPEC §4.1).
func (sc *superCluster) addrs() string {
	var out []string
	for _, name := range clusterNames {
		out = append(out, "http://"+sc.api[name])
	}
	return strings.Join(out, ",")
}

// client is a new Go client of every node's address (SPEC §4.1: it moves
// on when one cannot serve), with its own connection pool.
func (sc *superCluster) client(t *testing.T) *client.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(sc.addrs(), client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// healthView is the part of GET /v1/cluster/health (SPEC §3.5) the tests
// read.
type healthView struct {
	Healthy          bool   `json:"healthy"`
	FailureTolerance int    `json:"failure_tolerance"`
	Voters           int    `json:"voters"`
	Leader           string `json:"leader"`
	LeaderView       bool   `json:"leader_view"`
	Servers          []struct {
		ID       string `json:"id"`
		Suffrage string `json:"suffrage"`
		Healthy  bool   `json:"healthy"`
		Why      string `json:"why"`
		Version  string `json:"version"`
	} `json:"servers"`
}

// errNoHealthEndpoint: the node answers 404 to /v1/cluster/health (a
// build without it).
var errNoHealthEndpoint = errors.New("no GET /v1/cluster/health on this build")

// clusterHealth asks name's node for GET /v1/cluster/health.
func (sc *superCluster) clusterHealth(name string) (*healthView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+sc.api[name]+"/v1/cluster/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, errNoHealthEndpoint
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/v1/cluster/health: %d %s", resp.StatusCode, body)
	}
	var h healthView
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, fmt.Errorf("/v1/cluster/health: %w", err)
	}
	return &h, nil
}

// clusterState is one look at the whole cluster.
type clusterState struct {
	ids     map[string]string // NAME → the NodeId its running process reports (ready nodes only)
	leader  string            // NodeId
	voters  []string          // the leader's voters, sorted
	healthy bool
	why     []string
}

// look reads every node's /v1/status (readiness, NodeId), then the
// cluster's health: GET /v1/cluster/health where the build has it
// (healthy with failure_tolerance 1), else the leader's
// /v1/cluster/members (three voters, the current NodeIds of the three
// NAMEs, each alive in gossip with a healthy clock).
func (sc *superCluster) look() clusterState {
	st := clusterState{ids: map[string]string{}}
	for _, name := range clusterNames {
		r := sc.nodes[name].current()
		if r == nil {
			st.why = append(st.why, name+": not running")
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s, err := sc.cl[name].Status(ctx)
		cancel()
		if err != nil {
			st.why = append(st.why, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		sc.nodes[name].setNodeID(r, s.NodeID)
		if !s.Ready {
			st.why = append(st.why, fmt.Sprintf("%s (%s): not ready, stage %s %s", name, s.NodeID, s.Stage, s.Reason))
			continue
		}
		st.ids[name] = s.NodeID
		if s.Role == "leader" {
			st.leader = s.NodeID
		}
	}
	if len(st.ids) < len(clusterNames) {
		return st
	}
	current := map[string]bool{}
	for _, id := range st.ids {
		current[id] = true
	}
	for _, name := range clusterNames {
		h, err := sc.clusterHealth(name)
		if errors.Is(err, errNoHealthEndpoint) {
			sc.lookMembers(&st, current)
			return st
		}
		if err != nil || !h.LeaderView {
			continue // a follower's view: ask the next, as the Go client does
		}
		votersCurrent := true
		for _, s := range h.Servers {
			if s.Suffrage == "voter" {
				st.voters = append(st.voters, s.ID)
				if !s.Healthy {
					st.why = append(st.why, fmt.Sprintf("voter %s: %s", s.ID, s.Why))
				}
				if !current[s.ID] {
					votersCurrent = false
					st.why = append(st.why, fmt.Sprintf("voter %s is no NAME's running generation", s.ID))
				}
			}
		}
		slices.Sort(st.voters)
		st.healthy = h.Healthy && h.FailureTolerance == 1 && h.Voters == 3 && votersCurrent
		if !st.healthy {
			st.why = append(st.why, fmt.Sprintf("health: healthy %v failure_tolerance %d voters %d leader %q", h.Healthy, h.FailureTolerance, h.Voters, h.Leader))
		}
		return st
	}
	st.why = append(st.why, "no leader's view of /v1/cluster/health")
	return st
}

// lookMembers is look's check where the build has no cluster health.
func (sc *superCluster) lookMembers(st *clusterState, current map[string]bool) {
	var lname string
	for name, id := range st.ids {
		if id == st.leader {
			lname = name
		}
	}
	if lname == "" {
		st.why = append(st.why, "no ready leader")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	ms, err := sc.cl[lname].Members(ctx)
	cancel()
	if err != nil {
		st.why = append(st.why, fmt.Sprintf("members from %s: %v", lname, err))
		return
	}
	ok := true
	for _, m := range ms.Members {
		if m.Suffrage != "voter" {
			continue
		}
		st.voters = append(st.voters, m.ID)
		if !current[m.ID] || m.Gossip != "alive" || m.Clock != "healthy" {
			ok = false
			st.why = append(st.why, fmt.Sprintf("voter %s: gossip %s clock %s current %v", m.ID, m.Gossip, m.Clock, current[m.ID]))
		}
	}
	slices.Sort(st.voters)
	st.healthy = ok && len(st.voters) == 3
	if len(st.voters) != 3 {
		st.why = append(st.why, fmt.Sprintf("%d voters %v", len(st.voters), st.voters))
	}
}

// waitHealthy polls look (every 250 ms) until the cluster is healthy or
// timeout passes; seen, if set, gets every look.
func (sc *superCluster) waitHealthy(timeout time.Duration, seen func(clusterState)) error {
	deadline := time.Now().Add(timeout)
	for {
		st := sc.look()
		if seen != nil {
			seen(st)
		}
		if st.healthy {
			return nil
		}
		for _, name := range clusterNames {
			if sc.nodes[name].isHeld() {
				return fmt.Errorf("%s is down and its supervisor does not restart it (exit statuses %v)", name, sc.nodes[name].exitCodes())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not healthy after %v:\n%s", timeout, strings.Join(st.why, "\n"))
		}
		time.Sleep(250 * time.Millisecond) // a health poll with a deadline
	}
}

// members is the leader's view of the configuration, for a report.
func (sc *superCluster) members() []wire.Member {
	for _, name := range clusterNames {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ms, err := sc.cl[name].Members(ctx)
		cancel()
		if err == nil {
			return ms.Members
		}
	}
	return nil
}
