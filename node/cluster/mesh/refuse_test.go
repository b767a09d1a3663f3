package mesh

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// rawDialer speaks the dialer's side of the handshake by hand, with every
// field under the test's control.
type rawDialer struct {
	id     string
	priv   ed25519.PrivateKey // signs the proof
	pub    ed25519.PublicKey  // the key claimed in the hello (default: priv's)
	secret []byte             // gossip secret for the MAC (default: testSecret)
	// proof builds the proof from the transcript (default: an honest one);
	// nil from it sends no proof at all (the dialer stalls).
	proof func(t []byte) *Proof
	// after, when set, runs on the open connection once the acceptor's
	// proof arrived and verified.
	after func(c net.Conn)
	sent  bytes.Buffer // every byte written
	// afterHello is every byte the acceptor sent after its hello: its
	// proof, only if it accepted this dialer.
	afterHello []byte
}

func (r *rawDialer) hello(addr string) Hello {
	h := Hello{ID: r.id, Addr: "127.0.0.1:1"}
	pub := r.pub
	if pub == nil {
		pub = r.priv.Public().(ed25519.PublicKey)
	}
	copy(h.Key[:], pub)
	copy(h.Nonce[:], addr) // any value: the acceptor's nonce makes the transcript fresh
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	copy(h.Share[:], eph.PublicKey().Bytes())
	return h
}

func (r *rawDialer) honestProof(t []byte) *Proof {
	secret := r.secret
	if secret == nil {
		secret = testSecret
	}
	p := makeProof(handshakeKey(secret), r.priv, roleDialer, t)
	return &p
}

// run performs the handshake against addr and returns the acceptor's
// verdict: nil if it sent its proof (checked), else the read error.
func (r *rawDialer) run(t *testing.T, addr string) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	w := io.MultiWriter(c, &r.sent)
	me := r.hello(time.Now().String())
	w.Write(AppendFrame(nil, EncodeHello(me)))
	b, err := ReadFrame(c)
	if err != nil {
		return err
	}
	them, err := DecodeHello(b)
	if err != nil {
		t.Fatal(err)
	}
	tr := transcript(me, them)
	proof := r.proof
	if proof == nil {
		proof = r.honestProof
	}
	if p := proof(tr); p != nil {
		w.Write(AppendFrame(nil, EncodeProof(*p)))
	}
	r.afterHello, err = io.ReadAll(io.LimitReader(c, 2+2+32+64))
	if len(r.afterHello) == 0 {
		if err == nil {
			err = io.EOF
		}
		return err
	}
	theirs, err := DecodeProof(r.afterHello[2:])
	if err != nil {
		t.Fatalf("after its hello the acceptor sent %x: %v", r.afterHello, err)
	}
	if err := checkProof(handshakeKey(testSecret), them.Key[:], roleAcceptor, tr, theirs); err != nil {
		t.Fatalf("the acceptor's proof: %v", err)
	}
	if r.after != nil {
		r.after(c)
	}
	return nil
}

// sendRaw writes b (then waits for the acceptor to hang up) and reports
// whether the acceptor closed the connection within 10 s.
func sendRaw(t *testing.T, addr string, b []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(b)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the acceptor did not drop the connection")
	}
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x01
	return b
}

