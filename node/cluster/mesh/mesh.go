package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tckclk/tckclk/internal/lograte"
	"github.com/tckclk/tckclk/node/cluster/identity"
)

// Port range tried first when Config.BindPort is 0 (SPEC §5).
const (
	AutoPortFirst = 7950
	AutoPortLast  = 7959
	// EphemeralPort as Config.BindPort skips the range and lets the kernel
	// pick (tests, the in-process harness).
	EphemeralPort = -1
	// DefaultHandshakeTimeout bounds a whole handshake, TLS included.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultFirstByteTimeout bounds the wait for an inbound connection's
	// first byte: a peer writes as soon as it connects.
	DefaultFirstByteTimeout = time.Second
	// refusalLogInterval is the rate limit of refusal log lines: per
	// direction and reason, one line and then one summary with the count
	// per interval (the counters count every refusal).
	refusalLogInterval = 10 * time.Second
)

// Trust resolves a trust-map name (NAME, identity.TrustName of a NodeId)
// to its trusted public key (identity.Store).
type Trust interface {
	Lookup(id string) (ed25519.PublicKey, bool)
}

// Advertised resolves a gossip name (NAME, identity.TrustName of a
// NodeId) to the public key it advertises in gossip (the membership
// layer).
type Advertised interface {
	AdvertisedKey(id string) (ed25519.PublicKey, bool)
}

// Config configures a Mesh. NodeID, Key, GossipSecret and Trust are
// required.
type Config struct {
	// NodeID is this node's full NodeId, NAME or NAME~G (SPEC §3.4): the
	// id its hello carries and its peers' sessions are kept under. Key is
	// NAME's, the key Trust holds for identity.TrustName(NodeID).
	NodeID       string
	Key          ed25519.PrivateKey
	GossipSecret []byte // the memberlist key; the handshake's HMAC key is derived from it
	Trust        Trust
	Advertised   Advertised  // nil: skip the gossip-advertised key check (tests only)
	TLS          *tls.Config // nil: plaintext TCP (still authenticated); see LoadTLS
	BindAddr     string      // IP to bind; "" = 127.0.0.1
	// AdvertiseHost is the host put in Addr when BindAddr is unspecified
	// (0.0.0.0 or ::); required then.
	AdvertiseHost    string
	BindPort         int           // 0 = first free in 7950–7959, then ephemeral; EphemeralPort = ephemeral
	HandshakeTimeout time.Duration // 0 = DefaultHandshakeTimeout
	FirstByteTimeout time.Duration // inbound: 0 = DefaultFirstByteTimeout; at most HandshakeTimeout
	Dial             func(ctx context.Context, network, addr string) (net.Conn, error)
	WrapListener     func(net.Listener) net.Listener // optional (the test harness)
	Logger           *slog.Logger
	Registerer       prometheus.Registerer // optional
	Now              func() time.Time      // handshake deadlines; nil = time.Now
	Rand             io.Reader             // nonces; nil = crypto/rand.Reader
	// SessionEnded, if set, is called once per session that was the one in
	// use for its peer when it ended, after it is forgotten. peerGone: the
	// connection ended from the peer's side — EOF or reset, what the
	// kernel does to every connection of a process that exits or crashes —
	// as opposed to a close by this node, a refused record, or a keepalive
	// timeout. It runs on the session's goroutine and must not block.
	SessionEnded func(peerID string, peerGone bool)

	listen func(network, addr string) (net.Listener, error) // tests: nil = net.Listen
	// unsealed skips the record layer: only for the baseline of the
	// benchmarks and the tests that show what sealing prevents.
	unsealed bool
}

// ErrClosed is returned by a closed Mesh.
var ErrClosed = errors.New("mesh: closed")

// Mesh is one node's end of the authenticated mesh: a TCP listener, one
// yamux session per peer, and a listener per stream class.
type Mesh struct {
	cfg     Config
	pub     [ed25519.PublicKeySize]byte
	hkey    []byte
	addr    string
	ln      net.Listener
	log     *slog.Logger
	rl      *lograte.Logger // refusal lines, rate-limited
	met     *metrics
	ymx     *yamux.Config
	adm     *admission
	closing chan struct{}

	mu        sync.Mutex
	closed    bool
	peers     map[string]*session // by NodeId: the session in use
	all       map[*session]struct{}
	pending   map[net.Conn]struct{} // raw conns still in handshake
	dials     map[string]*dialCall
	listeners map[Class]*classListener
	wg        sync.WaitGroup
}

