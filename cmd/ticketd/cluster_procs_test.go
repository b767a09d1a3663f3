package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
)

// Real-process cluster tests (issue 11 items 8 and 9): the configs come
// from deploy/cluster-keys.sh, the very script the README walks through.

const clusterKeysScript = "../../deploy/cluster-keys.sh"

var clusterNames = []string{"node-1", "node-2", "node-3"}

// runClusterKeys runs deploy/cluster-keys.sh into a new directory and
// returns it; it skips the test when openssl is absent.
func runClusterKeys(t *testing.T, apiPorts, gossipPorts []int, agentAddr string) string {
	t.Helper()
	return runClusterKeysFor(t, clusterNames, apiPorts, gossipPorts, agentAddr)
}

// runClusterKeysFor is runClusterKeys for the nodes names.
func runClusterKeysFor(t *testing.T, names []string, apiPorts, gossipPorts []int, agentAddr string) string {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not on PATH: deploy/cluster-keys.sh needs it")
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	cmd := exec.Command("sh", append([]string{clusterKeysScript, dir}, names...)...)
	cmd.Env = append(childEnv(), "TCKCLK_API_PORTS="+clustertest.JoinPorts(apiPorts), "TCKCLK_GOSSIP_PORTS="+clustertest.JoinPorts(gossipPorts), "TCKCLK_AGENT_ADDR="+agentAddr)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cluster-keys.sh: %v\n%s", err, out)
	}
	return dir
}

