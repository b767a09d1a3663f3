package cluster

// Cluster mode (SPEC §5): the mesh, gossip membership, Raft over
// the mesh, bootstrap_expect, the leader's reconciler and forwarding. The
// single-node path never reaches this package: only the node's clusterMode
// (node/mode_cluster.go) holds a Node, and the Node reaches the node only
// through Host (host.go).

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// Tuning tunes the cluster libraries: the node's tests set it (ephemeral
// mesh ports, fast gossip timings); a running ticketd never does.
type Tuning struct {
	Mesh       func(*mesh.Config)
	Membership func(*membership.Config)
	Started    func(gossipAddr string) // after gossip started
	Ticker     clockhealth.TickerFunc  // the metadata refresh ticker ("meta"); default the system's
	Window     time.Duration           // bootstrap stability window
	StableFor  time.Duration           // how long a non-voter stays caught up before promotion
	Timing     *consensus.Timing       // Raft's timeouts (nil: consensus.ClusterTiming)
	// SoftwareVersion replaces the advertised software version (with it
	// the log-entry versions the node says it reads, features.go): a
	// node of an earlier release, as its peers see it.
	SoftwareVersion string
}

// Node is the cluster half of a ticketd node: its mesh, membership and
// the state they advertise, Raft over the mesh, and what the leader runs.
// Its goroutines belong to Run (the forward server, the peer-status
// server, the metadata refresh, the reused-NodeId and crash watches) and
// to Lead (the reconciler and the retire watch); both return once they
// ended.
type Node struct {
	host   Host
	cfg    Config       // the cluster section; Name is this node's NodeId
	log    *slog.Logger // component cluster
	opts   Options
	key    ed25519.PrivateKey
	trust  *identity.Store
	secret []byte
	tls    *tls.Config // the mesh's mutual TLS (nil: disabled), loaded at start-up
	mesh   *mesh.Mesh
	mem    *membership.Membership
	tr     *contactTransport
	adv    advertised
	fwd    forwarder

	mu        sync.Mutex
	bootstrap membership.BootstrapState
	rec       *reconcile.Runner // while this node leads
	refused   string            // the last bootstrap refusal logged (logged once each)
	uniform   bool              // uniform held once (SPEC §3.5): latched
	mismatch  string            // the last Δ mismatch logged
	ticker    clockhealth.TickerFunc
	window    time.Duration // bootstrap stability window (0: defaultBootstrapWindow)
	stableFor time.Duration // reconcile StableFor (0: the reconciler's default)

	clientLeader, clientLeaderAddr string // a gossip-only client's leader (discoverLeader)

	life  lifecycle   // clock-failure lifecycle (failed.go)
	crash *crashWatch // crash failover (crashfailover.go)

	bounds boundHistory // members' advertised clock bounds (boundhistory.go)

	handedOff atomic.Bool // a stop transferred leadership (HandOff; tests read it)

	features entryFeatures // which log entries every server reads (features.go)

	// keepGossip: this node stops as a voter of the configuration (set by
	// noteStop before Raft closes): it ends its gossip without a leave
	// message, so it keeps its vote (SPEC §5).
	keepGossip atomic.Bool
}

// advertised is membership's AdvertisedKey, bound after the mesh listens
// (the mesh's address is in the metadata membership starts with), and
// Raft's ServerAddressProvider, bound to Raft once it opens.
type advertised struct {
	mu       sync.Mutex
	mem      *membership.Membership
	raft     *raft.Raft // its configuration: the address of a server gossip does not show
	self     raft.ServerID
	selfAddr raft.ServerAddress // this node's bare mesh address
}

func (a *advertised) AdvertisedKey(id string) (ed25519.PublicKey, bool) {
	a.mu.Lock()
	m := a.mem
	a.mu.Unlock()
	if m == nil {
		return nil, false
	}
	return m.AdvertisedKey(id)
}

// errNoMeshAddr: neither gossip nor the Raft configuration has a mesh
// address for a server (Raft's transport then dials its bare target,
// which mesh.StreamLayer refuses).
var errNoMeshAddr = errors.New("no mesh address in gossip or in the Raft configuration")

