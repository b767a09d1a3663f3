package mesh

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/tckclk/tckclk/node/cluster/identity"
)

// handshakeConn runs the frames of SPEC §5's handshake (after TLS, when
// configured) under one deadline, the dialer proving itself first:
//
//	dialer → acceptor: hello(dialer)
//	acceptor → dialer: hello(acceptor)
//	dialer → acceptor: proof(dialer)
//	acceptor → dialer: proof(acceptor)   only once the dialer's verified
//
// and returns the connection sealed under the session's keys (seal.go)
// with the session id. *peer is filled as soon as the peer's hello
// parses, for the logs. in is the inbound handshake's place in the
// admission table (nil: dialing); its progress is recorded there, and its
// first byte must arrive within FirstByteTimeout.
func (m *Mesh) handshakeConn(ctx context.Context, raw net.Conn, deadline time.Time, in *inflight, wantID string, peer *Hello) (net.Conn, string, error) {
	dialer := in == nil
	if err := raw.SetDeadline(deadline); err != nil {
		return nil, "", err
	}
	conn := raw
	if !dialer {
		first := m.cfg.Now().Add(m.cfg.FirstByteTimeout)
		if err := raw.SetReadDeadline(first); err != nil {
			return nil, "", err
		}
		conn = &firstByteConn{Conn: raw, m: m, in: in, deadline: deadline}
	}
	tlsOn := m.cfg.TLS != nil
	if tlsOn {
		var tc *tls.Conn
		if dialer {
			tc = tls.Client(conn, m.cfg.TLS)
		} else {
			tc = tls.Server(conn, m.cfg.TLS)
		}
		if err := tc.HandshakeContext(ctx); err != nil {
			if classify(err) == ReasonTimeout {
				return nil, "", err
			}
			return nil, "", fail(ReasonTLS, "TLS handshake: %v", err)
		}
		conn = tc
		m.advance(in, progressTLS)
	}
	hs := &handshakeState{conn: conn, tlsOn: tlsOn, peer: peer}
	if err := hs.start(m); err != nil {
		return nil, "", err
	}
	var err error
	if dialer {
		err = m.dialerFrames(hs, wantID)
	} else {
		err = m.acceptorFrames(hs, in)
	}
	if err != nil {
		return nil, "", err
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, "", err
	}
	if _, ok := conn.(*firstByteConn); ok {
		conn = raw // its job is done
	}
	sid := sessionID(hs.t)
	if m.cfg.unsealed {
		return conn, sid, nil
	}
	d2a, a2d, err := SessionKeys(hs.shared, m.cfg.GossipSecret, hs.t)
	clear(hs.shared)
	if err != nil {
		return nil, "", err
	}
	out, inKey := d2a, a2d
	if !dialer {
		out, inKey = a2d, d2a
	}
	sc, err := newSealedConn(conn, out, inKey, func(err error) { m.recordRefused(peer.ID, sid, err) })
	clear(d2a)
	clear(a2d)
	if err != nil {
		return nil, "", err
	}
	return sc, sid, nil
}

// handshakeState is one side's handshake in progress.
type handshakeState struct {
	conn   net.Conn
	tlsOn  bool
	me     Hello
	eph    *ecdh.PrivateKey
	peer   *Hello
	t      []byte // the transcript, once both hellos are known
	shared []byte // the X25519 secret of the two shares
}

// start draws this side's nonce and ephemeral key.
func (hs *handshakeState) start(m *Mesh) error {
	hs.me = Hello{ID: m.cfg.NodeID, Addr: m.addr, Key: m.pub}
	if _, err := io.ReadFull(m.cfg.Rand, hs.me.Nonce[:]); err != nil {
		return fmt.Errorf("mesh: drawing a nonce: %w", err)
	}
	eph, err := ecdh.X25519().GenerateKey(m.cfg.Rand)
	if err != nil {
		return fmt.Errorf("mesh: drawing a key share: %w", err)
	}
	hs.eph = eph
	copy(hs.me.Share[:], eph.PublicKey().Bytes())
	return nil
}

