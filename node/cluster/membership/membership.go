package membership

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/internal/lograte"
	"github.com/tckclk/tckclk/node/cluster/identity"
)

// TrustSource is the trust map (node name → ed25519 public key). Lookup is
// called on memberlist's goroutines for every alive message: it must be
// fast, safe for concurrent use and must not call back into Membership.
type TrustSource interface {
	Lookup(id string) (ed25519.PublicKey, bool)
}

// Timing tunes memberlist's failure detector. A zero field keeps
// memberlist's DefaultLANConfig value, except DeadNodeReclaimTime (30 s).
type Timing struct {
	ProbeInterval       time.Duration
	ProbeTimeout        time.Duration
	SuspicionMult       int
	GossipInterval      time.Duration
	GossipToTheDeadTime time.Duration
	PushPullInterval    time.Duration
	TCPTimeout          time.Duration
	// DeadNodeReclaimTime is how long after a member is declared dead its
	// name may come back from a different address (a node restarted with a
	// new IP or port). A member that left gracefully may come back at once.
	DeadNodeReclaimTime time.Duration
}

// DefaultDeadNodeReclaimTime is Timing.DeadNodeReclaimTime's default.
const DefaultDeadNodeReclaimTime = 30 * time.Second

// Config configures a Membership. Start from DefaultConfig: BindPort 0
// means an ephemeral port.
type Config struct {
	NodeName      string // this node's NodeId (cluster.name); memberlist's node name
	BindAddr      string // IP to bind gossip on (TCP and UDP)
	BindPort      int    // gossip port; 0: ephemeral (tests)
	AdvertiseAddr string // optional: IP to advertise instead of the bound one
	AdvertisePort int    // optional, with AdvertiseAddr; 0: BindPort (set it when BindPort is 0 and a Transport is given)
	Secret        []byte // gossip key: 16, 24 or 32 bytes (see LoadSecret)
	JoinAddrs     []string
	// Meta returns this node's current metadata. It is called by New,
	// UpdateMeta and Leave, never on memberlist's goroutines. NodeID ""
	// means NodeName; Seq is set by Membership.
	Meta func() Meta
	// Key is this node's ed25519 identity key: it signs every encoding of
	// this node's metadata (SPEC §5 "Identity"). Its public key must be
	// the one the trust map holds for NodeName and the one Meta advertises.
	Key   ed25519.PrivateKey
	Trust TrustSource
	// Logger receives this package's and memberlist's log lines (nil: discarded).
	Logger *slog.Logger
	// Transport replaces memberlist's NetTransport (a test harness that
	// partitions gossip); nil: NetTransport on BindAddr:BindPort. Once
	// Start succeeds memberlist owns it (Close shuts it down); if Start
	// fails it may still be open and is the caller's to shut down.
	Transport  memberlist.NodeAwareTransport
	Registerer prometheus.Registerer // nil: metrics are not registered
	Clock      Clock                 // nil: SystemClock
	// JoinBackoffMin and JoinBackoffMax bound the exponential back-off
	// between failed join attempts (doubling from Min, capped at Max).
	JoinBackoffMin time.Duration
	JoinBackoffMax time.Duration
	// RejoinInterval is how often the node checks whether it is alone in
	// its view while join addresses are configured (and then joins again).
	RejoinInterval time.Duration
	// UpdateTimeout bounds UpdateMeta's wait for the broadcast when its
	// context has no deadline.
	UpdateTimeout time.Duration
	EventBuffer   int // capacity of the Events channel
	Timing        Timing
}

// DefaultConfig returns the defaults: bind 0.0.0.0:7946, back-off 1 s to
// 30 s, rejoin check every 30 s, 64 buffered events.
func DefaultConfig() Config {
	return Config{
		BindAddr:       "0.0.0.0",
		BindPort:       DefaultPort,
		JoinBackoffMin: time.Second,
		JoinBackoffMax: 30 * time.Second,
		RejoinInterval: 30 * time.Second,
		UpdateTimeout:  10 * time.Second,
		EventBuffer:    64,
	}
}

// Errors of the lifecycle and of this node's own identity.
var (
	ErrNotStarted   = errors.New("membership: not started")
	ErrClosed       = errors.New("membership: closed")
	ErrSelfTrust    = errors.New("membership: this node's name is not in the trust map with the key its metadata advertises")
	ErrStartedTwice = errors.New("membership: already started")
)