// ServerAddr implements raft.ServerAddressProvider; hashicorp/raft asks it
// before every connection, with the server's ID. The answer names that ID
// (mesh.RaftAddress), so the mesh serves the RPC only on a session whose
// peer authenticated as exactly that NodeId: a later generation NAME~G
// at the address of the NodeId it replaced never answers for it (SPEC
// §3.4). The address is the one the server advertises in gossip now, not
// the one its Raft configuration recorded when it was added: a voter
// restarted on another mesh port (auto-picked in 7950–7959, then
// ephemeral) is reached at once; without it the leader kept dialing the
// old port and the voter, cut off, campaigned alone (seen in the failover
// trials of bench/tckbench). A server gossip does not show is dialed at
// its configuration's address, still named: never a bare address, which
// hashicorp/raft would dial if this failed. This node's own ID, which Raft
// never dials, gets its bare address: NetworkTransport.EncodePeer asks for
// it to fill every RPC header's Addr, which followers keep as the leader's
// address (forwarding dials it).
func (a *advertised) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	a.mu.Lock()
	m, r, self, selfAddr := a.mem, a.raft, a.self, a.selfAddr
	a.mu.Unlock()
	if id == self && selfAddr != "" {
		return selfAddr, nil
	}
	if m != nil {
		// Any state but left: a member gossip calls dead may be alive (the
		// claim is unsigned, a gossip-key holder can forge it) and its
		// signed mesh address is the newest one known.
		for _, mb := range m.Members() {
			if mb.ID == string(id) && mb.State != membership.StateLeft && mb.Meta.MeshAddr != "" {
				return mesh.RaftAddress(id, mb.Meta.MeshAddr), nil
			}
		}
	}
	if r != nil {
		// The latest configuration, read without a round trip through
		// Raft's loop (GetConfiguration answers at once).
		for _, s := range r.GetConfiguration().Configuration().Servers {
			if s.ID == id && s.Address != "" {
				return mesh.RaftAddress(id, string(s.Address)), nil
			}
		}
	}
	return "", errNoMeshAddr
}

// clusterKeys are what a cluster node proves itself with.
type clusterKeys struct {
	key    ed25519.PrivateKey
	trust  *identity.Store
	secret []byte      // the gossip key
	tls    *tls.Config // the mesh's mutual TLS (nil: disabled)
}

// CheckKeys loads what New loads from the cluster section — the identity
// key, the trust map and its self entry, the gossip key and the mesh's
// TLS files — and says what refuses a start (ticketd --print-config runs
// every start check).
func CheckKeys(cfg *Config) error {
	_, err := loadClusterKeys(cfg)
	return err
}

// loadClusterKeys reads the identity key, the trust map, the gossip key and
// the mesh's TLS files. They are checked before the node serves or proves
// its clock: a misconfiguration is a start-up refusal (exit 2).
func loadClusterKeys(cfg *Config) (clusterKeys, error) {
	in := &cfg.Internode
	key, err := identity.Load(string(in.IdentityKey), in.IdentityKeyFile)
	if err != nil {
		return clusterKeys{}, err
	}
	trust, err := identity.NewStore(cfg.GossipName(), key.Public().(ed25519.PublicKey), in.TrustedPeerKeys)
	if err != nil {
		return clusterKeys{}, err
	}
	secret, err := membership.LoadSecret(string(cfg.Membership.SecretKey), cfg.Membership.SecretFile)
	if err != nil {
		return clusterKeys{}, err
	}
	tlsConf, err := mesh.LoadTLS(mesh.TLSConfig(in.TLS))
	if err != nil {
		return clusterKeys{}, err
	}
	return clusterKeys{key: key, trust: trust, secret: secret, tls: tlsConf}, nil
}