// SPEC §5, §6, §1.4: the script writes the gossip key, the clock secret,
// one ed25519 identity per node and one config per node, every file 0600;
// each config is valid (--print-config exits 0), its identity loads and
// matches its own trust-map entry, the gossip key is 32 bytes, each node
// joins the other two, and the ports are the ones asked for. It refuses to
// overwrite existing keys and refuses bad node names.
func TestClusterKeysScript(t *testing.T) {
	apiPorts, gossipPorts := []int{17981, 17982, 17983}, []int{17946, 17947, 17948}
	dir := runClusterKeys(t, apiPorts, gossipPorts, "127.0.0.1:17970")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if e.IsDir() {
			want = os.ModeDir | 0o700
		}
		if info.Mode() != want {
			t.Errorf("%s: mode %v, want %v", e.Name(), info.Mode(), want)
		}
		if !e.IsDir() {
			files++
		}
	}
	if files != 3+2*len(clusterNames) {
		t.Errorf("%d files in %s, want gossip.key, clock.secret, trust.yaml and a key and a config per node", files, dir)
	}
	secret, err := membership.LoadSecret("", filepath.Join(dir, "gossip.key"))
	if err != nil || len(secret) != 32 {
		t.Fatalf("gossip.key: %d bytes, %v; want 32 (openssl rand -base64 32)", len(secret), err)
	}
	for i, name := range clusterNames {
		path := filepath.Join(dir, name+".yaml")
		code, out, errs := runCmd(t, "--config", path, "--print-config")
		if code != 0 {
			t.Fatalf("%s: --print-config exit %d: %s", path, code, errs)
		}
		if strings.Contains(out, "[redacted]") {
			t.Errorf("%s: an inline secret in the generated config:\n%s", path, out)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := node.ParseConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.Cluster
		if !c.Enabled || c.Name != name || c.Raft.BootstrapExpect != len(clusterNames) || !cfg.Clock.DevReference ||
			cfg.Clock.AgentAddr != "127.0.0.1:17970" || c.Membership.BindPort != gossipPorts[i] ||
			cfg.API.Addr != fmt.Sprintf("127.0.0.1:%d", apiPorts[i]) || c.Raft.DataDir != filepath.Join(dir, name, "data") {
			t.Errorf("%s: unexpected config %+v api %s clock %s", path, c, cfg.API.Addr, cfg.Clock.AgentAddr)
		}
		join, err := membership.ParseJoinAddrs(c.Membership.JoinAddrs)
		if err != nil || len(join) != len(clusterNames)-1 || strings.Contains(c.Membership.JoinAddrs, strconv.Itoa(gossipPorts[i])) {
			t.Errorf("%s: join_addrs %q (%v): want the other nodes' gossip ports", path, c.Membership.JoinAddrs, err)
		}
		key, err := identity.Load("", c.Internode.IdentityKeyFile)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := identity.NewStore(name, key.Public().(ed25519.PublicKey), c.Internode.TrustedPeerKeys); err != nil {
			t.Fatalf("%s: trust map: %v", name, err)
		}
		if len(c.Internode.TrustedPeerKeys) != len(clusterNames) {
			t.Errorf("%s: trust map has %d entries", name, len(c.Internode.TrustedPeerKeys))
		}
	}

	again := exec.Command("sh", clusterKeysScript, dir, "node-9")
	if out, err := again.CombinedOutput(); err == nil || !strings.Contains(string(out), "refusing to overwrite") {
		t.Errorf("a second run over existing keys: %v\n%s", err, out)
	}
	bad := exec.Command("sh", clusterKeysScript, filepath.Join(t.TempDir(), "x"), "node 1")
	if out, err := bad.CombinedOutput(); exitStatus(err) != 2 || !strings.Contains(string(out), "node name") {
		t.Errorf("a node name with a space: %v\n%s", err, out)
	}
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// procCluster is three ticketd processes of one cluster and the agent.
type procCluster struct {
	t         *testing.T
	dir       string
	agentAddr string
	procs     map[string]*proc
}

// procClockFlags widen the clock limits for a host shared by many test
// runs: at the default Δ 500 ms, max_rtt_ms is 125, the probe timeout
// 500 ms and staleness 3 s, and one agent exchange delayed by a busy
// scheduler fails the node (SPEC §3.3; seen here under -race with other
// builds running, load average 19 on 2 cores). Δ 12 s makes the max_*
// limits 3 s; probes every 3 s with a 3 s timeout, stale after 30 s. The clock rules themselves are
// tested at their defaults elsewhere; the cluster behaviour under test does
// not depend on them.
var procClockFlags = []string{"--clock.delta_ms", "12000", "--clock.probe_interval_ms", "3000",
	"--clock.probe_timeout_ms", "3000", "--clock.staleness_ms", "30000"}

// start runs name from its generated config (the API on a free port, the
// agent's address as a flag: the agent picked its own port) plus extra.
func (pc *procCluster) start(name string, extra ...string) *proc {
	pc.t.Helper()
	args := append([]string{"--config", filepath.Join(pc.dir, name+".yaml"), "--http", "127.0.0.1:0", "--clock.agent_addr", pc.agentAddr}, procClockFlags...)
	args = append(args, extra...)
	p, ok := startProc(pc.t, args...)
	if !ok {
		pc.t.Fatalf("%s exited before listening: %v\n%s", name, <-p.done, p.logText())
	}
	pc.procs[name] = p
	return p
}

// waitLeader polls /v1/status on the named nodes (every 50 ms) until one
// is leader and ready and every other one names it as its leader.
func (pc *procCluster) waitLeader(timeout time.Duration, names ...string) string {
	pc.t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	for {
		leader, agreed := "", true
		last = last[:0]
		for _, name := range names {
			st, err := pc.status(name)
			if err != nil {
				agreed = false
				last = append(last, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			last = append(last, fmt.Sprintf("%s: role %s leader %q ready %v stage %s", name, st.Role, st.Leader, st.Ready, st.Stage))
			if st.Role == "leader" && st.Ready {
				leader = name
			}
			if leader != "" && st.Leader != leader || st.Leader == "" {
				agreed = false
			}
		}
		if agreed && leader != "" {
			for _, name := range names { // a second pass: the followers named this leader
				if st, err := pc.status(name); err != nil || st.Leader != leader {
					agreed = false
				}
			}
			if agreed {
				return leader
			}
		}
		if time.Now().After(deadline) {
			pc.t.Fatalf("no agreed leader among %v after %v:\n%s", names, timeout, strings.Join(last, "\n"))
		}
		time.Sleep(50 * time.Millisecond) // status poll with a deadline
	}
}

func (pc *procCluster) status(name string) (*wire.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return pc.procs[name].c.Status(ctx)
}

// grantVia grants ticket through name, retrying transient unavailability
// (a follower forwarding to a leader that just died) until the deadline.
func (pc *procCluster) grantVia(name, ticket string, timeout time.Duration) wire.Grant {
	pc.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		g, err := pc.procs[name].c.Grant(ctx, ticket, "holder-via-"+name, 200)
		cancel()
		if err == nil {
			return g.Grant
		}
		if time.Now().After(deadline) {
			pc.t.Fatalf("grant %s through %s: %v", ticket, name, err)
		}
		time.Sleep(50 * time.Millisecond) // retry with a deadline
	}
}

// SPEC §5, §4 (issue 11 item 8): three real ticketd processes from
// deploy/cluster-keys.sh's configs against one `tckclk-agent --dev` form
// with bootstrap_expect 3; a grant through every node (followers forward)
// is acknowledged; kill -9 of the leader elects a new leader among the
// other two, grants resume through both survivors, and every acknowledged
// ticket is still there with the same holder, token and expiries (none
// lost, none extended). The killed node, restarted on new API and gossip
// ports, rejoins and names the new leader.
func TestThreeProcessClusterKill9Leader(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four real processes")
	}
	gossip := clustertest.Ports(t, len(clusterNames)+2) // the last two for the restart
	meshPort := gossip[len(clusterNames)+1]
	dir := runClusterKeys(t, clustertest.Ports(t, len(clusterNames)), gossip[:len(clusterNames)], "127.0.0.1:1")
	pc := &procCluster{t: t, dir: dir, agentAddr: startDevAgent(t, filepath.Join(dir, "clock.secret")), procs: map[string]*proc{}}
	for _, name := range clusterNames {
		pc.start(name)
	}
	leader := pc.waitLeader(30*time.Second, clusterNames...)
	t.Logf("leader %s", leader)

	acked := map[string]wire.Ticket{}
	record := func(g wire.Grant) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := pc.procs[leader].c.Get(ctx, g.Name)
		if err != nil || got.Token != g.Token || got.Holder != g.Holder || got.ConservativeValidBeforeUnixMs != g.ConservativeValidBeforeUnixMs {
			t.Fatalf("read back %s through %s: %+v %v; granted %+v", g.Name, leader, got, err, g)
		}
		acked[g.Name] = *got
	}
	for _, name := range clusterNames {
		for i := range 3 {
			record(pc.grantVia(name, fmt.Sprintf("before-%s-%d", name, i), 10*time.Second))
		}
	}

	// Load through every node while the leader is killed: each grant
	// acknowledged by any node must survive.
	load := pc.startLoad()
	load.waitAcked(t, 30, 30*time.Second)
	old := pc.procs[leader]
	if err := old.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	err := <-old.done
	old.done <- err
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("the leader did not die by signal: %v", err)
	}
	killed := time.Now()
	var survivors []string
	for _, name := range clusterNames {
		if name != leader {
			survivors = append(survivors, name)
		}
	}
	newLeader := pc.waitLeader(20*time.Second, survivors...)
	t.Logf("kill -9 %s: %s leads after %v", leader, newLeader, time.Since(killed).Round(time.Millisecond))
	if newLeader == leader {
		t.Fatalf("the killed node %s still leads", leader)
	}
	oldLeader := leader
	leader = newLeader
	for _, name := range survivors {
		for i := range 2 {
			record(pc.grantVia(name, fmt.Sprintf("after-%s-%d", name, i), 10*time.Second))
		}
	}
	n := load.stop()
	pc.checkTickets(acked, survivors...)
	load.check(t, pc, acked, survivors...)
	t.Logf("%d grants acknowledged under load across the kill, all intact", n)

	// Restart the killed node on new gossip, mesh and API ports: the
	// leader can reach it only at the mesh address it advertises in gossip
	// under its new gossip address, so following the leader means it
	// rejoined (once gossip has declared its old address dead and the name
	// may be reclaimed).
	pc.start(oldLeader, "--cluster.membership.bind_port", strconv.Itoa(gossip[len(clusterNames)]),
		"--cluster.internode.bind_port", strconv.Itoa(meshPort))
	restarted := time.Now()
	if got := pc.waitLeader(90*time.Second, clusterNames...); got != leader { // memberlist reclaims a dead name after 30 s
		t.Fatalf("after the restart %s leads, want %s", got, leader)
	}
	t.Logf("%s restarted on gossip port %d, mesh port %d: follows %s after %v", oldLeader, gossip[len(clusterNames)], meshPort, leader, time.Since(restarted).Round(time.Millisecond))
	record(pc.grantVia(oldLeader, "after-restart", 10*time.Second))
	pc.checkTickets(acked, clusterNames...)
	load.check(t, pc, acked, oldLeader)
	t.Logf("%d acknowledged tickets intact on every node", len(acked))
}