func (hs *handshakeState) write(body []byte) error {
	_, err := hs.conn.Write(AppendFrame(nil, body))
	return err
}

// readHello reads and checks the peer's hello, and agrees on the shared
// secret with its key share.
func (m *Mesh) readHello(hs *handshakeState, read func() ([]byte, error), wantID string) error {
	b, err := read()
	if err != nil {
		return err
	}
	h, err := DecodeHello(b)
	if err != nil {
		return err
	}
	*hs.peer = h
	if err := m.checkPeer(h, wantID); err != nil {
		return err
	}
	pub, err := ecdh.X25519().NewPublicKey(h.Share[:])
	if err == nil {
		hs.shared, err = hs.eph.ECDH(pub)
	}
	if err != nil {
		return fail(ReasonFormat, "the peer's key share is unusable: %v", err)
	}
	return nil
}

// readProof reads the peer's proof and checks it, made in role.
func (m *Mesh) readProof(hs *handshakeState, read func() ([]byte, error), role string) error {
	b, err := read()
	if err != nil {
		return err
	}
	p, err := DecodeProof(b)
	if err != nil {
		return err
	}
	return checkProof(m.hkey, hs.peer.Key[:], role, hs.t, p)
}

func (m *Mesh) dialerFrames(hs *handshakeState, wantID string) error {
	if err := hs.write(EncodeHello(hs.me)); err != nil {
		return err
	}
	read := func() ([]byte, error) {
		b, err := readFrame(hs.conn, hs.tlsOn)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil, fail(ReasonRefused, "the peer closed the connection: it refused this node (its log says why)")
		}
		return b, err
	}
	if err := m.readHello(hs, read, wantID); err != nil {
		return err
	}
	hs.t = transcript(hs.me, *hs.peer)
	if err := hs.write(EncodeProof(makeProof(m.hkey, m.cfg.Key, roleDialer, hs.t))); err != nil {
		return err
	}
	return m.readProof(hs, read, roleAcceptor)
}

func (m *Mesh) acceptorFrames(hs *handshakeState, in *inflight) error {
	read := func() ([]byte, error) { return readFrame(hs.conn, hs.tlsOn) }
	if err := m.readHello(hs, read, ""); err != nil {
		return err
	}
	m.advance(in, progressHello)
	hs.t = transcript(*hs.peer, hs.me)
	if err := hs.write(EncodeHello(hs.me)); err != nil {
		return err
	}
	// Nothing that proves this node goes out before the dialer proved
	// itself.
	if err := m.readProof(hs, read, roleDialer); err != nil {
		return err
	}
	return hs.write(EncodeProof(makeProof(m.hkey, m.cfg.Key, roleAcceptor, hs.t)))
}

// advance records an inbound handshake's progress (no-op when dialing).
func (m *Mesh) advance(in *inflight, p int) {
	if in != nil {
		m.adm.advance(in, p)
	}
}

// firstByteConn lifts the short first-byte read deadline of an inbound
// connection to the handshake's deadline once a byte has arrived, and
// records that progress.
type firstByteConn struct {
	net.Conn
	m        *Mesh
	in       *inflight
	deadline time.Time
	got      bool
}