// Options are what the cluster half is built with.
type Options struct {
	Config        Config
	DeltaMs       uint64        // clock.delta_ms
	StalenessMs   uint64        // clock.staleness_ms
	ProbeInterval time.Duration // clock.probe_interval_ms: how often the metadata is re-advertised
	// ForwardWaits is api.max_waiters + api.max_watchers: the forward
	// server's slots beyond its default, for the waits it holds.
	ForwardWaits int
	Dir          *datadir.Dir
	FSM          *ticket.FSM
	Notify       chan bool // Raft's leadership changes, for the node
	Stage        *stage.Holder
	Wall         interface{ Now() time.Time }
	ClockFailed  <-chan struct{} // closed when the clock FAILED (nil: never)
	Started      time.Time       // the node's start (liveness boot grace)
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
	Host         Host
	// ProposeWait is how long the node's proposals wait for Raft's answer
	// (a forwarding client to an earlier leader waits for its answers).
	ProposeWait time.Duration
	Tuning      *Tuning // tests only
}

// New loads the identity, the trust map and the gossip secret:
// every refusal is a *config.Error naming the key.
func New(o Options) (*Node, error) {
	k, err := loadClusterKeys(&o.Config)
	if err != nil {
		return nil, err
	}
	cl := &Node{host: o.Host, cfg: o.Config, opts: o, log: o.Logger.With("component", "cluster"), key: k.key, trust: k.trust, secret: k.secret, tls: k.tls}
	cl.fwd.cl = cl
	cl.crash = newCrashWatch(o.Config.Raft.CrashDetectMs, o.Config.Name, cl.log, o.Registerer)
	cl.initLifecycle()
	return cl, nil
}

// raft is the node's Raft once open, or nil.
func (cl *Node) raft() *raft.Raft {
	if c := cl.host.Consensus(); c != nil {
		return c.Raft()
	}
	return nil
}

// endsAtShutdown makes f's Error return at the latest once Raft's shutdown
// has ended (consensus.Raft.EndsAtShutdown), for a goroutine that waits on
// a Raft future itself (the reconciler): the node's stop waits for it.
func (cl *Node) endsAtShutdown(f raft.Future) {
	if c := cl.host.Consensus(); c != nil {
		c.EndsAtShutdown(f)
	}
}

// listenMesh binds the mesh and builds Raft's transport on it.
func (cl *Node) listenMesh(h *Tuning) error {
	cfg := &cl.cfg
	tlsConf := cl.tls
	mc := mesh.Config{
		// The full NodeId (NAME~G); the key is NAME's.
		NodeID: cfg.Name, Key: cl.key, GossipSecret: cl.secret, Trust: cl.trust, Advertised: &cl.adv,
		TLS: tlsConf, BindAddr: cfg.Membership.BindAddr, BindPort: cfg.Internode.BindPort,
		Logger: cl.opts.Logger.With("component", "mesh"), Registerer: cl.opts.Registerer, // socket deadlines: real time
		SessionEnded: cl.crash.sessionEnded,
	}
	if h != nil && h.Mesh != nil {
		h.Mesh(&mc)
	}
	var err error
	if cl.mesh, err = mesh.Listen(mc); err != nil {
		return fmt.Errorf("node: mesh: %w", err)
	}
	cl.adv.mu.Lock()
	cl.adv.self, cl.adv.selfAddr = raft.ServerID(cfg.Name), raft.ServerAddress(cl.mesh.Addr())
	cl.adv.mu.Unlock()
	// MaxRPCsInFlight 1: no pipelined replication. hashicorp/raft's
	// pipeline (v1.7.3) can deadlock when a follower answers an
	// AppendEntries with Success=false while entries are in flight: the
	// send parks on inprogressCh, the decoder on doneCh, replicate never
	// returns, so that follower gets no more entries and Shutdown hangs
	// (seen under leader changes and load in node/safety_test.go; the
	// same analysis as grafana/pyroscope#5518).
	cl.tr = newContactTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: mesh.NewStreamLayer(cl.mesh, mesh.ClassRaft), MaxPool: 3, Timeout: 10 * time.Second, MaxRPCsInFlight: 1,
		ServerAddressProvider: &cl.adv, // the server's mesh address, named with its ID
		Logger:                hclog.New(&hclog.LoggerOptions{Name: "raft-net", Output: io.Discard}),
	}))
	cl.log.Info("mesh listening", "addr", cl.mesh.Addr(), "tls", tlsConf != nil)
	return nil
}