// session is one authenticated yamux session.
type session struct {
	peer     string // authenticated NodeId
	peerAddr string // the mesh address the peer advertised in its hello
	dialer   string // NodeId of the side that dialed
	id       string // identical on both ends (from the transcript)
	ys       *yamux.Session
}

type dialCall struct {
	done chan struct{}
	s    *session
	err  error
}

// Listen validates cfg, binds the mesh port and starts accepting.
func Listen(cfg Config) (*Mesh, error) {
	if err := identity.ValidNodeID(cfg.NodeID); err != nil {
		return nil, fmt.Errorf("mesh: Config.NodeID: %w", err)
	}
	if len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("mesh: Config.Key is %d bytes, want an ed25519 private key (%d)", len(cfg.Key), ed25519.PrivateKeySize)
	}
	if len(cfg.GossipSecret) < 16 {
		return nil, fmt.Errorf("mesh: Config.GossipSecret is %d bytes, want the memberlist key (16, 24 or 32)", len(cfg.GossipSecret))
	}
	if cfg.Trust == nil {
		return nil, errors.New("mesh: Config.Trust is required")
	}
	if cfg.BindPort < EphemeralPort || cfg.BindPort > 65535 {
		return nil, fmt.Errorf("mesh: Config.BindPort %d is out of range", cfg.BindPort)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.FirstByteTimeout <= 0 {
		cfg.FirstByteTimeout = DefaultFirstByteTimeout
	}
	cfg.FirstByteTimeout = min(cfg.FirstByteTimeout, cfg.HandshakeTimeout)
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.listen == nil {
		cfg.listen = net.Listen
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	ip := net.ParseIP(cfg.BindAddr)
	if ip == nil {
		return nil, fmt.Errorf("mesh: Config.BindAddr %q is not an IP address", cfg.BindAddr)
	}
	host := cfg.AdvertiseHost
	if host == "" {
		if ip.IsUnspecified() {
			return nil, fmt.Errorf("mesh: Config.BindAddr %s is unspecified; set AdvertiseHost to the address peers dial", cfg.BindAddr)
		}
		host = cfg.BindAddr
	}
	adm := newAdmission(maxHandshakes, maxHandshakesPerSource)
	met, err := newMetrics(cfg.Registerer, adm.inProgress)
	if err != nil {
		return nil, err
	}
	ln, err := bind(cfg)
	if err != nil {
		met.unregister()
		return nil, err
	}
	if cfg.WrapListener != nil {
		ln = cfg.WrapListener(ln)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	log := cfg.Logger.With("mesh_node", cfg.NodeID)
	m := &Mesh{
		cfg:       cfg,
		hkey:      handshakeKey(cfg.GossipSecret),
		addr:      net.JoinHostPort(host, port),
		ln:        ln,
		log:       log,
		rl:        lograte.New(log, lograte.Config{Interval: refusalLogInterval, Now: cfg.Now}),
		met:       met,
		adm:       adm,
		closing:   make(chan struct{}),
		peers:     map[string]*session{},
		all:       map[*session]struct{}{},
		pending:   map[net.Conn]struct{}{},
		dials:     map[string]*dialCall{},
		listeners: map[Class]*classListener{},
	}
	copy(m.pub[:], cfg.Key.Public().(ed25519.PublicKey))
	m.ymx = yamux.DefaultConfig()
	m.ymx.LogOutput = nil
	m.ymx.Logger = yamuxLogger{m.log}
	m.ymx.KeepAliveInterval = 15 * time.Second
	m.ymx.StreamCloseTimeout = 30 * time.Second
	m.ymx.StreamOpenTimeout = 30 * time.Second
	m.spawn(m.acceptLoop)
	m.log.Info("mesh: listening", "addr", m.addr, "tls", cfg.TLS != nil)
	return m, nil
}

// bind listens on BindPort, or on the first free port of 7950–7959 and
// then an ephemeral one.
func bind(cfg Config) (net.Listener, error) {
	at := func(port int) (net.Listener, error) {
		return cfg.listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(port)))
	}
	switch cfg.BindPort {
	case EphemeralPort:
		cfg.BindPort = 0
	case 0:
		for p := AutoPortFirst; p <= AutoPortLast; p++ {
			if ln, err := at(p); err == nil {
				return ln, nil
			}
		}
	}
	ln, err := at(cfg.BindPort)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	return ln, nil
}

// Addr is the mesh address to advertise in gossip (host:port).
func (m *Mesh) Addr() string { return m.addr }

