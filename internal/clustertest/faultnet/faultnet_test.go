package faultnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pipe is a stream dialed by "a" to "b": a's end wrapped, b's end raw.
func pipe(t *testing.T, n *Net) (a net.Conn, b net.Conn) {
	t.Helper()
	x, y := net.Pipe()
	a = n.Conn("a", "b", x)
	t.Cleanup(func() { a.Close(); y.Close() })
	return a, y
}

// readAsync reads exactly len(want) bytes from c on a goroutine.
func readAsync(c net.Conn, k int) <-chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		b := make([]byte, k)
		if _, err := io.ReadFull(c, b); err != nil {
			ch <- nil
			return
		}
		ch <- b
	}()
	return ch
}

// A one-way cut a → b holds a's writes (nothing arrives, nothing is
// lost: Write returns as into a socket buffer) while b → a keeps flowing;
// healing delivers the held bytes in order.
func TestCutOneWayHoldsThenHeals(t *testing.T) {
	n := New(1)
	a, b := pipe(t, n)
	n.Cut("a", "b")
	if got := n.Rule("b", "a"); got.Cut {
		t.Fatal("the reverse link is cut too")
	}
	for _, part := range []string{"he", "ld"} {
		if _, err := a.Write([]byte(part)); err != nil {
			t.Fatalf("write into a cut link's buffer: %v", err)
		}
	}
	got := readAsync(b, 4)
	// The reverse direction works meanwhile.
	back := readAsync(a, 4)
	if _, err := b.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-back:
		if string(m) != "back" {
			t.Fatalf("b → a delivered %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b → a blocked by a cut of a → b")
	}
	select {
	case m := <-got:
		t.Fatalf("a → b delivered %q through a cut", m)
	default:
	}

	n.Heal("a", "b")
	select {
	case m := <-got:
		if string(m) != "held" {
			t.Fatalf("after healing b read %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held bytes not delivered after healing")
	}
}

// A cut of b → a holds what a reads; a read deadline passing while the
// bytes are held returns a timeout and keeps them for the next Read.
func TestCutHoldsReadsPastDeadlineWithoutLoss(t *testing.T) {
	n := New(1)
	a, b := pipe(t, n)
	n.Cut("b", "a")
	go func() { _, _ = b.Write([]byte("data")) }()
	if err := a.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := a.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a cut = %v, want a deadline error", err)
	}
	n.HealAll()
	if err := a.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "data" {
		t.Fatalf("after healing: %q %v", buf, err)
	}
}

// Reset ends the streams between two nodes as a dying process's kernel
// does: the wrapped end reads and writes ECONNRESET, the other end reads
// EOF, bytes held by a cut are lost; streams between other nodes and
// the rules stay.
func TestResetEndsStreams(t *testing.T) {
	n := New(1)
	a, b := pipe(t, n)
	x, y := net.Pipe()
	other := n.Conn("a", "c", x)
	t.Cleanup(func() { other.Close(); y.Close() })
	n.Cut("a", "b")
	if _, err := a.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	if got := n.Reset("b", "a"); got != 1 {
		t.Fatalf("Reset ended %d streams, want 1", got)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the wrapped end reads %v, want ECONNRESET", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the wrapped end writes %v, want ECONNRESET", err)
	}
	if k, err := b.Read(make([]byte, 4)); k != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("the other end reads %d bytes, %v; want EOF and nothing held", k, err)
	}
	if !n.Rule("a", "b").Cut {
		t.Fatal("Reset healed the cut")
	}
	back := readAsync(y, 2)
	if _, err := other.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-back:
		if string(m) != "ok" {
			t.Fatalf("a → c delivered %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stream between other nodes was reset")
	}
	if got := n.Reset("a", "b"); got != 0 {
		t.Fatalf("a second Reset ended %d streams", got)
	}
}

// Close ends a Read held by a cut, and returns although bytes are held
// for writing on a cut link (they are lost with the conn).
func TestCloseEndsHeldConn(t *testing.T) {
	n := New(1)
	a, b := pipe(t, n)
	n.Partition("a", "b")
	if _, err := a.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = b.Write([]byte("held")) }()
	read := make(chan error, 1)
	go func() { _, err := a.Read(make([]byte, 4)); read <- err }()
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	for _, ch := range []<-chan struct{}{closed} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("Close blocked on a cut link")
		}
	}
	select {
	case err := <-read:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("held read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a held read")
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// A delay holds every write for at least Delay; Jitter only adds.
func TestDelay(t *testing.T) {
	n := New(1)
	a, b := pipe(t, n)
	const d = 30 * time.Millisecond
	n.Set("a", "b", Rule{Delay: d, Jitter: 10 * time.Millisecond})
	for range 3 {
		got := readAsync(b, 1)
		start := time.Now()
		if _, err := a.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		<-got
		if el := time.Since(start); el < d {
			t.Fatalf("delayed write arrived after %v, want ≥ %v", el, d)
		}
	}
	// The read direction has its own rule: none here, so no wait at all is
	// imposed; healing removes the delay.
	n.Heal("a", "b")
	if r := n.Rule("a", "b"); r != (Rule{}) {
		t.Fatalf("rule after Heal: %+v", r)
	}
}

// Dials between two nodes fail while either direction is cut, and work
// again after healing; an unregistered address has no rules.
func TestDialerRefusesCutLinks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() { ln.Close(); wg.Wait() }()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	n := New(1)
	dial := n.Dialer("a", nil)
	if c, err := dial(context.Background(), "tcp", ln.Addr().String()); err != nil {
		t.Fatalf("unregistered address: %v", err)
	} else {
		c.Close()
	}
	n.Listener("b", ln)
	if n.Name(ln.Addr().String()) != "b" {
		t.Fatal("Listener did not register its address")
	}
	n.Cut("b", "a") // the reverse direction alone fails a TCP dial
	if _, err := dial(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, ErrCut) {
		t.Fatalf("dial over a cut link: %v", err)
	}
	n.HealAll()
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial after healing: %v", err)
	}
	c.Close()
	if got := n.Names(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("Names = %v", got)
	}
}