// openConsensus opens Raft over the mesh without a bootstrap configuration
// (bootstrap_expect decides later) and notes whether the data dir already
// holds a cluster.
func (cl *Node) openConsensus(h *Tuning) (*consensus.Raft, error) {
	timing := consensus.ClusterTiming()
	if h != nil && h.Timing != nil {
		timing = *h.Timing
	}
	timing = cl.crash.timing(timing)
	cons, err := consensus.Open(consensus.Options{
		Dir: cl.opts.Dir, FSM: cl.opts.FSM, LocalID: cl.cfg.Name, Transport: cl.tr,
		Timing:            timing,
		SnapshotThreshold: cl.cfg.Raft.SnapshotThreshold, SnapshotInterval: cl.cfg.Raft.SnapshotInterval,
		TrailingLogs: cl.cfg.Raft.TrailingLogs, LogStore: cl.cfg.Raft.LogStore, Notify: cl.opts.Notify, Logger: cl.opts.Logger,
		// A Raft goroutine stuck in an RPC to a silent peer would hang the
		// stop: close the mesh's sessions, which ends every stream it may
		// wait on. (Pipelining, whose deadlock parks off any stream, is off:
		// MaxRPCsInFlight 1 in listenMesh.)
		Unblock: func() { _ = cl.mesh.Close() },
	})
	if err != nil {
		return nil, err
	}
	cl.adv.mu.Lock()
	cl.adv.raft = cons.Raft()
	cl.adv.mu.Unlock()
	servers, err := cons.Servers()
	if err != nil {
		_ = cons.Close()
		return nil, err
	}
	switch {
	case len(servers) > 0:
		cl.bootstrap = membership.BootstrapHasState
	case cl.cfg.Raft.BootstrapExpect == 0:
		cl.bootstrap = membership.BootstrapNone
	default:
		cl.bootstrap = membership.BootstrapWaiting
	}
	return cons, nil
}

// eligible: this node may be a Raft server (not a gossip-only client).
func (cl *Node) Eligible() bool {
	r := &cl.cfg.Raft
	return r.Eligible && r.Role != "client"
}

// meta is this node's gossip metadata now.
func (cl *Node) meta() membership.Meta {
	cfg := &cl.cfg
	m := membership.Meta{
		NodeID: cfg.Name, MeshAddr: cl.mesh.Addr(), DeltaMs: uint16(cl.opts.DeltaMs), ProtocolVersion: protocol.Version,
		RaftEligible: cl.Eligible(), RaftPriority: int32(cfg.Raft.Priority), Role: cl.role(),
		FailureDomain: cfg.FailureDomain, BootstrapExpect: uint8(cfg.Raft.BootstrapExpect), DataDirOK: true,
		Version: softwareVersion(),
	}
	if t := cl.opts.Tuning; t != nil && t.SoftwareVersion != "" {
		m.Version = t.SoftwareVersion
	}
	copy(m.PublicKey[:], cl.key.Public().(ed25519.PublicKey))
	cl.clockMeta(&m)
	cl.mu.Lock()
	m.Bootstrap = cl.bootstrap
	cl.mu.Unlock()
	m.Retired = cl.life.retired.Load() // SPEC §3.4 (failed.go)
	return m
}

// startMembership joins the gossip with this node's metadata.
func (cl *Node) startMembership(h *Tuning) error {
	cfg := &cl.cfg
	join, err := membership.ParseJoinAddrs(cfg.Membership.JoinAddrs)
	if err != nil {
		return err
	}
	mc := membership.DefaultConfig()
	mc.NodeName, mc.BindAddr, mc.BindPort = cfg.GossipName(), cfg.Membership.BindAddr, cfg.Membership.BindPort
	if mc.BindAddr == "" {
		mc.BindAddr = "127.0.0.1"
	}
	mc.Secret, mc.JoinAddrs, mc.Meta, mc.Trust = cl.secret, join, cl.meta, cl.trust
	mc.Key = cl.key // signs this node's metadata (SPEC §5 "Identity")
	mc.Logger, mc.Registerer = cl.opts.Logger.With("component", "gossip"), cl.opts.Registerer
	if h != nil && h.Membership != nil {
		h.Membership(&mc)
	}
	mem, err := membership.New(mc)
	if err != nil {
		return fmt.Errorf("node: membership: %w", err)
	}
	if err := mem.Start(); err != nil {
		_ = mem.Close()
		return fmt.Errorf("node: membership: %w", err)
	}
	cl.mem = mem
	cl.adv.mu.Lock()
	cl.adv.mem = mem
	cl.adv.mu.Unlock()
	return nil
}