// spawn runs f on a goroutine the Mesh owns; false once closed.
func (m *Mesh) spawn(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// Close closes the listener, every handshake in progress, every session
// and every class listener, and waits for the mesh's goroutines.
func (m *Mesh) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.closing)
	err := m.ln.Close()
	for c := range m.pending {
		c.Close()
	}
	sessions := make([]*session, 0, len(m.all))
	for s := range m.all {
		sessions = append(sessions, s)
	}
	ls := make([]*classListener, 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	for _, s := range sessions {
		s.ys.Close()
	}
	for _, l := range ls {
		l.Close()
	}
	m.wg.Wait()
	m.rl.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Listener returns the listener of inbound streams of class c; Accept
// returns *Stream values. A closed listener is replaced by a fresh one on
// the next call.
func (m *Mesh) Listener(c Class) net.Listener {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.listeners[c]; l != nil {
		return l
	}
	l := &classListener{m: m, class: c, ch: make(chan *Stream, 16), done: make(chan struct{})}
	if m.closed || !c.Valid() {
		close(l.done) // a dead listener: Accept fails at once
		return l
	}
	m.listeners[c] = l
	return l
}

// Peer describes one session in use.
type Peer struct {
	ID       string // authenticated NodeId
	Addr     string // the mesh address the peer advertised
	Outbound bool   // this node dialed
	Session  string // session id, the same on both ends
}

// Peers lists the sessions in use, by NodeId.
func (m *Mesh) Peers() []Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Peer, 0, len(m.peers))
	for _, s := range m.peers {
		out = append(out, Peer{ID: s.peer, Addr: s.peerAddr, Outbound: s.dialer == m.cfg.NodeID, Session: s.id})
	}
	slices.SortFunc(out, func(a, b Peer) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out
}

// Dial opens a stream of class c to the peer at addr. wantID "" accepts
// any trusted peer; otherwise the authenticated NodeId must equal wantID,
// generation included: a dial for NAME never reaches NAME~2 (which
// speaks with the same key), nor the other way round. An
// existing session to that peer (by id, or by its advertised address) is
// reused; concurrent Dials to one address share one handshake.
func (m *Mesh) Dial(ctx context.Context, addr, wantID string, c Class) (*Stream, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("%w %d", ErrClass, byte(c))
	}
	if wantID != "" {
		if err := identity.ValidNodeID(wantID); err != nil {
			return nil, fmt.Errorf("mesh: Dial: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		s := m.sessionFor(addr, wantID)
		if s == nil {
			var err error
			if s, err = m.connect(ctx, addr, wantID); err != nil {
				return nil, err
			}
		}
		ys, err := s.ys.OpenStream()
		if err != nil {
			// The session closed under us (the peer went away, or it lost
			// a simultaneous-dial tie-break, possibly while its
			// replacement was losing one too): try again, a bounded
			// number of times.
			if attempt < 5 && ctx.Err() == nil {
				s.ys.Close() // make sure sessionFor skips it now
				continue
			}
			return nil, fmt.Errorf("mesh: opening a %s stream to %q: %w", c, s.peer, err)
		}
		if _, err := ys.Write([]byte{byte(c)}); err != nil {
			ys.Close()
			if attempt < 5 && ctx.Err() == nil && s.ys.IsClosed() {
				continue // the session lost a tie-break under us
			}
			return nil, fmt.Errorf("mesh: opening a %s stream to %q: %w", c, s.peer, err)
		}
		return &Stream{Stream: ys, peer: s.peer, class: c}, nil
	}
}

// sessionFor finds the live session for wantID, or (wantID "") the one to
// the peer that advertised addr.
func (m *Mesh) sessionFor(addr, wantID string) *session {
	m.mu.Lock()
	defer m.mu.Unlock()
	if wantID != "" {
		if s := m.peers[wantID]; s != nil && !s.ys.IsClosed() {
			return s
		}
		return nil
	}
	for _, s := range m.peers {
		if s.peerAddr == addr && !s.ys.IsClosed() {
			return s
		}
	}
	return nil
}

// connect dials addr and runs the handshake, once for all concurrent
// callers with the same (addr, wantID).
func (m *Mesh) connect(ctx context.Context, addr, wantID string) (*session, error) {
	key := addr + "\x00" + wantID
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	if c := m.dials[key]; c != nil {
		m.mu.Unlock()
		select {
		case <-c.done:
			return c.s, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &dialCall{done: make(chan struct{})}
	m.dials[key] = c
	m.wg.Add(1) // Close waits for this dial's handshake to end
	m.mu.Unlock()
	defer m.wg.Done()
	c.s, c.err = m.dialOnce(ctx, addr, wantID)
	m.mu.Lock()
	delete(m.dials, key)
	m.mu.Unlock()
	close(c.done)
	return c.s, c.err
}

func (m *Mesh) dialOnce(ctx context.Context, addr, wantID string) (*session, error) {
	deadline := m.cfg.Now().Add(m.cfg.HandshakeTimeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	raw, err := m.cfg.Dial(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mesh: dialing %s: %w", addr, err)
	}
	if !m.track(raw) {
		raw.Close()
		return nil, ErrClosed
	}
	stop := context.AfterFunc(dctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) }) // a closed conn is fine
	conn, peer, sid, err := m.handshake(dctx, raw, deadline, nil, wantID)
	if !stop() && err == nil { // the context ended after all: the deadline may be poisoned
		err = fmt.Errorf("mesh: dialing %s: %w", addr, context.Cause(dctx))
	}
	m.untrack(raw)
	if err != nil {
		raw.Close()
		if ctx.Err() != nil && classify(err) == ReasonTimeout && m.cfg.Now().Before(deadline) {
			err = fmt.Errorf("%w (%s)", ctx.Err(), err.Error())
		}
		return nil, err
	}
	return m.startSession(conn, peer, m.cfg.NodeID, sid, true)
}

func (m *Mesh) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.pending[c] = struct{}{}
	return true
}

func (m *Mesh) untrack(c net.Conn) {
	m.mu.Lock()
	delete(m.pending, c)
	m.mu.Unlock()
}

// acceptLoop accepts TCP connections until the listener closes.
func (m *Mesh) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closing:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.log.Error("mesh: listener closed unexpectedly", "err", err)
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.rl.Warn("accept", "mesh: accept failed", "err", err, "retry_in", backoff) // e.g. out of descriptors under a flood
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-m.closing:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		if !m.track(c) {
			c.Close()
			return
		}
		h, victim := m.adm.admit(c)
		if victim != nil {
			victim.conn.Close() // its handshake goroutine counts and logs it
		}
		m.spawn(func() { m.serveInbound(h) })
	}
}