// State is a member's state in this node's view.
type State int

// States.
const (
	StateAlive   State = iota + 1
	StateSuspect       // not reported: memberlist v0.5.4 does not expose suspicion (see doc.go)
	StateDead
	StateLeft
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "unknown"
}

// Member is one trusted member of this node's view.
type Member struct {
	// ID is the member's NodeId, from its signed metadata: its name, or
	// NAME~G for a later generation of NAME (SPEC §3.4). The Raft server
	// ID is the NodeId.
	ID string
	// Name is its gossip name (memberlist's node name), the trust-map
	// name its key is listed under and the mesh's peer id: the same for
	// every generation of NAME, so the view holds at most one generation
	// of a name (the newest that gossiped).
	Name  string
	Addr  string // gossip host:port
	Meta  Meta
	State State
}

// Membership is this node's encrypted, trust-filtered gossip membership.
type Membership struct {
	cfg    Config
	log    *slog.Logger
	clock  Clock
	met    *metrics
	events *eventQueue

	metaMu    sync.Mutex
	meta      Meta   // last meta from cfg.Meta, with Leaving, NodeID and Seq applied
	metaBytes []byte // its signed encoding, what NodeMeta hands memberlist
	leaving   bool
	// seqFloor is the highest Seq seen in metadata this node's own key
	// signed (gossip about an earlier run of it): the next Seq goes above.
	seqFloor  atomic.Uint64
	refuseLog *lograte.Logger // refusal lines (a gossip-key holder can cause them), closed by Close

	mu       sync.Mutex // members and refusals; never held while calling memberlist
	members  map[string]*Member
	refusals map[string]string       // name → last logged "reason addr", to log each refusal once
	verified map[string]verifiedMeta // trusted name → its last verified metadata (delegate.vet)
	lifeMu   sync.Mutex              // Start, Leave, Close
	ml       *memberlist.Memberlist
	started  bool
	closed   bool
	mlp      atomic.Pointer[memberlist.Memberlist] // m.ml for lock-free readers
	local    atomic.Pointer[string]                // the local gossip address, read once at Start (memberlist rewrites its Node on UpdateNode)
	cancel   context.CancelFunc
	loopDone chan struct{}
	mlLog    *slogWriter // memberlist's logger, closed by Close
}

// New validates cfg and this node's own metadata and trust entry. It binds
// nothing; Start does.
func New(cfg Config) (*Membership, error) {
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("membership: NodeName is empty")
	case len(cfg.NodeName) > 255:
		return nil, errors.New("membership: NodeName is longer than 255 bytes")
	case len(cfg.Secret) != 16 && len(cfg.Secret) != 24 && len(cfg.Secret) != 32:
		return nil, errors.New("membership: Secret must be 16, 24 or 32 bytes (gossip is always encrypted)")
	case cfg.Meta == nil:
		return nil, errors.New("membership: Meta is nil")
	case len(cfg.Key) != ed25519.PrivateKeySize:
		return nil, errors.New("membership: Key is not an ed25519 private key (it signs this node's metadata)")
	case cfg.Trust == nil:
		return nil, errors.New("membership: Trust is nil")
	case cfg.BindPort < 0 || cfg.BindPort > 65535:
		return nil, errors.New("membership: BindPort outside 0..65535")
	case cfg.AdvertisePort < 0 || cfg.AdvertisePort > 65535:
		return nil, errors.New("membership: AdvertisePort outside 0..65535")
	case cfg.AdvertiseAddr != "" && net.ParseIP(cfg.AdvertiseAddr) == nil:
		return nil, errors.New("membership: AdvertiseAddr is not an IP address")
	case cfg.Transport == nil && net.ParseIP(cfg.BindAddr) == nil:
		return nil, errors.New("membership: BindAddr is not an IP address")
	case cfg.JoinBackoffMin <= 0 || cfg.JoinBackoffMax < cfg.JoinBackoffMin:
		return nil, errors.New("membership: want 0 < JoinBackoffMin <= JoinBackoffMax")
	case cfg.RejoinInterval <= 0:
		return nil, errors.New("membership: RejoinInterval must be positive")
	case cfg.UpdateTimeout <= 0:
		return nil, errors.New("membership: UpdateTimeout must be positive")
	case cfg.EventBuffer <= 0:
		return nil, errors.New("membership: EventBuffer must be positive")
	}
	for i, a := range cfg.JoinAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("membership: JoinAddrs[%d] is not host:port (use ParseJoinAddrs)", i)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Timing.DeadNodeReclaimTime == 0 {
		cfg.Timing.DeadNodeReclaimTime = DefaultDeadNodeReclaimTime
	}
	cfg.Secret = append([]byte(nil), cfg.Secret...)
	cfg.Key = append(ed25519.PrivateKey(nil), cfg.Key...)
	cfg.JoinAddrs = append([]string(nil), cfg.JoinAddrs...)
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.NodeName),
		clock:    cfg.Clock,
		met:      met,
		members:  map[string]*Member{},
		refusals: map[string]string{},
		verified: map[string]verifiedMeta{},
	}
	m.events = newEventQueue(cfg.EventBuffer, met.dropped.Inc)
	m.refuseLog = lograte.New(m.log, lograte.Config{Interval: refusalLogInterval, Burst: refusalLogBurst, Now: cfg.Clock.Now})
	if err := m.refreshMeta(); err != nil {
		return nil, err
	}
	return m, nil
}