// noteStop records, before Raft closes, whether this node stops as a voter
// that keeps its vote: a voter of the configuration whose NodeId is not
// retired (SPEC §5: a graceful stop does not leave the gossip pool; only
// `ticketctl cluster remove`, a replacement or raft.dead_voter_grace takes
// a voter out).
func (cl *Node) NoteStop() {
	keep := false
	if r := cl.raft(); r != nil && !cl.life.retired.Load() {
		if f := r.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				keep = keep || s.ID == raft.ServerID(cl.cfg.Name) && s.Suffrage == raft.Voter
			}
		}
	}
	cl.keepGossip.Store(keep)
}

// close ends this node's gossip and closes the mesh (after Raft closed). A
// voter stops without a leave message (noteStop): the others see it dead,
// keep its slot for raft.dead_voter_grace and take it back as a voter when
// it returns. Any other node leaves, so the others see it left at once.
func (cl *Node) Close() {
	if cl.mem != nil {
		if cl.keepGossip.Load() {
			cl.log.Info("stopping without leaving the gossip pool: a voter keeps its vote (SPEC §5)")
		} else if err := cl.mem.Leave(time.Second); err != nil && !errors.Is(err, membership.ErrClosed) {
			cl.log.Warn("gossip leave", "err", err)
		}
		_ = cl.mem.Close()
	}
	if cl.tr != nil {
		_ = cl.tr.Close()
	}
	if cl.mesh != nil {
		_ = cl.mesh.Close()
	}
}

// defaultBootstrapWindow is how long the same bootstrap_expect members
// must be seen before bootstrapping (SPEC §5 "stable for a window").
const defaultBootstrapWindow = 2 * time.Second

// run serves forwarded requests and peer-status queries, refreshes the
// advertised metadata and drives bootstrap from membership events until
// ctx ends.
func (cl *Node) Run(ctx context.Context, cons *consensus.Raft) {
	var wg sync.WaitGroup
	defer wg.Wait()
	stopFwd := cl.fwd.serve(&wg)
	defer stopFwd()
	stopPeer := cl.servePeerStatus(&wg)
	defer stopPeer()
	newTicker := cl.ticker
	if newTicker == nil {
		newTicker = clockhealth.SystemTicker
	}
	rctx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh() // before wg.Wait (deferred earlier)
	wg.Go(func() { cl.refreshLoop(rctx, newTicker) })
	wg.Go(func() { cl.watchReusedID(rctx, cons, newTicker) }) // generation.go
	wg.Go(func() { cl.crash.run(rctx, cons) })

	// The stability window runs on a real timer: it restarts whenever the
	// candidate voter set changes, and bootstrap happens when it fires on
	// an unchanged set.
	window := cl.window
	if window <= 0 {
		window = defaultBootstrapWindow
	}
	timer := time.NewTimer(window)
	timer.Stop()
	defer timer.Stop()
	var cand string
	step := func(fired bool) {
		servers := cl.bootstrapCandidate(cons)
		key := fmt.Sprint(servers)
		switch {
		case servers == nil:
			cand = ""
			timer.Stop()
		case cl.cfg.Raft.BootstrapExpect == 1 || (fired && key == cand):
			if !cl.safeBootstrap(ctx, cons, servers) {
				timer.Reset(window) // a peer did not answer: ask again later
			}
		case key != cand:
			cand = key
			timer.Reset(window)
		}
	}
	events := cl.mem.Events()
	step(false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			step(true)
		case _, ok := <-events:
			if !ok {
				return
			}
			if r := cl.runner(); r != nil {
				r.Trigger()
			}
			cl.life.poke() // the leader's retire watch (failed.go)
			step(false)
		}
	}
}