func (m *Mesh) serveInbound(h *inflight) {
	raw := h.conn
	deadline := m.cfg.Now().Add(m.cfg.HandshakeTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn, peer, sid, err := m.handshake(ctx, raw, deadline, h, "")
	m.untrack(raw)
	if err != nil {
		raw.Close()
		return
	}
	if _, err := m.startSession(conn, peer, peer.ID, sid, false); err != nil {
		m.log.Debug("mesh: inbound session not started", "peer_id", peer.ID, "err", err)
	}
}

// handshake runs one side of SPEC §5's handshake on raw (TLS first when
// configured) and returns the conn to multiplex, the peer's hello and the
// session id. in is the inbound handshake's place in the admission table;
// nil when this node dials. Failures are logged and counted here.
func (m *Mesh) handshake(ctx context.Context, raw net.Conn, deadline time.Time, in *inflight, wantID string) (net.Conn, Hello, string, error) {
	dir := "inbound"
	if in == nil {
		dir = "outbound"
	}
	var peer Hello
	conn, sid, err := m.handshakeConn(ctx, raw, deadline, in, wantID, &peer)
	if in != nil && !m.adm.done(in) {
		// It gave its place up to a newer connection, which closed it.
		err = fail(ReasonBusy, "%s", in.why)
	}
	if err != nil {
		he := &HandshakeError{Reason: classify(err), Addr: raw.RemoteAddr().String(), ID: peer.ID, Err: err}
		select {
		case <-m.closing:
			he.Reason = ReasonClosed
		default:
		}
		m.refuse(he, dir)
		return nil, peer, "", he
	}
	m.met.handshakes[ReasonOK].Inc()
	m.log.Debug("mesh: handshake ok", "direction", dir, "peer_addr", raw.RemoteAddr().String(), "peer_id", peer.ID, "session", sid)
	return conn, peer, sid, nil
}

// recordRefused counts and logs a sealed record that failed to open; its
// connection is closed already, and with it the session.
func (m *Mesh) recordRefused(peerID, sid string, err error) {
	m.met.records.Inc()
	m.rl.Warn("record", "mesh: session closed: a sealed record was refused (tampering on the path, or a broken connection)", "peer_id", peerID, "session", sid, "err", err)
}

// refuse counts every refusal and logs it, at most one line per direction
// and reason per refusalLogInterval plus a summary with the count:
// anyone who can reach the mesh port can cause refusals.
func (m *Mesh) refuse(he *HandshakeError, dir string) {
	m.met.handshakes[he.Reason].Inc()
	m.rl.Warn(dir+" "+string(he.Reason), "mesh: handshake refused", "direction", dir, "peer_addr", he.Addr, "peer_id", he.ID, "reason", string(he.Reason), "err", he.Err)
}