// fakeTransport records the packets it is asked to send.
type fakeTransport struct {
	memberlist.NodeAwareTransport // nil: only the methods below are used
	mu                            sync.Mutex
	sent                          [][]byte
	shut                          bool
}

func (f *fakeTransport) WriteToAddress(b []byte, _ memberlist.Address) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, append([]byte(nil), b...))
	return time.Now(), nil
}

func (f *fakeTransport) Shutdown() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shut = true
	return nil
}

func (f *fakeTransport) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sent)
}

// dropPattern sends k packets a → b through a Net seeded with seed under
// Drop p and returns which ones were sent.
func dropPattern(t *testing.T, seed int64, p float64, k int) []bool {
	t.Helper()
	n := New(seed)
	n.Register("b", "10.0.0.2:7946")
	n.Register("c", "10.0.0.3:7946")
	f := &fakeTransport{}
	tr := n.Transport("a", f)
	n.Set("a", "b", Rule{Drop: p})
	n.Set("a", "c", Rule{Drop: p}) // another link's traffic must not shift a → b's draws
	var out []bool
	for i := range k {
		before := f.count()
		if i%3 == 0 {
			if _, err := tr.WriteTo([]byte{9}, "10.0.0.3:7946"); err != nil {
				t.Fatal(err)
			}
			before = f.count()
		}
		if _, err := tr.WriteTo([]byte{byte(i)}, "10.0.0.2:7946"); err != nil {
			t.Fatal(err)
		}
		out = append(out, f.count() > before)
	}
	if err := tr.Shutdown(); err != nil || !f.shut {
		t.Fatalf("Shutdown: %v, inner shut %v", err, f.shut)
	}
	return out
}

// Seeded drops: the same seed gives the same verdicts, another seed
// others; the drop rate is near p.
func TestSeededDropDeterministic(t *testing.T) {
	const k = 400
	x, y, z := dropPattern(t, 7, 0.5, k), dropPattern(t, 7, 0.5, k), dropPattern(t, 8, 0.5, k)
	sent := 0
	same := true
	for i := range k {
		if x[i] != y[i] {
			t.Fatalf("packet %d: seed 7 gave %v then %v", i, x[i], y[i])
		}
		if x[i] != z[i] {
			same = false
		}
		if x[i] {
			sent++
		}
	}
	if same {
		t.Fatal("seeds 7 and 8 dropped the same packets")
	}
	if sent < k/4 || sent > 3*k/4 {
		t.Fatalf("%d of %d sent under Drop 0.5", sent, k)
	}
	all := dropPattern(t, 7, 0, 10)
	for i, s := range all {
		if !s {
			t.Fatalf("packet %d dropped with Drop 0", i)
		}
	}
}

// Packets on a cut link are dropped and reported sent; healing restores
// them; a delayed packet goes out later, and Shutdown drops the unsent.
func TestTransportCutDelayHeal(t *testing.T) {
	n := New(1)
	n.Register("b", "10.0.0.2:7946")
	f := &fakeTransport{}
	tr := n.Transport("a", f)
	n.Cut("a", "b")
	if _, err := tr.WriteTo([]byte("x"), "10.0.0.2:7946"); err != nil || f.count() != 0 {
		t.Fatalf("cut: err %v, %d sent", err, f.count())
	}
	if _, err := tr.DialTimeout("10.0.0.2:7946", time.Second); !errors.Is(err, ErrCut) {
		t.Fatalf("stream dial over a cut: %v", err)
	}
	n.Heal("a", "b")
	if _, err := tr.WriteTo([]byte("y"), "10.0.0.2:7946"); err != nil || f.count() != 1 {
		t.Fatalf("healed: err %v, %d sent", err, f.count())
	}
	n.Set("a", "b", Rule{Delay: 20 * time.Millisecond})
	start := time.Now()
	if _, err := tr.WriteTo([]byte("z"), "10.0.0.2:7946"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.count() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("delayed packet never sent")
		}
		time.Sleep(time.Millisecond) // poll interval of a wait with a deadline
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("delayed packet sent after %v", el)
	}
	if !bytes.Equal(f.sent[1], []byte("z")) {
		t.Fatalf("sent %q", f.sent[1])
	}
	n.Set("a", "b", Rule{Delay: time.Hour})
	if _, err := tr.WriteTo([]byte("late"), "10.0.0.2:7946"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if f.count() != 2 {
		t.Fatalf("a packet pending at Shutdown was sent: %d", f.count())
	}
}

// Isolate cuts both ways with every registered node and nothing else.
func TestIsolate(t *testing.T) {
	n := New(1)
	for i, name := range []string{"a", "b", "c"} {
		n.Register(name, "127.0.0.1:"+string(rune('1'+i)))
	}
	n.Set("b", "c", Rule{Delay: time.Millisecond})
	n.Isolate("a")
	for _, o := range []string{"b", "c"} {
		if !n.Rule("a", o).Cut || !n.Rule(o, "a").Cut {
			t.Fatalf("a–%s not cut both ways", o)
		}
	}
	if r := n.Rule("b", "c"); r.Cut || r.Delay != time.Millisecond {
		t.Fatalf("b → c changed: %+v", r)
	}
	n.HealAll()
	if n.Rule("a", "b").Cut || n.Rule("b", "c") != (Rule{}) {
		t.Fatal("HealAll left a rule")
	}
}