// SPEC §5 Mesh: every bad handshake is refused with its counted reason,
// and the listener keeps serving afterwards.
func TestHandshakeRefusals(t *testing.T) {
	trust := newKeyMap("node-a", "node-b", "node-c", "node-d")
	gossip := newKeyMap("node-a", "node-b", "node-c")
	gossip.set("node-c", pubFor("impostor")) // node-c advertises another key
	cfg := testConfig(t, "node-b", trust)
	cfg.Advertised = gossip
	cfg.HandshakeTimeout = time.Second // long enough for a real handshake on a loaded machine
	cfg.FirstByteTimeout = 300 * time.Millisecond
	b := start(t, cfg)

	honestHello := AppendFrame(nil, EncodeHello((&rawDialer{id: "node-a", priv: keyFor("node-a")}).hello("x")))
	// A legitimate exchange, recorded for the replay case.
	legit := &rawDialer{id: "node-a", priv: keyFor("node-a")}
	if err := legit.run(t, b.Addr()); err != nil {
		t.Fatalf("honest raw dialer refused: %v", err)
	}
	// The acceptor counts after it sent accept: wait for it.
	eventually(t, "the honest handshake counted ok", func() bool { return b.handshakes(t, ReasonOK) == 1 })

	cases := []struct {
		name   string
		reason Reason
		dialer *rawDialer // either a dialer…
		raw    []byte     // …or raw bytes
	}{
		{"untrusted id", ReasonUntrusted, &rawDialer{id: "node-x", priv: keyFor("node-x")}, nil},
		{"key differs from the trust map", ReasonKeyMismatch, &rawDialer{id: "node-a", priv: keyFor("node-x")}, nil},
		{"key differs from gossip", ReasonAdvertisedMismatch, &rawDialer{id: "node-c", priv: keyFor("node-c")}, nil},
		{"not in gossip", ReasonUnadvertised, &rawDialer{id: "node-d", priv: keyFor("node-d")}, nil},
		{"own id", ReasonSelf, &rawDialer{id: "node-b", priv: keyFor("node-b")}, nil},
		{"a generation of its own name", ReasonSelf, &rawDialer{id: "node-b~2", priv: keyFor("node-b")}, nil},
		// The key is looked up by the name inside the NodeId the hello
		// claims: node-a's key cannot speak for a generation of node-c.
		{"another name's generation", ReasonKeyMismatch, &rawDialer{id: "node-c~2", priv: keyFor("node-a")}, nil},
		{"untrusted name's generation", ReasonUntrusted, &rawDialer{id: "node-x~3", priv: keyFor("node-x")}, nil},
		{"wrong gossip secret", ReasonMAC, &rawDialer{id: "node-a", priv: keyFor("node-a"), secret: []byte("another cluster's gossip secret!")}, nil},
		{"claimed key, other signer", ReasonSignature, &rawDialer{id: "node-a", priv: keyFor("node-x"), pub: pubFor("node-a")}, nil},
		{"tampered MAC", ReasonMAC, &rawDialer{id: "node-a", priv: keyFor("node-a"), proof: func(tr []byte) *Proof {
			p := makeProof(handshakeKey(testSecret), keyFor("node-a"), roleDialer, tr)
			p.MAC[7] ^= 0x80
			return &p
		}}, nil},
		{"tampered signature", ReasonSignature, &rawDialer{id: "node-a", priv: keyFor("node-a"), proof: func(tr []byte) *Proof {
			p := makeProof(handshakeKey(testSecret), keyFor("node-a"), roleDialer, tr)
			p.Sig[40] ^= 0x01
			return &p
		}}, nil},
		{"valid MAC, no signature (a gossip insider without node-a's key)", ReasonSignature, &rawDialer{id: "node-a", priv: keyFor("node-a"), proof: func(tr []byte) *Proof {
			return &Proof{MAC: proofMAC(handshakeKey(testSecret), roleDialer, tr)}
		}}, nil},
		{"valid MAC, node-b's own signature over the transcript", ReasonSignature, &rawDialer{id: "node-a", priv: keyFor("node-a"), proof: func(tr []byte) *Proof {
			return &Proof{MAC: proofMAC(handshakeKey(testSecret), roleDialer, tr), Sig: makeProof(handshakeKey(testSecret), keyFor("node-b"), roleDialer, tr).Sig}
		}}, nil},
		{"acceptor-role proof from the right key", ReasonMAC, &rawDialer{id: "node-a", priv: keyFor("node-a"), proof: func(tr []byte) *Proof {
			p := makeProof(handshakeKey(testSecret), keyFor("node-a"), roleAcceptor, tr)
			return &p
		}}, nil},
		{"no proof: the dialer stalls after the hellos", ReasonTimeout, &rawDialer{id: "node-a", priv: keyFor("node-a"), proof: func([]byte) *Proof { return nil }}, nil},
		{"replayed transcript", ReasonMAC, nil, legit.sent.Bytes()},
		{"version 2 hello", ReasonVersion, nil, flip(honestHello, 2)},
		{"proof where hello expected", ReasonFormat, nil, AppendFrame(nil, EncodeProof(Proof{}))},
		{"bad id in hello", ReasonFormat, nil, func() []byte { b := bytes.Clone(honestHello); b[5] = ' '; return b }()},
		{"truncated hello", ReasonFormat, nil, AppendFrame(nil, EncodeHello(Hello{ID: "node-a", Addr: "x"})[:20])},
		{"empty frame", ReasonFormat, nil, []byte{0, 0}},
		{"oversize frame", ReasonOversize, nil, []byte{0xff, 0xff, 1, 2, 3}},
		{"just over the limit", ReasonOversize, nil, []byte{MaxFrame >> 8, MaxFrame&0xff + 1}},
		{"garbage", ReasonVersion, nil, append([]byte{0, 40}, bytes.Repeat([]byte{0xa5}, 40)...)},
		{"HTTP", ReasonOversize, nil, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"TLS client hello", ReasonTLS, nil, []byte{0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5}},
		{"stalled before a byte", ReasonTimeout, nil, nil},
		{"stalled mid-frame", ReasonTimeout, nil, honestHello[:30]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.handshakes(t, c.reason)
			if c.dialer != nil {
				if err := c.dialer.run(t, b.Addr()); err == nil {
					t.Fatal("accepted")
				}
				// SPEC §5 Mesh: the dialer proves itself before the
				// acceptor sends its proof — nothing comes after the
				// acceptor's hello to a dialer that did not.
				if len(c.dialer.afterHello) != 0 {
					t.Fatalf("an unauthenticated dialer received %d bytes after the hello: %x", len(c.dialer.afterHello), c.dialer.afterHello)
				}
			} else {
				sendRaw(t, b.Addr(), c.raw)
			}
			eventually(t, string(c.reason)+" counted", func() bool { return b.handshakes(t, c.reason) == before+1 })
			if len(b.Peers()) != 0 {
				t.Fatalf("a session was kept: %+v", b.Peers())
			}
		})
	}
	// Still serving: a real node gets through.
	acfg := testConfig(t, "node-a", trust)
	acfg.Advertised = gossip
	a := start(t, acfg)
	l := b.Listener(ClassRaft)
	echo(t, dial(t, a, &node{Mesh: b.Mesh}, "node-b", ClassRaft), accept(t, l))
}

