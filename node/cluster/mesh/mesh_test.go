package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// SPEC §5 Mesh: the handshake succeeds both ways, streams carry bytes,
// and the session is reused in both directions.
func TestHandshakeBothWays(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	a := start(t, testConfig(t, "node-a", trust))
	b := start(t, testConfig(t, "node-b", trust))
	lb := b.Listener(ClassRaft) // listen before the first stream arrives
	ab := dial(t, a, b, "node-b", ClassRaft)
	got := accept(t, lb)
	if got.PeerID() != "node-a" || ab.PeerID() != "node-b" || got.Class() != ClassRaft {
		t.Fatalf("peer ids %q %q class %v", got.PeerID(), ab.PeerID(), got.Class())
	}
	echo(t, ab, got)
	la := a.Listener(ClassForward)
	ba := dial(t, b, a, "", ClassForward) // by address: reuses the inbound session
	echo(t, ba, accept(t, la))
	pa, pb := a.Peers(), b.Peers()
	if len(pa) != 1 || len(pb) != 1 || pa[0].Session != pb[0].Session || !pa[0].Outbound || pb[0].Outbound {
		t.Fatalf("peers a=%+v b=%+v", pa, pb)
	}
	if pa[0].ID != "node-b" || pa[0].Addr != b.Addr() || pb[0].Addr != a.Addr() {
		t.Fatalf("peers a=%+v b=%+v", pa, pb)
	}
	if a.handshakes(t, ReasonOK) != 1 || b.handshakes(t, ReasonOK) != 1 {
		t.Fatalf("ok handshakes a=%v b=%v", a.handshakes(t, ReasonOK), b.handshakes(t, ReasonOK))
	}
	if b.metric(t, "mesh_sessions", "", "") != 1 {
		t.Fatal("mesh_sessions is not 1")
	}
}

// SPEC §5 Mesh: the first byte of a stream names its class; each class
// reaches its own listener, unassigned or unserved classes are closed and
// counted.
func TestStreamClasses(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	a := start(t, testConfig(t, "node-a", trust))
	b := start(t, testConfig(t, "node-b", trust))
	for _, c := range []Class{ClassRaft, ClassForward, ClassBootstrap} {
		l := b.Listener(c)
		s := dial(t, a, b, "node-b", c)
		got := accept(t, l)
		if got.Class() != c {
			t.Fatalf("class %v arrived as %v", c, got.Class())
		}
		echo(t, s, got)
	}
	if _, err := a.Dial(context.Background(), b.Addr(), "", Class(9)); !errors.Is(err, ErrClass) {
		t.Fatalf("Dial with class 9: %v", err)
	}
	// Raw streams with an unassigned class byte, and with none at all.
	sess := a.sessionFor("", "node-b")
	for _, first := range [][]byte{{0}, {9}, {255}} {
		st, err := sess.ys.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		st.Write(first)
		st.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := st.Read(make([]byte, 1)); err == nil {
			t.Fatalf("stream of class %d was not closed", first[0])
		}
		st.Close()
	}
	eventually(t, "unknown_class counted 3 times", func() bool {
		return b.metric(t, "mesh_streams_refused_total", "reason", refusedUnknownClass) == 3
	})
	// A listener closed: its class has no listener until asked again.
	l := b.Listener(ClassForward)
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v", err)
	}
	s := dial(t, a, b, "node-b", ClassForward)
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Fatal("stream to a closed listener stayed open")
	}
	eventually(t, "no_listener counted", func() bool {
		return b.metric(t, "mesh_streams_refused_total", "reason", refusedNoListener) == 1
	})
	l2 := b.Listener(ClassForward)
	if l2 == l {
		t.Fatal("Listener returned the closed listener")
	}
	echo(t, dial(t, a, b, "node-b", ClassForward), accept(t, l2))
	// A stream that never names its class is dropped after the timeout.
	st, err := sess.ys.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Write(nil)
	eventually(t, "no_class counted", func() bool {
		return b.metric(t, "mesh_streams_refused_total", "reason", refusedNoClass) >= 1
	})
}

// SPEC §5 Mesh: wantID must match the authenticated id.
func TestDialWrongPeer(t *testing.T) {
	trust := newKeyMap("node-a", "node-b", "node-c")
	a := start(t, testConfig(t, "node-a", trust))
	b := start(t, testConfig(t, "node-b", trust))
	_, err := a.Dial(context.Background(), b.Addr(), "node-c", ClassRaft)
	var he *HandshakeError
	if !errors.As(err, &he) || he.Reason != ReasonWrongPeer || he.ID != "node-b" {
		t.Fatalf("got %v", err)
	}
	if a.handshakes(t, ReasonWrongPeer) != 1 || len(a.Peers()) != 0 {
		t.Fatal("wrong_peer not counted, or a session kept")
	}
}