// bootstrapCandidate is the voter set to bootstrap with now, or nil (not
// waiting, not eligible, bootstrap_expect not met, or refused: the
// refusal is logged once and shown on /readyz). A node still waiting whose
// Raft configuration arrived by replication (a peer bootstrapped first)
// is done.
func (cl *Node) bootstrapCandidate(cons *consensus.Raft) []raft.Server {
	cl.mu.Lock()
	state := cl.bootstrap
	cl.mu.Unlock()
	if state != membership.BootstrapWaiting || !cl.Eligible() {
		return nil
	}
	if s, err := cons.Servers(); err == nil && len(s) > 0 {
		cl.setBootstrap(membership.BootstrapDone, "")
		cl.log.Info("joined the cluster a peer bootstrapped", "servers", len(s))
		return nil
	}
	expect := cl.cfg.Raft.BootstrapExpect
	servers, why := bootstrapServers(cl.cfg.Name, cl.mesh.Addr(), expect, uint16(cl.opts.DeltaMs), cl.mem.Members())
	if servers == nil {
		cl.noteRefusal(why)
	}
	return servers
}

// noteRefusal records why this node does not bootstrap (logged once each).
func (cl *Node) noteRefusal(why string) {
	cl.mu.Lock()
	seen := why == cl.refused
	cl.refused = why
	cl.mu.Unlock()
	if why != "" && !seen {
		cl.log.Warn("not bootstrapping", "bootstrap_expect", cl.cfg.Raft.BootstrapExpect, "why", why)
	}
}

// setBootstrap moves the advertised bootstrap state and re-advertises it.
func (cl *Node) setBootstrap(state membership.BootstrapState, refused string) {
	cl.mu.Lock()
	cl.bootstrap, cl.refused = state, refused
	cl.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := cl.mem.UpdateMeta(ctx); err != nil {
		cl.log.Warn("advertising the bootstrap state", "err", err)
	}
}

// safeBootstrap asks every other server of the set over the mesh whether
// it holds Raft state (Consul's maybeBootstrap) and bootstraps only when
// none does. A peer with state means a cluster exists (or a peer
// bootstrapped a moment ago): this node then waits to receive the
// configuration. It returns false when it should look again later (a
// peer could not be asked, or has state).
func (cl *Node) safeBootstrap(ctx context.Context, cons *consensus.Raft, servers []raft.Server) bool {
	self := cl.cfg.Name
	for _, s := range servers {
		if string(s.ID) == self {
			continue
		}
		st, err := cl.queryPeer(ctx, string(s.ID), string(s.Address))
		if err != nil {
			cl.noteRefusal(fmt.Sprintf("could not ask %s whether it has Raft state: %v", s.ID, err))
			return false
		}
		if st.HasState {
			cl.noteRefusal(fmt.Sprintf("%s reports existing Raft state (last index %d): not bootstrapping, waiting to be added", s.ID, st.LastIndex))
			return false // look again: the configuration arrives by replication
		}
	}
	if err := cons.BootstrapCluster(raft.Configuration{Servers: servers}); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		cl.log.Error("bootstrap failed", "err", err)
		return false
	}
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	cl.log.Info("bootstrapped the cluster", "bootstrap_expect", cl.cfg.Raft.BootstrapExpect, "voters", ids)
	cl.setBootstrap(membership.BootstrapDone, "")
	return true
}

// bootstrapRefusal is why this node did not bootstrap, or "".
func (cl *Node) bootstrapRefusal() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.bootstrap != membership.BootstrapWaiting {
		return ""
	}
	return cl.refused
}

