package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node/api/client"
)

// clockFlags widen the cluster nodes' clock limits for a machine loaded by
// other work, as deploy/demo_test.go's testClockFlags do: at the default
// Δ 500 ms max_rtt_ms is 125 and one agent exchange delayed by a busy
// scheduler fails a node. The check still runs per proposal; only its
// limits are wider (the report says so). The nodes probe every second
// (testClockFlags: 3 s): a node's start waits for clock_check's three
// healthy rounds, 2 s instead of 6 s, and the run starts 15–20 nodes; an
// exchange that outlasts the 1 s timeout is tried again, and a node goes
// stale only after staleness_ms of that.
var clockFlags = []string{"--clock.delta_ms", "12000", "--clock.probe_interval_ms", "1000",
	"--clock.probe_timeout_ms", "1000", "--clock.staleness_ms", "30000"}

// proc is one server process this run started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	bin  string
	args []string
	env  []string
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to 20 s, then kills.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// env is the run's temp dir, binaries and the processes it started.
type env struct {
	dir, bin, repo string
	etcd           string
	baselineBin    string     // -baseline-repo's ticketd
	mu             sync.Mutex // procs: the load servers start concurrently
	procs          []*proc
}

func (e *env) start(name string, extraEnv []string, bin string, args ...string) (*proc, error) {
	p, err := e.spawn(name, extraEnv, bin, args)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

// restart starts p again with the same command line (after it was
// killed), appending to its log; p is updated in place.
func (e *env) restart(p *proc) error {
	<-p.done
	q, err := e.spawn(p.name, p.env, p.bin, p.args)
	if err != nil {
		return err
	}
	*p = *q
	return nil
}

func (e *env) spawn(name string, extraEnv []string, bin string, args []string) (*proc, error) {
	logPath := filepath.Join(e.dir, "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), extraEnv...)
	// A bench (or its test) killed before its cleanup leaves no node or
	// agent running on (as cmd/ticketd's process tests).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{}), bin: bin, args: args, env: extraEnv}
	done := p.done
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return p, nil
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stopAll ends every process (stopFrom 0).
func (e *env) stopAll() { e.stopFrom(0) }

// stopFrom ends the processes started since e.procs had k of them and
// forgets them: a section's cluster, done with. They are killed, all at
// once: nothing of them is read afterwards but their logs, and a graceful
// stop of a whole cluster only waits — each leader hands off to peers
// that are stopping too (one at a time, 1.5–2.7 s a ticketd cluster, up
// to 7 s an etcd one whose leader's link was down). A graceful stop
// that is measured is proc.stop (the scale section's restart).
func (e *env) stopFrom(k int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range e.procs[k:] {
		wg.Go(p.kill)
	}
	wg.Wait()
	e.procs = e.procs[:k]
}

// buildAll compiles ticketd and the agent from the repository root and,
// when baselineRepo is set, that checkout's ticketd (as baseline/), the
// two builds at once.
func (e *env) buildAll(baselineRepo string) error {
	var baseErr error
	var wg sync.WaitGroup
	if baselineRepo != "" {
		wg.Go(func() { e.baselineBin, baseErr = e.buildTicketd(baselineRepo, "baseline") })
	}
	err := e.build()
	wg.Wait()
	return errors.Join(err, baseErr)
}

// build compiles ticketd and the agent from the repository root.
func (e *env) build() error {
	cmd := exec.Command("go", "build", "-o", e.bin+"/", "./cmd/ticketd", "./cmd/tckclk-agent")
	cmd.Dir = e.repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// buildTicketd compiles ticketd from repo into the run's bin/NAME/ and
// returns the binary's path.
func (e *env) buildTicketd(repo, name string) (string, error) {
	dir := filepath.Join(e.bin, name)
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/ticketd")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %v\n%s", repo, err, out)
	}
	return filepath.Join(dir, "ticketd"), nil
}

// server is one system under test: its processes and the endpoint the
// load goes to (the leader's).
type server struct {
	label      string // "etcd ×3"
	system     string // etcd or ticketd
	nodes      int
	procs      []*proc
	endpoint   string   // ticketd: URL; etcd: HOST:PORT
	leader     int      // index in procs of the leader
	pprof      []string // ticketd with -profile: each node's pprof HOST:PORT
	h2c        bool     // its clients speak h2c (-h2c-compare)
	coalesce   int      // ticketd: batches in flight of its coalescing client (0: one request per op)
	placement  string   // 3 nodes: "spread" (clients over every node) or "leader"; "" one node
	dup        bool     // a second client mode on another target's processes (no failover)
	addrs      []string // every node's endpoint, in procs order
	adminToken string   // ticketd cluster: for the members list
	keys       string   // ticketd cluster: its keys and configs
	prefix     string   // ticketd cluster: its clusterSpec.prefix
	spares     []spare  // ticketd cluster: NodeIds not started yet
}

// startEtcd starts an n-member etcd cluster (fsync on: etcd's default) and
// returns it with the leader's client endpoint.
func (e *env) startEtcd(ctx context.Context, n int) (*server, error) {
	return e.startEtcdHosts(ctx, fmt.Sprintf("etcd%d", n), slices.Repeat([]string{"127.0.0.1"}, n), nil)
}

// startDevAgent starts `tckclk-agent --dev` and waits for its source to
// be healthy (nodes prove their clock at start: the agent comes first).
func (e *env) startDevAgent(ctx context.Context, name, listen, httpAddr, secretFile string) error {
	agent, err := e.start(name, nil, filepath.Join(e.bin, "tckclk-agent"), "--dev", "--listen", listen,
		"--http", httpAddr, "--secret-file", secretFile)
	if err != nil {
		return err
	}
	return poll(ctx, 30*time.Second, []*proc{agent}, func() error {
		b, _ := os.ReadFile(agent.log)
		if strings.Contains(string(b), `msg="source healthy"`) {
			return nil
		}
		return errors.New("agent has no healthy source yet")
	})
}

// startTicketd starts a single node (no agent: as bench/etcd.sh) or an
// n-node cluster with a --dev agent and keys from deploy/cluster-keys.sh
// (as deploy/demo.sh), clock limits widened (clockFlags); fsync is always
// on. It returns it with the leader's URL.
func (e *env) startTicketd(ctx context.Context, n int, extra []string, profile bool) (*server, error) {
	return e.startTicketdSpec(ctx, clusterSpec{n: n, extra: extra, profile: profile})
}

// clusterSpec is what startTicketdSpec varies: the load clusters use only
// n, extra and profile; the clock-failover and tightness sections (fresh
// clusters, agents of their own) the rest.
type clusterSpec struct {
	n       int
	extra   []string
	profile bool
	prefix  string // names the keys dir, data and logs: "" for the load clusters
	// nodeAgent, when set (3 nodes), gives node i's clock agent address
	// (--clock.agent_addr) once the keys exist in keysDir; devAgent is
	// the --dev agent's address, "" with noDevAgent.
	nodeAgent  func(i int, devAgent, keysDir string) (string, error)
	noDevAgent bool
	// spare more NodeIds get keys and a config, trusted by all, started
	// later with startSpare (the scale section's new node); with spares
	// the first n bootstrap expecting n.
	spare int
	// bin is the ticketd binary ("": the one built from -repo).
	bin string
}

func (e *env) startTicketdSpec(ctx context.Context, spec clusterSpec) (*server, error) {
	n, extra, profile := spec.n, spec.extra, spec.profile
	bin := spec.bin
	if bin == "" {
		bin = filepath.Join(e.bin, "ticketd")
	}
	s := &server{label: fmt.Sprintf("ticketd ×%d", n), system: "ticketd", nodes: n}
	nodeFlags := func(i int) ([]string, error) {
		if !profile {
			return extra, nil
		}
		ports, err := clustertest.FreePorts(1)
		if err != nil {
			return nil, err
		}
		a := fmt.Sprintf("127.0.0.1:%d", ports[0])
		s.pprof = append(s.pprof, a)
		return append(slices.Clone(extra), "--debug.pprof", a), nil
	}
	var urls []string
	if n == 1 {
		ports, err := clustertest.FreePorts(1)
		if err != nil {
			return nil, err
		}
		u := fmt.Sprintf("127.0.0.1:%d", ports[0])
		more, err := nodeFlags(0)
		if err != nil {
			return nil, err
		}
		args := append([]string{"--data-dir", filepath.Join(e.dir, spec.prefix+"ticketd1"), "--http", u, "--log.level", "warn"}, more...)
		p, err := e.start(spec.prefix+"ticketd1", nil, bin, args...)
		if err != nil {
			return nil, err
		}
		s.procs, urls = []*proc{p}, []string{"http://" + u}
	} else {
		all := n + spec.spare
		ports, err := clustertest.FreePorts(2*all + 2)
		if err != nil {
			return nil, err
		}
		var names, api, gossip []string
		for i := range all {
			names = append(names, fmt.Sprintf("node-%d", i+1))
			api = append(api, fmt.Sprint(ports[i]))
			gossip = append(gossip, fmt.Sprint(ports[all+i]))
			if i >= n {
				s.spares = append(s.spares, spare{name: names[i], url: fmt.Sprintf("http://127.0.0.1:%d", ports[i])})
				continue
			}
			urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d", ports[i]))
		}
		agentAddr := fmt.Sprintf("127.0.0.1:%d", ports[2*all])
		keys := filepath.Join(e.dir, spec.prefix+"keys")
		s.keys, s.prefix = keys, spec.prefix
		kenv := []string{"TCKCLK_API_PORTS=" + strings.Join(api, " "), "TCKCLK_GOSSIP_PORTS=" + strings.Join(gossip, " "), "TCKCLK_AGENT_ADDR=" + agentAddr}
		cmd := exec.Command("sh", append([]string{filepath.Join(e.repo, "deploy", "cluster-keys.sh"), keys}, names...)...)
		cmd.Env = append(os.Environ(), kenv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cluster-keys.sh: %v\n%s", err, out)
		}
		// An admin token: the failover trials read the Raft configuration.
		tok := make([]byte, 32)
		if _, err := rand.Read(tok); err != nil {
			return nil, err
		}
		s.adminToken = base64.RawURLEncoding.EncodeToString(tok)
		if err := os.WriteFile(filepath.Join(keys, "admin.token"), []byte(s.adminToken), 0o600); err != nil {
			return nil, err
		}
		if spec.noDevAgent {
			agentAddr = ""
		} else if err := e.startDevAgent(ctx, spec.prefix+"agent", agentAddr, fmt.Sprintf("127.0.0.1:%d", ports[2*all+1]), filepath.Join(keys, "clock.secret")); err != nil {
			return nil, err
		}
		for i, name := range names[:n] {
			args := clusterArgs(keys, name)
			more, err := nodeFlags(i)
			if err != nil {
				return nil, err
			}
			if spec.spare > 0 { // the spares are not expected at bootstrap
				more = append(slices.Clone(more), "--cluster.raft.bootstrap_expect", fmt.Sprint(n))
			}
			if spec.nodeAgent != nil {
				a, err := spec.nodeAgent(i, agentAddr, keys)
				if err != nil {
					return nil, err
				}
				more = append(more, "--clock.agent_addr", a)
			}
			p, err := e.start(spec.prefix+"ticketd3-"+name, nil, bin, append(args, more...)...)
			if err != nil {
				return nil, err
			}
			s.procs = append(s.procs, p)
		}
	}
	s.addrs = urls
	if err := waitTicketd(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// waitTicketd waits until every node of s is ready and one leads, and
// sets s.endpoint and s.leader.
func waitTicketd(ctx context.Context, s *server) error {
	err := poll(ctx, 120*time.Second, s.procs, func() error {
		leader := ""
		for i, u := range s.addrs {
			c, err := client.New(u)
			if err != nil {
				return err
			}
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = c.Ready(sctx)
			var st *wireStatus
			if err == nil {
				st, err = status(sctx, c)
			}
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", u, err)
			}
			if st.role == "leader" {
				leader, s.leader = u, i
			}
		}
		if leader == "" {
			return errors.New("no leader yet")
		}
		s.endpoint = leader
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", s.label, err)
	}
	return nil
}

// clusterArgs is cluster node name's command line before any extra
// flags (which win).
func clusterArgs(keys, name string) []string {
	return append([]string{"--config", filepath.Join(keys, name+".yaml"), "--log.level", "warn",
		"--api.admin_token_file", filepath.Join(keys, "admin.token")}, clockFlags...)
}

// spare is a cluster NodeId with keys and a config, not started yet.
type spare struct{ name, url string }

// startSpare starts s's next spare NodeId as a node joining the running
// cluster (bootstrap_expect 0, an empty data dir) with extra flags.
func (e *env) startSpare(s *server, extra []string) (*proc, spare, error) {
	if len(s.spares) == 0 {
		return nil, spare{}, errors.New("no spare NodeId left")
	}
	sp := s.spares[0]
	s.spares = s.spares[1:]
	args := append(clusterArgs(s.keys, sp.name), "--cluster.raft.bootstrap_expect", "0")
	p, err := e.start(s.prefix+"ticketd3-"+sp.name, nil, filepath.Join(e.bin, "ticketd"), append(args, extra...)...)
	return p, sp, err
}

type wireStatus struct{ role string }

func status(ctx context.Context, c *client.Client) (*wireStatus, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	return &wireStatus{role: st.Role}, nil
}

// poll calls f until it returns nil or wait passes; it gives up at once
// when one of procs exits.
func poll(ctx context.Context, wait time.Duration, procs []*proc, f func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := f()
		if err == nil {
			return nil
		}
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("%s exited during start-up (log %s)", p.name, p.log)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %v: %w", wait, err)
		}
		time.Sleep(100 * time.Millisecond) // readiness poll with a deadline
	}
}