// refreshMeta reads cfg.Meta, applies Leaving and signs it for NodeMeta.
func (m *Membership) refreshMeta() error {
	meta := m.cfg.Meta()
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	meta.Leaving = meta.Leaving || m.leaving
	return m.signLocked(meta)
}

// signLocked checks meta against the trust map's entry for this node,
// gives it this node's NodeId (when unset) and the next sequence number,
// signs it and stores it for NodeMeta. Metadata equal to the current one
// keeps its encoding, unless gossip showed a higher sequence of this
// node's since. On any error the previous metadata stays. metaMu is held.
func (m *Membership) signLocked(meta Meta) error {
	if meta.NodeID == "" {
		meta.NodeID = m.cfg.NodeName
	}
	if key, ok := m.cfg.Trust.Lookup(m.cfg.NodeName); !ok || !keyEqual(key, meta.PublicKey) ||
		identity.TrustName(meta.NodeID) != m.cfg.NodeName {
		return ErrSelfTrust
	}
	floor := m.seqFloor.Load()
	meta.Seq = m.meta.Seq
	if m.metaBytes != nil && meta == m.meta && meta.Seq > floor {
		return nil
	}
	meta.Seq = nextSeq(max(m.meta.Seq, floor), m.clock.Now())
	b, err := Encode(meta, m.cfg.Key)
	if err != nil {
		return err
	}
	m.meta, m.metaBytes = meta, b
	return nil
}

// nextSeq is the sequence number after last: the wall clock in ns when
// that is higher (so a restarted node's first metadata is newer than any
// of its previous run's, on a clock that did not go back across the
// restart), else last+1.
func nextSeq(last uint64, now time.Time) uint64 {
	seq := last + 1
	if ns := now.UnixNano(); ns > 0 && uint64(ns) > seq {
		seq = uint64(ns)
	}
	return seq
}

// noteOwnSeq raises seqFloor to seq: gossip carried metadata this node's
// key signed with that sequence (an earlier run's, on a clock that was
// ahead). The next UpdateMeta signs above it, so peers accept it again.
func (m *Membership) noteOwnSeq(seq uint64) {
	for {
		cur := m.seqFloor.Load()
		if seq <= cur || m.seqFloor.CompareAndSwap(cur, seq) {
			return
		}
	}
}

func keyEqual(k ed25519.PublicKey, adv [ed25519.PublicKeySize]byte) bool {
	return len(k) == ed25519.PublicKeySize && string(k) == string(adv[:])
}