func (c *firstByteConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.got {
		c.got = true
		c.m.advance(c.in, progressBytes)
		if derr := c.Conn.SetReadDeadline(c.deadline); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

// checkPeer applies the identity rules to a peer's hello: not ourselves
// (no generation of our name), the wanted NodeId exactly, and the key of
// its name (identity.TrustName: NAME~G speaks with NAME's key) in the
// trust map and in gossip. A hello naming another node's NodeId fails the
// key checks: the key is looked up by the name inside the claimed NodeId.
func (m *Mesh) checkPeer(h Hello, wantID string) error {
	name := identity.TrustName(h.ID)
	if name == identity.TrustName(m.cfg.NodeID) {
		return fail(ReasonSelf, "the peer claims %q, a generation of this node's own name %q (a reflected handshake, or two nodes sharing a name)", h.ID, m.cfg.NodeID)
	}
	if wantID != "" && h.ID != wantID {
		return fail(ReasonWrongPeer, "dialed %q but the peer is %q", wantID, h.ID)
	}
	trusted, ok := m.cfg.Trust.Lookup(name)
	if !ok {
		return fail(ReasonUntrusted, "%q (of %q) is not in cluster.internode.trusted_peer_keys", name, h.ID)
	}
	if !bytes.Equal(trusted, h.Key[:]) {
		return fail(ReasonKeyMismatch, "%q presents a public key other than the entry of %q in cluster.internode.trusted_peer_keys", h.ID, name)
	}
	if m.cfg.Advertised == nil {
		return nil
	}
	adv, ok := m.cfg.Advertised.AdvertisedKey(name)
	if !ok {
		return fail(ReasonUnadvertised, "%q advertises no identity key in gossip (not a live member)", h.ID)
	}
	if !bytes.Equal(adv, h.Key[:]) {
		return fail(ReasonAdvertisedMismatch, "%q presents a public key other than the one %q advertises in gossip", h.ID, name)
	}
	return nil
}

// startSession multiplexes an authenticated conn and adopts the session;
// it returns the session now in use for that peer (this one, or the one
// a simultaneous dial left standing).
func (m *Mesh) startSession(conn net.Conn, peer Hello, dialerID, sid string, outbound bool) (*session, error) {
	var ys *yamux.Session
	var err error
	if outbound {
		ys, err = yamux.Client(conn, m.ymx)
	} else {
		ys, err = yamux.Server(conn, m.ymx)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("mesh: %w", err)
	}
	s := &session{peer: peer.ID, peerAddr: peer.Addr, dialer: dialerID, id: sid, ys: ys}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		ys.Close()
		return nil, ErrClosed
	}
	m.all[s] = struct{}{}
	m.wg.Add(1)
	go m.serveSession(s)
	m.mu.Unlock()
	return m.adopt(s), nil
}

// choice is what adopt does with a new session given the one in use.
type choice int

const (
	keepNew  choice = iota // install the new session, close the old one
	probeOld               // keep the old one if it still answers a ping, else keepNew
)

// decide is the tie-break that keeps one session per peer pair; both ends
// reach the same verdict from the same two sessions. Sessions rank by
// (not dialed by the lower NodeId, session id); the lower rank stays. A
// new session that ranks higher still replaces an old one that no longer
// answers (the peer restarted and the old TCP connection is a ghost).
func decide(self, peer string, old, nu *session) choice {
	if old == nil || old.ys.IsClosed() {
		return keepNew
	}
	preferred := min(self, peer)
	rank := func(s *session) (int, string) {
		if s.dialer == preferred {
			return 0, s.id
		}
		return 1, s.id
	}
	oldRank, oldID := rank(old)
	newRank, newID := rank(nu)
	if newRank < oldRank || newRank == oldRank && newID < oldID {
		return keepNew
	}
	return probeOld
}

func (m *Mesh) adopt(s *session) *session {
	for {
		m.mu.Lock()
		old := m.peers[s.peer]
		if m.closed || old == s {
			m.mu.Unlock()
			return s
		}
		if decide(m.cfg.NodeID, s.peer, old, s) == keepNew {
			m.install(s, old)
			return s
		}
		m.mu.Unlock()
		alive := m.alive(old)
		m.mu.Lock()
		if m.peers[s.peer] != old {
			m.mu.Unlock()
			continue // someone else changed it meanwhile: decide again
		}
		if !alive {
			m.log.Info("mesh: replacing a session that no longer answers", "peer_id", s.peer, "old_session", old.id, "session", s.id)
			m.install(s, old)
			return s
		}
		m.mu.Unlock()
		m.log.Info("mesh: simultaneous dial; keeping the other session", "peer_id", s.peer, "kept", old.id, "closed", s.id)
		s.ys.Close()
		return old
	}
}

// install makes s the session for its peer and closes old; called with
// m.mu held, returns with it released.
func (m *Mesh) install(s, old *session) {
	m.peers[s.peer] = s
	m.met.sessions.Set(float64(len(m.peers)))
	m.mu.Unlock()
	if old != nil {
		old.ys.Close()
	}
}

// alive pings s, closing it when no answer comes within the handshake
// timeout.
func (m *Mesh) alive(s *session) bool {
	res := make(chan error, 1)
	if !m.spawn(func() { _, err := s.ys.Ping(); res <- err }) {
		return false
	}
	t := time.NewTimer(m.cfg.HandshakeTimeout)
	defer t.Stop()
	select {
	case err := <-res:
		return err == nil
	case <-t.C:
		s.ys.Close()
		return false
	case <-m.closing:
		return false
	}
}

// serveSession accepts the peer's streams until the session ends, then
// forgets the session.
func (m *Mesh) serveSession(s *session) {
	defer m.wg.Done()
	var end error
	for {
		st, err := s.ys.AcceptStream()
		if err != nil {
			end = err
			break
		}
		if !m.spawn(func() { m.serveStream(s, st) }) {
			st.Close()
		}
	}
	s.ys.Close()
	m.mu.Lock()
	delete(m.all, s)
	inUse := m.peers[s.peer] == s
	if inUse {
		delete(m.peers, s.peer)
	}
	m.met.sessions.Set(float64(len(m.peers)))
	m.mu.Unlock()
	gone := peerGone(end)
	m.log.Info("mesh: session closed", "peer_id", s.peer, "session", s.id, "peer_gone", gone)
	if inUse && m.cfg.SessionEnded != nil {
		m.cfg.SessionEnded(s.peer, gone)
	}
}

// peerGone: a session ended with err because its connection ended from the
// peer's side (EOF, possibly mid-record, a reset, or a write into a closed
// connection), not because this node closed it (yamux.ErrSessionShutdown),
// refused a record or timed out.
func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// serveStream reads an inbound stream's class byte and hands the stream to
// that class's listener.
func (m *Mesh) serveStream(s *session, st *yamux.Stream) {
	var b [1]byte
	_ = st.SetReadDeadline(m.cfg.Now().Add(m.cfg.HandshakeTimeout)) // yamux streams always take it
	if _, err := io.ReadFull(st, b[:]); err != nil {
		st.Close()
		m.met.refused[refusedNoClass].Inc()
		m.log.Warn("mesh: inbound stream without a class byte", "peer_id", s.peer, "err", err)
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	c := Class(b[0])
	if !c.Valid() {
		st.Close()
		m.met.refused[refusedUnknownClass].Inc()
		m.log.Warn("mesh: inbound stream of an unassigned class", "peer_id", s.peer, "class", int(b[0]))
		return
	}
	m.mu.Lock()
	l := m.listeners[c]
	m.mu.Unlock()
	if l == nil {
		st.Close()
		m.met.refused[refusedNoListener].Inc()
		m.log.Warn("mesh: inbound stream for a class nobody listens to", "peer_id", s.peer, "class", c.String())
		return
	}
	l.deliver(&Stream{Stream: st, peer: s.peer, class: c})
}

// yamuxLogger sends yamux's log lines to the mesh's slog logger; the
// lines a session's own Close provokes go to Debug.
type yamuxLogger struct{ l *slog.Logger }

func (y yamuxLogger) log(msg string) {
	level := slog.LevelWarn
	if strings.Contains(msg, net.ErrClosed.Error()) {
		level = slog.LevelDebug
	}
	y.l.Log(context.Background(), level, "mesh: yamux: "+msg)
}

func (y yamuxLogger) Print(v ...any)                 { y.log(fmt.Sprint(v...)) }
func (y yamuxLogger) Printf(format string, v ...any) { y.log(fmt.Sprintf(format, v...)) }
func (y yamuxLogger) Println(v ...any)               { y.log(fmt.Sprint(v...)) }