// bootstrapServers is the voter set to bootstrap with, or nil and why not
// ("" when simply still waiting). It is a pure function of the gossip view,
// so every node of the same view computes the same set.
func bootstrapServers(self, selfAddr string, expect int, deltaMs uint16, members []membership.Member) ([]raft.Server, string) {
	if expect == 1 {
		return []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(self), Address: raft.ServerAddress(selfAddr)}}, ""
	}
	var out []raft.Server
	for _, m := range members {
		if m.State != membership.StateAlive || !m.Meta.RaftEligible || m.Meta.Role == membership.RoleClient {
			continue
		}
		switch m.Meta.Bootstrap {
		case membership.BootstrapHasState, membership.BootstrapDone:
			return nil, fmt.Sprintf("%s already bootstrapped or has Raft state (%s): waiting to be added by its leader", m.ID, m.Meta.Bootstrap)
		}
		if m.Meta.DeltaMs != deltaMs {
			return nil, fmt.Sprintf("conflicting Δ: %s advertises %d ms, this node %d ms", m.ID, m.Meta.DeltaMs, deltaMs)
		}
		if m.Meta.BootstrapExpect == 0 {
			continue
		}
		if int(m.Meta.BootstrapExpect) != expect {
			return nil, fmt.Sprintf("conflicting bootstrap_expect: %s advertises %d, this node %d", m.ID, m.Meta.BootstrapExpect, expect)
		}
		out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Meta.MeshAddr)})
	}
	if len(out) != expect {
		return nil, ""
	}
	slices.SortFunc(out, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out, ""
}

// runner returns the reconciler while this node leads, else nil.
func (cl *Node) runner() *reconcile.Runner {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.rec
}

// reconcileMembers is the leader's view for the reconciler: every gossip
// member, and every configuration server gossip does not know (as dead).
func (cl *Node) reconcileMembers(rr *raft.Raft) []reconcile.Member {
	var out []reconcile.Member
	seen := map[string]bool{}
	delta := cl.opts.FSM.Delta()
	for _, m := range cl.mem.Members() {
		seen[m.ID] = true
		alive := m.State == membership.StateAlive
		// A node advertising another Δ never joins or votes (SPEC §3.5).
		sameDelta := delta == 0 || uint64(m.Meta.DeltaMs) == delta
		out = append(out, reconcile.Member{
			ID: m.ID, Address: m.Meta.MeshAddr, Eligible: m.Meta.RaftEligible && m.Meta.Role != membership.RoleClient && m.Meta.DataDirOK && sameDelta,
			Priority: int(m.Meta.RaftPriority), FailureDomain: m.Meta.FailureDomain, Alive: alive, RaftContact: cl.tr.inContact(m.ID),
			ClockHealthy: m.Meta.ClockState == membership.ClockHealthy, Retired: m.Meta.Retired,
		})
	}
	if f := rr.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if !seen[string(s.ID)] {
				out = append(out, reconcile.Member{ID: string(s.ID), Address: string(s.Address), RaftContact: cl.tr.inContact(string(s.ID))})
			}
		}
	}
	return out
}

// failClosedRaft is the reconciler's Raft: once this node's clock FAILED
// (retired) it reports no leader, so the runner changes no configuration
// between the failure and the leadership transfer (SPEC §3.4: a FAILED
// node stops acting at once).
type failClosedRaft struct {
	*reconcile.RaftAdapter
	failed func() bool
}

func (f failClosedRaft) LeaderID() string {
	if f.failed() {
		return ""
	}
	return f.RaftAdapter.LeaderID()
}

// Lead runs while this node leads, until ctx ends with the term: the
// reconciler and the retire watch (SPEC §3.4, failed.go).
func (cl *Node) Lead(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { cl.lead(ctx) })
	wg.Go(func() { cl.retireWatch(ctx) })
	wg.Wait()
}

// lead runs the reconciler while this node leads (ctx ends with the term).
func (cl *Node) lead(ctx context.Context) {
	rr := cl.raft()
	if rr == nil {
		return
	}
	cl.fixSelfAddress(rr)
	maxVoters, changed := reconcile.NormalizeMaxVoters(cl.cfg.Raft.MaxVoters)
	if changed {
		cl.log.Warn("cluster.raft.max_voters is even; using the odd value below it", "max_voters", maxVoters)
	}
	r, err := reconcile.NewRunner(reconcile.RunnerConfig{
		Raft: failClosedRaft{reconcile.NewRaftAdapter(rr, 5*time.Second).WithShutdownEnd(cl.endsAtShutdown), cl.life.retired.Load}, LocalID: cl.cfg.Name, Members: func() []reconcile.Member { return cl.withRetired(cl.reconcileMembers(rr)) },
		Limits:   reconcile.Limits{MaxVoters: maxVoters, MaxStandbys: cl.cfg.Raft.MaxStandbys},
		Debounce: cl.cfg.Raft.ReconcileDebounce, Logger: cl.log.With("component", "reconcile"),
		Progress: cl.progress(ctx), StableFor: cl.stableFor, DeadVoterGrace: cl.cfg.Raft.DeadVoterGrace,
		Registerer: cl.opts.Registerer,
	})
	if err != nil {
		cl.log.Error("reconciler", "err", err)
		return
	}
	cl.mu.Lock()
	cl.rec = r
	cl.mu.Unlock()
	defer func() {
		cl.mu.Lock()
		cl.rec = nil
		cl.mu.Unlock()
	}()
	r.Trigger()
	_ = r.Run(ctx)
}