// Start binds the gossip port, announces this node and starts the join loop
// (when JoinAddrs are configured; a first node needs none). It returns once
// memberlist is listening; joining happens in the background.
func (m *Membership) Start() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	switch {
	case m.closed:
		return ErrClosed
	case m.started:
		return ErrStartedTwice
	}
	mc := m.memberlistConfig()
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("membership: starting memberlist: %w", err)
	}
	m.ml, m.started = ml, true
	addr := ml.LocalNode().Address() // before any UpdateNode can run
	m.local.Store(&addr)
	m.mlp.Store(ml)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.loopDone = cancel, make(chan struct{})
	go m.joinLoop(ctx)
	m.log.Info("gossip started", "addr", m.LocalAddr(), "join_addrs", m.cfg.JoinAddrs)
	return nil
}

func (m *Membership) memberlistConfig() *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = m.cfg.NodeName
	mc.BindAddr = m.cfg.BindAddr
	mc.BindPort = m.cfg.BindPort
	mc.AdvertiseAddr = m.cfg.AdvertiseAddr
	mc.AdvertisePort = m.cfg.BindPort
	if m.cfg.AdvertiseAddr != "" && m.cfg.AdvertisePort != 0 {
		mc.AdvertisePort = m.cfg.AdvertisePort
	}
	keyring, _ := memberlist.NewKeyring(nil, m.cfg.Secret) // length checked in New
	mc.Keyring = keyring
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	d := &delegate{m}
	mc.Delegate, mc.Events, mc.Alive, mc.Merge, mc.Conflict = d, d, d, d, d
	m.mlLog = newSlogWriter(m.log, m.clock.Now)
	mc.Logger = log.New(m.mlLog, "", 0)
	if m.cfg.Transport != nil {
		mc.Transport = m.cfg.Transport
	}
	t := m.cfg.Timing
	setDur(&mc.ProbeInterval, t.ProbeInterval)
	setDur(&mc.ProbeTimeout, t.ProbeTimeout)
	setDur(&mc.GossipInterval, t.GossipInterval)
	setDur(&mc.GossipToTheDeadTime, t.GossipToTheDeadTime)
	setDur(&mc.PushPullInterval, t.PushPullInterval)
	setDur(&mc.TCPTimeout, t.TCPTimeout)
	setDur(&mc.DeadNodeReclaimTime, t.DeadNodeReclaimTime)
	if t.SuspicionMult > 0 {
		mc.SuspicionMult = t.SuspicionMult
	}
	return mc
}

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

// joinLoop joins at start and whenever the node is alone in its view,
// retrying with exponential back-off; it checks for isolation every
// RejoinInterval.
func (m *Membership) joinLoop(ctx context.Context) {
	defer close(m.loopDone)
	if len(m.cfg.JoinAddrs) == 0 {
		return
	}
	backoff := m.cfg.JoinBackoffMin
	var aloneSince time.Time
	joined := false
	wait := time.Duration(0)
	for {
		if wait > 0 {
			t := m.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		} else if ctx.Err() != nil {
			return
		}
		if !m.alone() {
			if !aloneSince.IsZero() { // the view came back without a join (the peers' gossip reached this node)
				took := m.clock.Now().Sub(aloneSince)
				m.met.convergence.Observe(took.Seconds())
				m.log.Info("gossip: no longer alone", "took", took)
			}
			aloneSince, backoff, wait = time.Time{}, m.cfg.JoinBackoffMin, m.cfg.RejoinInterval
			continue
		}
		if aloneSince.IsZero() {
			aloneSince = m.clock.Now()
			if joined {
				m.log.Warn("gossip: isolated (alone in the view); rejoining", "join_addrs", m.cfg.JoinAddrs)
			}
		}
		n, err := m.ml.Join(m.cfg.JoinAddrs)
		if err == nil && n > 0 {
			m.met.joins.WithLabelValues("ok").Inc()
			took := m.clock.Now().Sub(aloneSince)
			m.met.convergence.Observe(took.Seconds())
			m.log.Info("gossip: joined", "contacted", n, "took", took)
			joined = true
			aloneSince, backoff, wait = time.Time{}, m.cfg.JoinBackoffMin, m.cfg.RejoinInterval
			continue
		}
		m.met.joins.WithLabelValues("error").Inc()
		m.log.Warn("gossip: join failed; retrying", "join_addrs", m.cfg.JoinAddrs, "err", err, "retry_in", backoff)
		wait = backoff
		backoff = min(2*backoff, m.cfg.JoinBackoffMax)
	}
}

