package mesh

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingHandler counts the records whose message contains want and
// keeps the first few; the rest of the log is dropped (a flood of lines
// must not reach t.Log).
type countingHandler struct {
	want  string
	mu    sync.Mutex
	n     int
	lines []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, h.want) {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if len(h.lines) < 20 {
		h.lines = append(h.lines, b.String())
	}
	return nil
}

func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// flood holds n connections to addr open from the local address src,
// each sending prefix (nothing: a half-open connection) and then nothing
// more; each one the acceptor closes is opened again after pause.
type flood struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	opened atomic.Int64
	closed atomic.Int64 // connections the acceptor closed on us
}

func startFlood(t *testing.T, addr, src string, n int, prefix []byte, pause time.Duration) *flood {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	probe, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot connect from %s (needs the whole 127/8 on loopback, as Linux has): %v", src, err)
	}
	probe.Close()
	f := &flood{stop: make(chan struct{})}
	for range n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				c, err := d.Dial("tcp", addr)
				if err == nil {
					f.opened.Add(1)
					c.Write(prefix)
					done := make(chan struct{})
					go func() {
						io.Copy(io.Discard, c) // until the acceptor closes it
						close(done)
					}()
					select {
					case <-done:
						f.closed.Add(1)
					case <-f.stop:
						c.Close()
						<-done
						return
					}
					c.Close()
				}
				select {
				case <-f.stop:
					return
				case <-time.After(pause): // the attacker's redial pace
				}
			}
		}()
	}
	t.Cleanup(f.end)
	return f
}

func (f *flood) end() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.wg.Wait()
}

// timeHandshakes starts a fresh node-a rounds times and times its first
// Dial to b (connect and handshake), failing on any error.
func timeHandshakes(t *testing.T, b *node, trust *keyMap, rounds int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for range rounds {
		cfg := testConfig(t, "node-a", trust)
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.HandshakeTimeout = b.cfg.HandshakeTimeout
		a := start(t, cfg)
		begin := time.Now()
		s, err := a.Dial(context.Background(), b.Addr(), "node-b", ClassRaft)
		if err != nil {
			t.Fatalf("the real peer's handshake failed during the flood: %v", err)
		}
		out = append(out, time.Since(begin))
		s.Close()
		a.Close()
	}
	slices.Sort(out)
	return out
}

