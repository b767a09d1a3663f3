package node

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/internal/clustertest/faultnet"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
	"github.com/tckclk/tckclk/node/consensus"
)

// gossipSecret is the test clusters' gossip key (16 bytes, base64).
var gossipSecret = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))

// testCluster is N cluster nodes on loopback in this process, each with
// its own manual clock and clock agent.
//
// Most cluster tests call t.Parallel: they wait far more than they compute
// (about half a core each under -race), and one after another the
// package's run went past go test's 10-minute default. The ones that
// measure timing stay sequential, so no other test of the package runs
// beside them: crash failover, the failover gap, the liveness thresholds,
// the 10-node roles, and the graceful stop's in-flight writes.
type testCluster struct {
	t     *testing.T
	names []string
	keys  map[string]ed25519.PrivateKey
	trust map[string]string
	nodes map[string]*clusterMember
	// beforeStart, if set, edits each node's Deps and test hooks before it
	// starts.
	beforeStart func(*Deps, *testHooks)
	// meshNet and gossipNet, if set, carry every node's mesh streams
	// (Raft, forwarding) and gossip (packets and streams), so a test can
	// cut, delay and drop traffic between nodes by name; separate nets let
	// a test fault one without the other (see cluster_faults_test.go).
	meshNet, gossipNet *faultnet.Net
	// window is the bootstrap stability window (0: 300 ms).
	window time.Duration
	// slow: Raft and gossip timeouts four times longer, so that 7 or 10
	// nodes on two shared cores keep a leader. Under -race every cluster
	// runs with longer timeouts unless production is set (scaled).
	slow bool
	// production keeps the production Raft and gossip timing under -race
	// too: for the tests that measure it (a timing assertion, a failover
	// gap); their waits must then ride out a leader change.
	production bool
	// logTo, if set, receives every node's log lines too (each carries
	// node=NAME).
	logTo io.Writer
	// edit, if set, edits every node's config before startWith's own edit.
	edit func(*Config)
	// timing, if set, is every node's Raft timing (slow or not).
	timing *consensus.Timing
}

type clusterMember struct {
	an     *agentNode
	tn     *testNode
	node   chan *server
	gossip chan string
	n      *server
}

// probeFireWait bounds a cluster test's wait for a node's probe loop to
// take a tick: the loop takes none while a round runs, and under -race
// at load 12 a tenth node's round took 5 s (its in-process agent starved).
const probeFireWait = 30 * time.Second

// clusterSeq numbers the test clusters of the process.
var clusterSeq atomic.Uint32

// newTestCluster gives each name an identity key of its own, unique to
// this cluster too: clusters of parallel tests share the gossip key, and
// a node still dialing a stopped peer's address could reach another
// test's node that took the freed port; with keys no other cluster
// trusts, gossip and the mesh refuse it.
func newTestCluster(t *testing.T, names ...string) *testCluster {
	tc := &testCluster{t: t, names: names, keys: map[string]ed25519.PrivateKey{}, trust: map[string]string{}, nodes: map[string]*clusterMember{}}
	seq := clusterSeq.Add(1)
	for i, name := range names {
		seed := bytes.Repeat([]byte{byte(i + 1)}, ed25519.SeedSize)
		binary.BigEndian.PutUint32(seed, seq)
		k := ed25519.NewKeyFromSeed(seed)
		tc.keys[name] = k
		tc.trust[name] = base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
	}
	return tc
}

// start starts name joining the gossip at join ("" for none) and waits
// until its clock_check passed and gossip runs.
func (tc *testCluster) start(name, join string, expect int) *clusterMember {
	tc.t.Helper()
	return tc.startWith(name, join, expect, nil)
}