// SPEC §5 Mesh: one session per peer pair even when both dial at once.
func TestSimultaneousDial(t *testing.T) {
	for round := range 8 {
		trust := newKeyMap("node-a", "node-b")
		a := start(t, testConfig(t, "node-a", trust))
		b := start(t, testConfig(t, "node-b", trust))
		var wg sync.WaitGroup
		begin := make(chan struct{})
		errs := make(chan error, 2)
		for _, p := range [][2]*node{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-begin
				s, err := p[0].Dial(context.Background(), p[1].Addr(), "", ClassRaft)
				if err == nil {
					s.Close()
				}
				errs <- err
			}()
		}
		close(begin)
		wg.Wait()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		eventually(t, "one shared session", func() bool {
			pa, pb := a.Peers(), b.Peers()
			return len(pa) == 1 && len(pb) == 1 && pa[0].Session == pb[0].Session
		})
		// The survivor carries streams both ways.
		lb, la := b.Listener(ClassForward), a.Listener(ClassForward)
		echo(t, dial(t, a, b, "node-b", ClassForward), accept(t, lb))
		echo(t, dial(t, b, a, "node-a", ClassForward), accept(t, la))
		if pa := a.Peers(); len(pa) != 1 {
			t.Fatalf("round %d: a has %d sessions", round, len(pa))
		}
		a.Close()
		b.Close()
	}
}

// The tie-break: both ends decide alike, whatever the arrival order.
func TestDecide(t *testing.T) {
	mk := func(dialer, id string) *session { return &session{dialer: dialer, id: id, ys: openYamux(t)} }
	byA1, byA2, byB := mk("a", "11"), mk("a", "22"), mk("b", "00")
	cases := []struct {
		name     string
		old, nu  *session
		atA, atB choice
	}{
		{"nothing yet", nil, byB, keepNew, keepNew},
		{"lower id's dial arrives second", byB, byA1, keepNew, keepNew},
		{"lower id's dial arrives first", byA1, byB, probeOld, probeOld},
		{"same dialer, lower session id second", byA2, byA1, keepNew, keepNew},
		{"same dialer, higher session id second", byA1, byA2, probeOld, probeOld},
	}
	for _, c := range cases {
		if got := decide("a", "b", c.old, c.nu); got != c.atA {
			t.Errorf("%s at a: %v", c.name, got)
		}
		if got := decide("b", "a", c.old, c.nu); got != c.atB {
			t.Errorf("%s at b: %v", c.name, got)
		}
	}
	closed := mk("b", "00")
	closed.ys.Close()
	if decide("a", "b", closed, byA2) != keepNew {
		t.Error("a closed old session was kept")
	}
}

// SPEC §5 Mesh: a peer closing ends the session on the other side; Dial
// then fails; a restarted peer (new port, same id) is reached again.
func TestPeerClosing(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	a := start(t, testConfig(t, "node-a", trust))
	b := start(t, testConfig(t, "node-b", trust))
	lb := b.Listener(ClassRaft)
	s := dial(t, a, b, "node-b", ClassRaft)
	echo(t, s, accept(t, lb))
	oldAddr := b.Addr()
	b.Close()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Fatal("stream survived the peer's Close")
	}
	eventually(t, "session forgotten", func() bool { return len(a.Peers()) == 0 })
	if _, err := a.Dial(context.Background(), oldAddr, "node-b", ClassRaft); err == nil {
		t.Fatal("Dial to a closed peer succeeded")
	}
	b2 := start(t, testConfig(t, "node-b", trust))
	lb2 := b2.Listener(ClassRaft)
	echo(t, dial(t, a, b2, "node-b", ClassRaft), accept(t, lb2))
	if _, err := b.Dial(context.Background(), a.Addr(), "", ClassRaft); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial on a closed mesh: %v", err)
	}
}