// alone reports whether no other member is alive in this node's view.
func (m *Membership) alone() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.members {
		if id != m.cfg.NodeName && (e.State == StateAlive || e.State == StateSuspect) {
			return false
		}
	}
	return true
}

func (m *Membership) running() (*memberlist.Memberlist, error) {
	switch {
	case m.closed:
		return nil, ErrClosed
	case !m.started:
		return nil, ErrNotStarted
	}
	return m.ml, nil
}

// UpdateMeta reads this node's metadata again (Config.Meta) and
// re-broadcasts it (memberlist UpdateNode). It waits for the broadcast to
// reach a peer until ctx's deadline (or UpdateTimeout without one); the
// local view and NodeMeta change at once either way. Metadata that does
// not Encode, or whose key is not this node's trusted key, is refused and
// the previous metadata kept.
func (m *Membership) UpdateMeta(ctx context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	ml, err := m.running()
	if err != nil {
		return err
	}
	if err := m.refreshMeta(); err != nil {
		return err
	}
	timeout := m.cfg.UpdateTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = dl.Sub(m.clock.Now())
		if timeout <= 0 {
			return fmt.Errorf("membership: update meta: %w", context.DeadlineExceeded)
		}
	}
	if err := ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("membership: update meta: %w", err)
	}
	return nil
}

// Leave marks this node's last accepted metadata Leaving (so peers record
// "left", not "failed"), broadcasts it and memberlist's leave message,
// waiting up to timeout for each, and stops the join loop. The node keeps
// answering gossip until Close.
func (m *Membership) Leave(timeout time.Duration) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	ml, err := m.running()
	if err != nil {
		return err
	}
	m.metaMu.Lock()
	m.leaving = true
	meta := m.meta // the last accepted meta: Leave must not fail on a bad new one
	meta.Leaving = true
	if err := m.signLocked(meta); err != nil {
		m.log.Warn("gossip: leaving flag not signed", "err", err)
	}
	m.metaMu.Unlock()
	if err := ml.UpdateNode(timeout); err != nil {
		m.log.Warn("gossip: leaving flag not confirmed", "err", err)
	}
	if m.cancel != nil {
		m.cancel() // no rejoin after a leave
	}
	if err := ml.Leave(timeout); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	return nil
}

// Close stops the join loop (waiting for a join attempt in flight, at most
// Timing.TCPTimeout per join address) and memberlist (without a leave
// broadcast: call Leave first for a graceful exit), and closes the Events
// channel. It is idempotent.
func (m *Membership) Close() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var err error
	if m.started {
		m.cancel()
		<-m.loopDone
		if e := m.ml.Shutdown(); e != nil {
			err = fmt.Errorf("membership: shutdown: %w", e)
		}
		m.mlLog.close()
	}
	m.refuseLog.Close()
	m.events.close()
	return err
}

// LocalAddr is the gossip address this node advertises (host:port); "" before Start.
func (m *Membership) LocalAddr() string {
	if p := m.local.Load(); p != nil {
		return *p
	}
	return ""
}

// HealthScore is memberlist's awareness score: 0 is healthy, higher means
// this node is missing its own probe deadlines (a liveness input, SPEC §5).
// 0 before Start.
func (m *Membership) HealthScore() int {
	ml := m.mlp.Load()
	if ml == nil {
		return 0
	}
	return ml.GetHealthScore()
}

// Members returns this node's view sorted by ID: itself and every member
// that passed the trust check when last heard from and still passes it
// against the current trust map, with dead and left members kept (a member
// refused after a trust-map reload disappears from the list).
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, e := range m.members {
		out = append(out, *e)
	}
	m.mu.Unlock()
	kept := out[:0]
	for _, e := range out {
		if e.Name == m.cfg.NodeName || m.trusted(e.Name, e.Meta) {
			kept = append(kept, e)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].ID < kept[j].ID })
	return kept
}

func (m *Membership) trusted(id string, meta Meta) bool {
	key, ok := m.cfg.Trust.Lookup(id)
	return ok && keyEqual(key, meta.PublicKey)
}