// startWith is start with a config edit applied last.
func (tc *testCluster) startWith(name, join string, expect int, edit func(*Config)) *clusterMember {
	t := tc.t
	t.Helper()
	cm := &clusterMember{node: make(chan *server, 1), gossip: make(chan string, 1)}
	cm.an = newAgentNode(t, t.TempDir(), []byte(clockSecret), func(c *Config) {
		c.Cluster.Enabled = true
		c.Cluster.Name = name
		c.Cluster.Membership.BindAddr = "127.0.0.1"
		c.Cluster.Membership.BindPort = 0
		c.Cluster.Membership.JoinAddrs = join
		c.Cluster.Membership.SecretKey = cluster.SecretString(gossipSecret)
		c.Cluster.Internode.IdentityKey = cluster.SecretString(base64.StdEncoding.EncodeToString(tc.keys[name].Seed()))
		c.Cluster.Internode.TrustedPeerKeys = tc.trust
		c.Cluster.Raft.BootstrapExpect = expect
		c.Cluster.Raft.ReconcileDebounce = 100 * time.Millisecond
		if tc.scaled() {
			if rt := tc.raftTiming(); rt != nil && tc.timing == nil { // in the heartbeat timeout's scale
				c.Cluster.Raft.CrashDetectMs = uint64(cluster.DefaultCrashDetectMs * rt.Heartbeat / consensus.ClusterTiming().Heartbeat)
			}
			// The agent answers from this process: a starved one left
			// every exchange of a burst past the 500 ms default (a tenth
			// node FAILED its clock_check, reason timeout). The widest
			// probe timeout the interval allows; rtt is virtual time.
			c.Clock.ProbeTimeoutMs = c.Clock.ProbeIntervalMs
		}
		if tc.edit != nil {
			tc.edit(c)
		}
		if edit != nil {
			edit(c)
		}
	})
	cm.an.hooks.built = func(n *server) { cm.node <- n }
	// memberlist's own goroutines may log a moment after Shutdown returns.
	gl := &guardedLog{t: t}
	t.Cleanup(gl.stop)
	var lw io.Writer = gl
	if tc.logTo != nil {
		lw = io.MultiWriter(gl, tc.logTo)
	}
	cm.an.deps.Logger = slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
	cm.an.hooks.cluster = &cluster.Tuning{
		Mesh: func(c *mesh.Config) {
			if c.BindPort == 0 { // cluster.internode.bind_port unset: not the 7950–7959 range
				c.BindPort = mesh.EphemeralPort
			}
			if fn := tc.meshNet; fn != nil {
				c.Dial = fn.Dialer(name, nil)
				c.WrapListener = func(ln net.Listener) net.Listener { return fn.Listener(name, ln) }
			}
		},
		Membership: func(c *membership.Config) {
			if tc.gossipNet != nil {
				tc.gossipTransport(name, c, gl)
			}
			c.JoinBackoffMin, c.JoinBackoffMax, c.RejoinInterval = 50*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
			c.Timing = membership.Timing{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 80 * time.Millisecond, SuspicionMult: 2,
				GossipInterval: 50 * time.Millisecond, PushPullInterval: 300 * time.Millisecond, TCPTimeout: 500 * time.Millisecond,
				DeadNodeReclaimTime: 200 * time.Millisecond}
			if tc.scaled() {
				c.Timing.ProbeInterval, c.Timing.ProbeTimeout, c.Timing.SuspicionMult = 400*time.Millisecond, 320*time.Millisecond, 3
				c.Timing.GossipInterval, c.Timing.PushPullInterval, c.Timing.TCPTimeout = 100*time.Millisecond, time.Second, 2*time.Second
			}
		},
		Started:   func(addr string) { cm.gossip <- addr },
		Timing:    tc.raftTiming(),
		Window:    cmp.Or(tc.window, 300*time.Millisecond),
		StableFor: 300 * time.Millisecond,
	}
	if tc.beforeStart != nil {
		tc.beforeStart(&cm.an.deps, &cm.an.hooks)
	}
	var err error
	cm.tn, err = tryStartHooks(t, cm.an.cfg, cm.an.deps, cm.an.hooks, false)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case cm.n = <-cm.node:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not built", name)
	}
	for range 2 { // the first probe runs at once; clock_check needs 3
		if !cm.an.ts.Fire("probe", probeFireWait) {
			t.Fatalf("%s: probe ticker not taken", name)
		}
	}
	select {
	case <-cm.gossip:
	case err := <-cm.tn.done:
		t.Fatalf("%s stopped during start-up: %v", name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: gossip did not start", name)
	}
	tc.nodes[name] = cm
	// Registered after the node's own stop, so it runs first: the last
	// one registered stops every node of the cluster at once (a cluster
	// node's graceful stop hands off and drains for about half a second;
	// one after another they took two of a three-node test's six seconds).
	t.Cleanup(tc.stopAll)
	return cm
}

// stopAll stops every node of tc at once and waits for them (a node
// stopped already is left as it is).
func (tc *testCluster) stopAll() {
	var wg sync.WaitGroup
	for _, cm := range tc.nodes {
		if cm != nil && cm.tn != nil { // a test may leave a name's slot empty
			wg.Go(func() { _ = cm.tn.stop() })
		}
	}
	wg.Wait()
}