// SPEC §5 Mesh: 200 connections held open (half-open: connected, nothing
// sent; or a trusted id's hello and then nothing) and reopened whenever
// dropped cannot keep a real peer out: its handshake completes, promptly,
// whether the flood comes from another address or its own; every dropped
// connection is counted (mesh_handshakes_total{result="busy"|"timeout"})
// and the refusals make a bounded number of log lines.
func TestHandshakeFloodPeerGetsThrough(t *testing.T) {
	helloA := AppendFrame(nil, EncodeHello((&rawDialer{id: "node-a", priv: keyFor("node-a")}).hello("flood")))
	for _, c := range []struct {
		name, src string
		prefix    []byte
	}{
		{"half-open from another address", "127.0.0.2", nil},
		{"half-open from the peer's own address", "127.0.0.1", nil},
		{"stalled after a trusted hello, another address", "127.0.0.3", helloA},
	} {
		t.Run(c.name, func(t *testing.T) {
			trust := newKeyMap("node-a", "node-b")
			logs := &countingHandler{want: "handshake refused"}
			cfg := testConfig(t, "node-b", trust)
			cfg.Logger = slog.New(logs)
			// The flood keeps this process's CPUs busy (and -race slows
			// it tenfold): the peer gets a generous deadline, the flood's
			// idle connections still the default first-byte second.
			cfg.HandshakeTimeout = 10 * time.Second
			b := start(t, cfg)
			b.Listener(ClassRaft)

			quiet := timeHandshakes(t, b, trust, 3)
			began := time.Now()
			f := startFlood(t, b.Addr(), c.src, 200, c.prefix, 250*time.Millisecond)
			// Three waves: every flood connection dropped and reopened
			// twice, so the peer meets a flood that is being renewed.
			eventually(t, "the flood renewed", func() bool {
				return f.closed.Load() >= 3*200 && b.adm.inProgress() >= maxHandshakesPerSource
			})
			flooded := timeHandshakes(t, b, trust, 5)
			f.end()
			refused := b.handshakes(t, ReasonBusy) + b.handshakes(t, ReasonTimeout) + b.handshakes(t, ReasonFormat)
			lines := logs.count()
			t.Logf("handshake times without the flood %v, with it %v; %d flood connections, %d dropped by the acceptor, %.0f refusals counted, %d log lines",
				quiet, flooded, f.opened.Load(), f.closed.Load(), refused, lines)
			if f.closed.Load() == 0 || refused < float64(f.closed.Load())/2 {
				t.Fatalf("%d flood connections dropped, %.0f refusals counted", f.closed.Load(), refused)
			}
			// Per direction and reason (here busy, timeout, io) one line
			// and one summary per interval while the flood lasts.
			windows := 1 + int(time.Since(began)/refusalLogInterval)
			if limit := 3 * 2 * windows; lines > limit {
				t.Fatalf("%d refusal log lines during the flood (%d windows), at most %d: %q", lines, windows, limit, logs.lines)
			}
			b.Close()
			if got, limit := logs.count(), 3*2*(windows+1); got > limit {
				t.Fatalf("%d refusal log lines after Close, at most %d: %q", got, limit, logs.lines)
			}
			if !slices.ContainsFunc(logs.lines, func(l string) bool { return strings.Contains(l, "suppressed=") }) && f.closed.Load() > 4 {
				t.Fatalf("no summary with the suppressed count: %q", logs.lines)
			}
		})
	}
}

// The admission table: per source at most maxHandshakesPerSource, in all
// at most maxHandshakes; the handshake that gives way is the least
// advanced, then the oldest, of the new connection's source when that is
// full, else of the busiest source.
func TestAdmissionPicksLeastAdvanced(t *testing.T) {
	a := newAdmission(4, 2)
	conn := func(ip string) net.Conn { return fakeConn{ip: ip} }
	x1, v := a.admit(conn("10.0.0.1"))
	x2, _ := a.admit(conn("10.0.0.1"))
	if v != nil {
		t.Fatal("evicted below the limits")
	}
	a.advance(x1, progressHello)
	x3, v := a.admit(conn("10.0.0.1")) // source full: x2 (no progress) goes, not the older x1
	if v != x2 || !v.evicted || a.done(x2) {
		t.Fatalf("victim %+v, want x2", v)
	}
	y1, _ := a.admit(conn("10.0.0.2"))
	y2, v := a.admit(conn("10.0.0.2")) // table full (4): busiest sources tie at 2; the least advanced, oldest: x3
	if v != nil {
		t.Fatalf("evicted at 4 of 4: %+v", v)
	}
	_, v = a.admit(conn("10.0.0.3"))
	if v != x3 {
		t.Fatalf("victim %+v, want x3 (least advanced and oldest of the busiest)", v)
	}
	if !a.done(x1) || !a.done(y1) || !a.done(y2) || a.inProgress() != 1 {
		t.Fatalf("table after done: %d", a.inProgress())
	}
	// IPv6 groups by /64; IPv4-mapped addresses are IPv4.
	for in, want := range map[string]string{
		"[2001:db8::1]:7950":         "2001:db8::/64",
		"[2001:db8::ffff:1]:1":       "2001:db8::/64",
		"[::ffff:192.0.2.7]:7950":    "192.0.2.7",
		"192.0.2.7:7950":             "192.0.2.7",
		"[2001:db8:0:1::1]:7950":     "2001:db8:0:1::/64",
		"not an address":             "not an address",
		"[fe80::1%eth0]:7950":        "fe80::/64",
		"[2001:db8::1:2:3:4]:65535":  "2001:db8::/64",
		"[2001:db8:1:2:3::4]:65535":  "2001:db8:1:2::/64",
		"[2001:db8:1:2:3:4:5:6]:123": "2001:db8:1:2::/64",
	} {
		if got := sourceOf(fakeAddr(in)); got != want {
			t.Errorf("sourceOf(%s) = %s, want %s", in, got, want)
		}
	}
}