// fixSelfAddress corrects this leader's own Raft address in the
// configuration when it is not its mesh address: a data dir written by
// `ticketd recover` names the voter by its NodeId (the mesh port is
// picked at start), and a follower that later leads must reach it there.
// AddVoter of an existing voter changes only its address.
func (cl *Node) fixSelfAddress(rr *raft.Raft) {
	f := rr.GetConfiguration()
	if f.Error() != nil {
		return
	}
	self, addr := raft.ServerID(cl.cfg.Name), raft.ServerAddress(cl.mesh.Addr())
	for _, s := range f.Configuration().Servers {
		if s.ID != self || s.Address == addr || s.Suffrage != raft.Voter {
			continue
		}
		if err := rr.AddVoter(self, addr, 0, 5*time.Second).Error(); err != nil {
			cl.log.Warn("correcting this node's Raft address", "from", s.Address, "to", addr, "err", err)
			return
		}
		cl.log.Info("corrected this node's Raft address in the configuration", "from", s.Address, "to", addr)
	}
}

// open is cluster start-up after clock_check (SPEC §3.5): the mesh listens,
// Raft opens over it (no bootstrap yet), then gossip starts advertising
// this node, including whether its data dir already holds a cluster.
func (cl *Node) Open() (*consensus.Raft, error) {
	h := cl.opts.Tuning
	if err := cl.listenMesh(h); err != nil {
		return nil, err
	}
	var cons *consensus.Raft
	if cl.Eligible() {
		var err error
		if cons, err = cl.openConsensus(h); err != nil {
			return nil, err
		}
	} else {
		// A gossip-only client has no Raft at all (no Raft state in its
		// data dir): the zero consensus.Raft has no Raft (Raft() is nil,
		// so every caller sees "not open") and closes as a no-op.
		cons = &consensus.Raft{}
		cl.bootstrap = membership.BootstrapNone
	}
	if err := cl.startMembership(h); err != nil {
		_ = cons.Close()
		return nil, err
	}
	if h != nil {
		cl.ticker, cl.window, cl.stableFor = h.Ticker, h.Window, h.StableFor
	}
	cl.log.Info("cluster node started", "mesh", cl.mesh.Addr(), "gossip", cl.mem.LocalAddr(),
		"bootstrap_expect", cl.cfg.Raft.BootstrapExpect, "bootstrap", cl.meta().Bootstrap.String())
	if h != nil && h.Started != nil {
		h.Started(cl.mem.LocalAddr())
	}
	return cons, nil
}

// aliveNodes counts the cluster's alive members, this node included, for
// the leader's node shares (node/waiters.go).
func (cl *Node) AliveNodes() int {
	if cl.mem == nil {
		return 1
	}
	alive := 0
	for _, m := range cl.mem.Members() {
		if m.ID == cl.cfg.Name || m.State == membership.StateAlive || m.State == membership.StateSuspect {
			alive++
		}
	}
	return alive
}

// Reload replaces the trust map (cluster.internode.trusted_peer_keys).
func (cl *Node) Reload(cfg Config) {
	if err := cl.trust.Replace(cfg.Internode.TrustedPeerKeys); err != nil {
		cl.opts.Logger.Error("reload refused: the new trust map is invalid; the old one stays", "err", err)
		return
	}
	cl.opts.Logger.Info("reload: trust map replaced (other changes need a restart)", "peers", len(cfg.Internode.TrustedPeerKeys))
}