// SPEC §5 Mesh: the dialer refuses an acceptor that fails its checks.
func TestDialerRefusals(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	b := start(t, testConfig(t, "node-b", trust))
	for _, c := range []struct {
		name        string
		mod         func(*Config)
		atA, atB    Reason
		dialOwnAddr bool
	}{
		// The dialer proves first: the acceptor refuses it, and the
		// dialer learns nothing but the hang-up.
		{"wrong gossip secret", func(c *Config) { c.GossipSecret = []byte("another cluster's gossip secret!") }, ReasonRefused, ReasonMAC, false},
		{"acceptor untrusted here", func(c *Config) { c.Trust = newKeyMap("node-a") }, ReasonUntrusted, ReasonIO, false},
		{"acceptor's key differs from gossip", func(c *Config) {
			g := newKeyMap("node-a", "node-b")
			g.set("node-b", pubFor("impostor"))
			c.Advertised = g
		}, ReasonAdvertisedMismatch, ReasonIO, false},
		// The acceptor (itself) refuses first; the dialer sees it hang up.
		{"dialing itself", func(*Config) {}, ReasonRefused, ReasonSelf, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, "node-a", trust)
			c.mod(&cfg)
			a := start(t, cfg)
			target, acceptor := b.Addr(), b
			if c.dialOwnAddr {
				target, acceptor = a.Addr(), a
			}
			before := acceptor.handshakes(t, c.atB)
			_, err := a.Dial(context.Background(), target, "", ClassRaft)
			var he *HandshakeError
			if !errors.As(err, &he) || he.Reason != c.atA {
				t.Fatalf("Dial: %v, want reason %s", err, c.atA)
			}
			if a.handshakes(t, c.atA) < 1 {
				t.Fatalf("%s not counted at the dialer", c.atA)
			}
			eventually(t, "acceptor counted "+string(c.atB), func() bool { return acceptor.handshakes(t, c.atB) == before+1 })
		})
	}
}