// checkTickets reads every acknowledged ticket through each named node and
// fails unless holder, token and both expiries are what was acknowledged.
func (pc *procCluster) checkTickets(acked map[string]wire.Ticket, names ...string) {
	pc.t.Helper()
	for _, via := range names {
		for name, want := range acked {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			got, err := pc.procs[via].c.Get(ctx, name)
			cancel()
			if errors.Is(err, client.ErrNotFound) {
				pc.t.Fatalf("%s through %s: acknowledged ticket lost", name, via)
			}
			if err != nil {
				pc.t.Fatalf("%s through %s: cannot read the acknowledged ticket: %v", name, via, err)
			}
			if *got != want {
				pc.t.Fatalf("%s through %s: %+v, acknowledged %+v (changed or extended)", name, via, *got, want)
			}
		}
	}
}

// SPEC §5, §6: the example deploy/ticketd/cluster-node.yaml validates
// (--print-config exits 0) and is a cluster node with bootstrap_expect 3.
func TestClusterNodeExample(t *testing.T) {
	const path = "../../deploy/ticketd/cluster-node.yaml"
	code, out, errs := runCmd(t, "--config", path, "--print-config")
	// The example reads its secrets from systemd credentials
	// (/run/credentials/ticketd.service/…), which exist only under the
	// unit: --print-config, which loads them as the start does, may say
	// exactly that and nothing else.
	first, _, _ := strings.Cut(out, "\n")
	hostOnly := code == 2 && strings.HasPrefix(first, "# NOT STARTABLE: ") && strings.Contains(first, "/run/credentials/ticketd.service/") &&
		strings.HasSuffix(first, "no such file or directory")
	if code != 0 && !hostOnly {
		t.Fatalf("%s: --print-config exit %d: %s", path, code, errs)
	}
	for _, want := range []string{"enabled: true", "bootstrap_expect: 3", "identity_key_file: /run/credentials/ticketd.service/identity.key", "agent_addr: 127.0.0.1:7970"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: effective config lacks %q:\n%s", path, want, out)
		}
	}
}