// gossipTransport gives name's gossip a memberlist transport on an
// ephemeral loopback port, registered in tc.gossipNet and wrapped by it.
// It runs on the node's start path: a failure is reported with t.Error and
// leaves memberlist's own transport.
func (tc *testCluster) gossipTransport(name string, c *membership.Config, gl *guardedLog) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"}, Logger: log.New(gl, "gossip transport: ", 0),
	})
	if err != nil {
		tc.t.Errorf("%s: gossip transport: %v", name, err)
		return
	}
	tc.t.Cleanup(func() { _ = nt.Shutdown() }) // memberlist shuts it down too; a failed start does not
	port := nt.GetAutoBindPort()
	tc.gossipNet.Register(name, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	c.Transport = tc.gossipNet.Transport(name, nt)
	c.AdvertiseAddr, c.AdvertisePort = "127.0.0.1", port
}

// raftTiming is the nodes' Raft timeouts (nil: the production ones). A
// slow cluster's are four times longer. Under -race the leader lease is
// four times longer (the production 250 ms lease is what stepped leaders
// down mid-test, at load 15–33) and the heartbeat and election timeouts
// twice (the lease may not exceed the heartbeat timeout): a follower
// stands after 1–2 s of silence, and a new cluster's first election, which
// waits as long, costs 1–2 s of every formation rather than 2–4 s.
func (tc *testCluster) raftTiming() *consensus.Timing {
	if tc.timing != nil {
		return tc.timing
	}
	t := consensus.ClusterTiming()
	switch {
	case tc.slow:
		t.Heartbeat, t.Election, t.LeaderLease = 4*t.Heartbeat, 4*t.Election, 4*t.LeaderLease
	case tc.scaled():
		t.Heartbeat, t.Election, t.LeaderLease = 2*t.Heartbeat, 2*t.Election, 4*t.LeaderLease
	default:
		return nil
	}
	return &t
}

// scaled: the nodes run with longer timeouts (raftTiming, slower gossip
// probes, crash_detect_ms in proportion to the heartbeat timeout, a
// longer clock probe timeout) — asked for (slow), or under -race (the
// race detector slows the nodes five to ten times, on two shared cores)
// unless the test keeps the production timing.
func (tc *testCluster) scaled() bool {
	return tc.slow || raceEnabled && !tc.production
}

// gossipAddr is name's gossip address (known once start returned).
func (cm *clusterMember) gossipAddr() string { return clusterOf(cm.n).Membership().LocalAddr() }

// leaders lists the nodes whose status says they lead.
func (tc *testCluster) leaders() []string {
	var out []string
	for _, name := range tc.names {
		cm := tc.nodes[name]
		if cm == nil {
			continue
		}
		st, err := cm.tn.c.Status(bg)
		if err == nil && st.Role == "leader" && st.Ready {
			out = append(out, name)
		}
	}
	return out
}