// SPEC §5 Mesh: the dialer checks the acceptor's proof; an acceptor that
// answers a good dialer with a bad proof is refused with the reason.
func TestDialerChecksAcceptorProof(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	for _, c := range []struct {
		name   string
		reason Reason
		proof  func(tr []byte) Proof
	}{
		{"honest", ReasonOK, func(tr []byte) Proof { return makeProof(handshakeKey(testSecret), keyFor("node-b"), roleAcceptor, tr) }},
		{"wrong gossip secret", ReasonMAC, func(tr []byte) Proof {
			return makeProof(handshakeKey([]byte("another cluster's gossip secret!")), keyFor("node-b"), roleAcceptor, tr)
		}},
		{"another key's signature", ReasonSignature, func(tr []byte) Proof { return makeProof(handshakeKey(testSecret), keyFor("node-x"), roleAcceptor, tr) }},
		{"the dialer's own proof reflected", ReasonMAC, func(tr []byte) Proof { return makeProof(handshakeKey(testSecret), keyFor("node-a"), roleDialer, tr) }},
		{"dialer-role proof from the right key", ReasonMAC, func(tr []byte) Proof { return makeProof(handshakeKey(testSecret), keyFor("node-b"), roleDialer, tr) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				b, err := ReadFrame(conn)
				if err != nil {
					return
				}
				them, err := DecodeHello(b)
				if err != nil {
					return
				}
				me := (&rawDialer{id: "node-b", priv: keyFor("node-b")}).hello("acceptor")
				conn.Write(AppendFrame(nil, EncodeHello(me)))
				if _, err := ReadFrame(conn); err != nil { // the dialer's proof, unchecked here
					return
				}
				conn.Write(AppendFrame(nil, EncodeProof(c.proof(transcript(them, me)))))
				io.Copy(io.Discard, conn)
			}()
			a := start(t, testConfig(t, "node-a", trust))
			s, err := a.Dial(context.Background(), ln.Addr().String(), "node-b", ClassRaft)
			if c.reason == ReasonOK {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				s.Close()
				return
			}
			var he *HandshakeError
			if !errors.As(err, &he) || he.Reason != c.reason {
				t.Fatalf("Dial: %v, want reason %s", err, c.reason)
			}
			if a.handshakes(t, c.reason) != 1 || len(a.Peers()) != 0 {
				t.Fatal("not counted, or a session kept")
			}
		})
	}
}

// SPEC §5 Mesh, at most one session per peer: a second session from a
// peer that ranks below the one in use (here: dialed by the higher
// NodeId) is closed while the one in use still answers its ping; the
// session in use stays and carries streams.
func TestLowerRankedSessionClosedWhileOldAnswers(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	a := start(t, testConfig(t, "node-a", trust))
	b := start(t, testConfig(t, "node-b", trust))
	lr, lf := b.Listener(ClassRaft), b.Listener(ClassForward) // before any stream arrives
	echo(t, dial(t, a, b, "node-b", ClassRaft), accept(t, lr))
	old := a.Peers()
	if len(old) != 1 || !old[0].Outbound {
		t.Fatalf("a's sessions %+v, want the one it dialed", old)
	}
	closed := false
	d := &rawDialer{id: "node-b", priv: keyFor("node-b"), after: func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		closed = !(errors.As(err, &ne) && ne.Timeout())
	}}
	if err := d.run(t, a.Addr()); err != nil {
		t.Fatal(err)
	}
	if !closed {
		t.Fatal("a kept the lower-ranked second session open")
	}
	if got := a.Peers(); len(got) != 1 || got[0].Session != old[0].Session {
		t.Fatalf("a's sessions %+v, want %+v still in use", got, old)
	}
	echo(t, dial(t, a, b, "node-b", ClassForward), accept(t, lf))
}