// AdvertisedKey is the public key member id advertises in its signed
// metadata, for the mesh handshake's second check; false unless id is in
// this node's view, still trusted, and has not left (its own signed
// Leaving flag). A member gossip calls dead still has its key: "dead" is
// an unsigned claim a gossip-key holder can forge, and must not cut a
// voter off the mesh (and so from Raft) by itself.
func (m *Membership) AdvertisedKey(id string) (ed25519.PublicKey, bool) {
	m.mu.Lock()
	e, ok := m.members[id]
	var meta Meta
	if ok {
		ok = e.State != StateLeft
		meta = e.Meta
	}
	m.mu.Unlock()
	if !ok || (id != m.cfg.NodeName && !m.trusted(id, meta)) {
		return nil, false
	}
	return meta.Key(), true
}

// Events delivers membership changes (this node's own join first). It never
// blocks memberlist: when EventBuffer events are waiting, the oldest is
// dropped (DroppedEvents counts them), so treat events as a signal and read
// Members for the state. Closed by Close.
func (m *Membership) Events() <-chan Event { return m.events.ch }

// DroppedEvents is how many events were dropped because the consumer fell behind.
func (m *Membership) DroppedEvents() uint64 { return m.events.droppedCount() }

// setMember records a member's new state (called from memberlist's event
// callbacks) and refreshes gossip_members, which counts trusted entries
// only. Dead and left members stay listed while they are trusted (at most
// one entry per trust-map name); once no longer trusted they are forgotten.
func (m *Membership) setMember(mem Member) {
	m.mu.Lock()
	m.members[mem.Name] = &mem
	counts := map[State]int{}
	for id, e := range m.members {
		if id != m.cfg.NodeName && !m.trusted(id, e.Meta) {
			if e.State == StateDead || e.State == StateLeft {
				delete(m.members, id) // gone and no longer trusted: forget it
			}
			continue
		}
		counts[e.State]++
	}
	// Set under the lock: two callbacks racing past an unlock could
	// otherwise leave the older counts in the gauge, and a reader of
	// Members would see a state the gauge does not count yet.
	for _, s := range []State{StateAlive, StateSuspect, StateDead, StateLeft} {
		m.met.members.WithLabelValues(s.String()).Set(float64(counts[s]))
	}
	m.mu.Unlock()
}

func (m *Membership) member(id string) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.members[id]
	if !ok {
		return Member{}, false
	}
	return *e, true
}

// advanceMeta moves a known member's metadata forward to meta, a newer
// one its own key signed, even when memberlist drops the message that
// carried it (an incarnation number, which nothing signs, made it look
// old): what a node signs reaches this view whatever a gossip-key holder
// did to its incarnation. The member's state and address stay.
func (m *Membership) advanceMeta(id string, meta Meta) {
	m.mu.Lock()
	e, ok := m.members[id]
	if !ok || meta.Seq <= e.Meta.Seq {
		m.mu.Unlock()
		return
	}
	e.Meta, e.ID = meta, nodeID(e.Name, meta)
	mem := *e
	m.mu.Unlock()
	m.events.push(Event{Type: EventUpdate, Member: mem})
}

// Refusal log lines: once per (name, reason, address), and at most
// refusalLogBurst per reason in each refusalLogInterval, then one summary
// with the count (internal/lograte).
const (
	refusalLogInterval = 10 * time.Second
	refusalLogBurst    = 5
)

// refuse counts a refusal (gossip_refused_total, or gossip_meta_refused_total
// for metadata that is not what the node's key signed) and logs it once
// per (name, reason, address) within the rate limit: a gossip-key holder
// can cause refusals at will.
func (m *Membership) refuse(name, addr, reason string) {
	if isMetaReason(reason) {
		m.met.metaRefused.WithLabelValues(reason).Inc()
	} else {
		m.met.refused.WithLabelValues(reason).Inc()
	}
	m.mu.Lock()
	key := reason + " " + addr
	seen := m.refusals[name] == key
	if !seen {
		if len(m.refusals) >= 4096 {
			m.refusals = map[string]string{}
		}
		m.refusals[name] = key
	}
	m.mu.Unlock()
	if !seen {
		m.refuseLog.Warn(reason, "gossip: peer refused", "peer", strconv.Quote(name), "addr", addr, "reason", reason)
	}
}

// localMeta is this node's current signed metadata.
func (m *Membership) localMeta() Meta {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	return m.meta
}