// SPEC §5 "Bootstrap", §4.1: three nodes with bootstrap_expect 3 form one
// cluster with exactly one leader and three voters; a grant through a
// follower is forwarded, stamped and committed by the leader, and the
// leader reads it back with the same token; a follower reads it too.
func TestClusterThreeNodesForm(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	if got := lc.n.countMembers(raft.Voter); got != 3 {
		t.Fatalf("voters = %d, want 3", got)
	}
	var follower *clusterMember
	for _, name := range tc.names {
		if name != leader {
			follower = tc.nodes[name]
			st, err := follower.tn.c.Status(bg)
			if err != nil || st.Mode != "cluster" || st.Leader != leader || st.Role != "follower" {
				t.Fatalf("%s status: %+v, %v (want a follower of %s)", name, st, err, leader)
			}
		}
	}
	waitFor(t, "the follower knows the leader", 10*time.Second, func() bool {
		_, ok := follower.n.mode.route()
		return ok
	})
	g, err := follower.tn.c.Grant(bg, "job", "worker-1", 30)
	if err != nil {
		t.Fatalf("grant through a follower: %v", err)
	}
	// The leader stamped it with its own (manual) clock.
	wantValid := uint64(lc.an.clk.Now().UnixMilli()) + 30_000
	if g.Token == 0 || g.Holder != "worker-1" || g.ConservativeValidBeforeUnixMs != wantValid {
		t.Fatalf("grant through a follower = %+v, want token > 0 and valid before %d (the leader's clock)", g.Grant, wantValid)
	}
	got, err := lc.tn.c.Get(bg, "job")
	if err != nil || got.Token != g.Token || got.Holder != "worker-1" {
		t.Fatalf("leader reads %+v, %v; want token %d", got, err, g.Token)
	}
	fg, err := follower.tn.c.Get(bg, "job")
	if err != nil || fg.Token != g.Token {
		t.Fatalf("follower reads %+v, %v; want token %d", fg, err, g.Token)
	}
	// A conflicting grant through the follower is the leader's 409 held.
	if _, err := follower.tn.c.Grant(bg, "job", "worker-2", 30); err == nil || !strings.Contains(err.Error(), "held") {
		t.Fatalf("second grant through a follower: %v, want held", err)
	}
	list, err := follower.tn.c.List(bg, "", 10)
	if err != nil || len(list.Tickets) != 1 {
		t.Fatalf("list through a follower: %+v, %v", list, err)
	}
	// The follower's answers name the leader it forwarded to; the
	// leader's name none (wire.LeaderHeader).
	for _, at := range []struct {
		cm   *clusterMember
		want string
	}{{follower, leader}, {lc, ""}} {
		resp, err := http.Post(at.cm.tn.url+"/v1/tickets/hint/grant", "application/json", strings.NewReader(`{"holder":"h","lease_s":5}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get(wire.LeaderHeader); resp.StatusCode != http.StatusOK || got != at.want {
			t.Errorf("grant at %s: %d, %s %q, want 200 and %q", at.cm.tn.url, resp.StatusCode, wire.LeaderHeader, got, at.want)
		}
	}
	// So a client listing the follower first settles on the leader after
	// one forwarded op (SPEC §4.1: the address that served it).
	mc, err := client.New(follower.tn.url+","+lc.tn.url, client.WithFailover(0))
	if err != nil {
		t.Fatal(err)
	}
	before := [2]int{grantsAnswered(t, follower.tn.url), grantsAnswered(t, lc.tn.url)}
	for range 4 {
		if _, err := mc.Grant(bg, "hint", "h", 5); err != nil {
			t.Fatal(err)
		}
	}
	if f, l := grantsAnswered(t, follower.tn.url)-before[0], grantsAnswered(t, lc.tn.url)-before[1]; f != 1 || l != 3 {
		t.Errorf("4 grants by a client listing the follower first: the follower answered %d, the leader %d; want 1 and 3", f, l)
	}
}

// grantsAnswered is the grants a node's API answered (its /metrics'
// ticket_ops_total{op="grant"} summed over results).
func grantsAnswered(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for l := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, `ticket_ops_total{op="grant",`); ok {
			_, v, _ := strings.Cut(rest, "} ")
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("/metrics line %q: %v", l, err)
			}
			sum += n
		}
	}
	return sum
}

// SPEC §5 "Bootstrap": two nodes that each expect three see each other in
// gossip and still do not bootstrap: no Raft configuration, no leader.
func TestClusterTwoOfThreeDoNotBootstrap(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "a", "b", "c")
	a := tc.start("a", "", 3)
	b := tc.start("b", a.gossipAddr(), 3)
	waitFor(t, "a and b see each other", 10*time.Second, func() bool {
		return aliveCount(a.n) == 2 && aliveCount(b.n) == 2
	})
	// Bounded observation: several election timeouts, the view stable.
	deadline := time.Now().Add(3 * consensusElection())
	for time.Now().Before(deadline) {
		for _, cm := range []*clusterMember{a, b} {
			st, err := cm.tn.c.Status(bg)
			if err != nil {
				t.Fatal(err)
			}
			if st.Role == "leader" || st.Leader != "" || st.Ready {
				t.Fatalf("%s: %+v: two of three bootstrapped", st.NodeID, st)
			}
			if s, err := cm.n.cons.Load().Servers(); err != nil || len(s) != 0 {
				t.Fatalf("%s has a Raft configuration %v (%v)", st.NodeID, s, err)
			}
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a bounded observation
	}
}

func aliveCount(n *server) int {
	c := 0
	for _, m := range clusterOf(n).Membership().Members() {
		if m.State == membership.StateAlive {
			c++
		}
	}
	return c
}

func consensusElection() time.Duration { return 1 * time.Second }

// SPEC §3, §5: a cluster node without a clock agent refuses to start,
// naming clock.agent_addr (a conflicting bootstrap_expect never
// bootstraps: node/cluster TestBootstrapServersRefusals).
func TestClusterConfigRefusals(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Cluster.Enabled = true
	cfg.Normalize()
	var ce *config.Error
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Path != "clock.agent_addr" {
		t.Fatalf("cluster without an agent: %v", err)
	}
}

// guardedLog is t.Log until the test's cleanups run, then discards.
type guardedLog struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (g *guardedLog) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		g.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (g *guardedLog) stop() {
	g.mu.Lock()
	g.done = true
	g.mu.Unlock()
}