// SPEC §5 Mesh: the port is the first free one of 7950–7959, then an
// ephemeral one.
func TestAutoPort(t *testing.T) {
	trust := newKeyMap("node-a")
	for _, c := range []struct {
		name  string
		taken func(port string) bool
		want  string // "" = ephemeral
	}{
		{"first free", func(p string) bool { return p == "7950" || p == "7951" }, "7952"},
		{"all taken", func(p string) bool { return p != "0" }, ""},
	} {
		var tried []string
		cfg := testConfig(t, "node-a", trust)
		cfg.BindPort = 0
		cfg.listen = func(network, addr string) (net.Listener, error) {
			_, port, _ := net.SplitHostPort(addr)
			tried = append(tried, port)
			if c.taken(port) {
				return nil, errors.New("address already in use")
			}
			return net.Listen(network, "127.0.0.1:0") // never the real port: the machine is shared
		}
		m := start(t, cfg)
		last := tried[len(tried)-1]
		if c.want != "" && last != c.want || c.want == "" && (last != "0" || len(tried) != 11) {
			t.Fatalf("%s: tried %v", c.name, tried)
		}
		m.Close()
	}
}

// Bad configurations are refused by Listen.
func TestListenConfig(t *testing.T) {
	trust := newKeyMap("node-a")
	for name, mod := range map[string]func(*Config){
		"bad id":           func(c *Config) { c.NodeID = "-x" },
		"no key":           func(c *Config) { c.Key = nil },
		"short secret":     func(c *Config) { c.GossipSecret = []byte("short") },
		"no trust":         func(c *Config) { c.Trust = nil },
		"bad port":         func(c *Config) { c.BindPort = 70000 },
		"bad bind addr":    func(c *Config) { c.BindAddr = "localhost" },
		"unspecified bind": func(c *Config) { c.BindAddr = "0.0.0.0" },
	} {
		cfg := testConfig(t, "node-a", trust)
		mod(&cfg)
		if m, err := Listen(cfg); err == nil {
			m.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	cfg := testConfig(t, "node-a", trust)
	cfg.BindAddr, cfg.AdvertiseHost = "0.0.0.0", "127.0.0.1"
	m := start(t, cfg)
	if host, _, _ := net.SplitHostPort(m.Addr()); host != "127.0.0.1" {
		t.Fatalf("Addr %s", m.Addr())
	}
}

// sessionEnds records Config.SessionEnded calls.
type sessionEnds struct {
	mu   sync.Mutex
	seen []string // "peer gone=true"
}

func (e *sessionEnds) hook(peer string, gone bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, fmt.Sprintf("%s gone=%v", peer, gone))
}

func (e *sessionEnds) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}

// SPEC §5 "Crash failover": a session whose connection the peer ended —
// its mesh closed (EOF) or its socket reset (a process that died) — is
// reported as the peer gone; the end this node caused itself is reported
// as not gone.
func TestSessionEndedPeerGone(t *testing.T) {
	t.Run("peer closes", func(t *testing.T) {
		trust := newKeyMap("node-a", "node-b")
		var ea, eb sessionEnds
		ca, cb := testConfig(t, "node-a", trust), testConfig(t, "node-b", trust)
		ca.SessionEnded, cb.SessionEnded = ea.hook, eb.hook
		a, b := start(t, ca), start(t, cb)
		lb := b.Listener(ClassRaft) // before the dial: a stream of a class nobody listens to is closed
		echo(t, dial(t, a, b, "node-b", ClassRaft), accept(t, lb))
		b.Close()
		eventually(t, "a sees node-b gone", func() bool { return slices.Equal(ea.list(), []string{"node-b gone=true"}) })
		eventually(t, "b reports its own close", func() bool { return slices.Equal(eb.list(), []string{"node-a gone=false"}) })
	})
	t.Run("reset", func(t *testing.T) {
		trust := newKeyMap("node-a", "node-b")
		var ea, eb sessionEnds
		ca, cb := testConfig(t, "node-a", trust), testConfig(t, "node-b", trust)
		ca.SessionEnded, cb.SessionEnded = ea.hook, eb.hook
		raw := make(chan *net.TCPConn, 1)
		ca.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				raw <- c.(*net.TCPConn)
			}
			return c, err
		}
		a, b := start(t, ca), start(t, cb)
		lb := b.Listener(ClassRaft) // before the dial: a stream of a class nobody listens to is closed
		echo(t, dial(t, a, b, "node-b", ClassRaft), accept(t, lb))
		c := <-raw
		if err := c.SetLinger(0); err != nil { // Close sends a reset
			t.Fatal(err)
		}
		c.Close()
		eventually(t, "b sees node-a gone", func() bool { return slices.Equal(eb.list(), []string{"node-a gone=true"}) })
		eventually(t, "a reports its own close", func() bool { return slices.Equal(ea.list(), []string{"node-b gone=false"}) })
	})
	for _, err := range []error{yamux.ErrSessionShutdown, yamux.ErrKeepAliveTimeout, ErrRecord, net.ErrClosed} {
		if peerGone(err) {
			t.Errorf("peerGone(%v) = true", err)
		}
	}
}