// clusterLoad grants through every node of a procCluster concurrently,
// recording each acknowledged grant and, when it could read it back, the
// ticket as that node read it.
type clusterLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	acked  map[string]*loadAck
	kick   chan struct{} // a value after each acknowledgement, for waitAcked
}

type loadAck struct {
	grant wire.Grant
	read  *wire.Ticket // nil: not read back
}

func (pc *procCluster) startLoad() *clusterLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &clusterLoad{cancel: cancel, acked: map[string]*loadAck{}, kick: make(chan struct{}, 1)}
	for _, name := range clusterNames {
		c := pc.procs[name].c
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				ticket := fmt.Sprintf("load-%s-%04d", name, i)
				rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
				g, err := c.Grant(rctx, ticket, "load-via-"+name, 200)
				if err != nil {
					rcancel()
					select { // the node is down or has no leader yet: back off
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				a := &loadAck{grant: g.Grant}
				l.mu.Lock()
				l.acked[ticket] = a
				l.mu.Unlock()
				select {
				case l.kick <- struct{}{}:
				default:
				}
				if got, err := c.Get(rctx, ticket); err == nil {
					l.mu.Lock()
					a.read = got
					l.mu.Unlock()
				}
				rcancel()
			}
		}()
	}
	return l
}

// waitAcked waits until at least n grants are acknowledged.
func (l *clusterLoad) waitAcked(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		got := len(l.acked)
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-l.kick:
		case <-deadline:
			t.Fatalf("only %d grants acknowledged under load in %v", got, timeout)
		}
	}
}

// stop ends the load and returns how many grants were acknowledged.
func (l *clusterLoad) stop() int {
	l.cancel()
	l.wg.Wait()
	return len(l.acked)
}

// check reads every grant acknowledged under load through each named node:
// holder, token and conservative expiry are as acknowledged, and the whole
// ticket is as read back before (not extended). Tokens of all acknowledged
// grants, these and the ones in acked, are distinct.
func (l *clusterLoad) check(t *testing.T, pc *procCluster, acked map[string]wire.Ticket, names ...string) {
	t.Helper()
	tokens := map[uint64]string{}
	for name, a := range acked {
		tokens[a.Token] = name
	}
	for name, a := range l.acked {
		if other, dup := tokens[a.grant.Token]; dup {
			t.Fatalf("token %d acknowledged for %s and %s", a.grant.Token, other, name)
		}
		tokens[a.grant.Token] = name
	}
	for _, via := range names {
		for name, a := range l.acked {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			got, err := pc.procs[via].c.Get(ctx, name)
			cancel()
			if errors.Is(err, client.ErrNotFound) {
				t.Fatalf("%s through %s: grant acknowledged under load lost", name, via)
			}
			if err != nil {
				t.Fatalf("%s through %s: cannot read a grant acknowledged under load: %v", name, via, err)
			}
			if got.Holder != a.grant.Holder || got.Token != a.grant.Token || got.ConservativeValidBeforeUnixMs != a.grant.ConservativeValidBeforeUnixMs {
				t.Fatalf("%s through %s: %+v, acknowledged %+v", name, via, *got, a.grant)
			}
			if a.read != nil && *got != *a.read {
				t.Fatalf("%s through %s: %+v, read back before as %+v (changed or extended)", name, via, *got, *a.read)
			}
		}
	}
}