type fakeAddr string

func (fakeAddr) Network() string  { return "tcp" }
func (a fakeAddr) String() string { return string(a) }

type fakeConn struct {
	net.Conn
	ip string
}

func (c fakeConn) RemoteAddr() net.Addr { return fakeAddr(net.JoinHostPort(c.ip, "1")) }

// SPEC §5 Mesh: a connection that sends nothing is dropped after
// FirstByteTimeout, long before the handshake timeout.
func TestFirstByteTimeout(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	cfg := testConfig(t, "node-b", trust)
	cfg.HandshakeTimeout = time.Minute
	cfg.FirstByteTimeout = 100 * time.Millisecond
	b := start(t, cfg)
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("an idle connection was kept past 10 s")
	}
	eventually(t, "timeout counted", func() bool { return b.handshakes(t, ReasonTimeout) == 1 })
	// A byte in time lifts the short deadline: the rest of the handshake
	// has the whole timeout (here: a hello sent in two parts).
	c2, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	hello := AppendFrame(nil, EncodeHello((&rawDialer{id: "node-a", priv: keyFor("node-a")}).hello("x")))
	c2.Write(hello[:1])
	time.Sleep(300 * time.Millisecond) // longer than FirstByteTimeout: the acceptor must still wait
	c2.Write(hello[1:])
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := ReadFrame(c2); err != nil {
		t.Fatalf("no hello back after a slow first frame: %v", err)
	} else if _, err := DecodeHello(b); err != nil {
		t.Fatal(err)
	}
}

// bytesWaiting sees unread bytes without consuming them, and does not
// wait behind a Read blocked on the same connection.
func TestBytesWaiting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if bytesWaiting(server) {
		t.Fatal("bytes waiting on an idle connection")
	}
	// A Read blocked on the connection must not block the peek.
	got := make(chan []byte)
	go func() {
		b := make([]byte, 5)
		n, _ := io.ReadFull(server, b)
		got <- b[:n]
	}()
	client.Write([]byte("hel"))
	eventually(t, "the blocked Read took the bytes", func() bool { return !bytesWaiting(server) })
	client.Write([]byte("lo"))
	if b := <-got; string(b) != "hello" {
		t.Fatalf("read %q", b)
	}
	client.Write([]byte("x"))
	eventually(t, "a byte shows as waiting", func() bool { return bytesWaiting(server) })
	b := make([]byte, 1)
	if _, err := io.ReadFull(server, b); err != nil || b[0] != 'x' {
		t.Fatalf("the peek consumed the byte: %q %v", b, err)
	}
	if bytesWaiting(fakeConn{ip: "10.0.0.1"}) {
		t.Fatal("a conn without a socket shows bytes")
	}
}

// A connection with bytes waiting ranks above an idle one, even when the
// idle one is newer.
func TestAdmissionSparesWaitingBytes(t *testing.T) {
	a := newAdmission(8, 2)
	busy := map[net.Conn]bool{}
	a.pending = func(c net.Conn) bool { return busy[c] }
	c1, c2 := fakeConn{ip: "10.0.0.1"}, &fakeConn{ip: "10.0.0.1"}
	busy[c1] = true
	a.admit(c1)
	x2, _ := a.admit(c2)
	_, v := a.admit(fakeConn{ip: "10.0.0.1"})
	if v != x2 {
		t.Fatalf("victim %+v, want the idle newer one", v)
	}
}
