package mesh

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// The record layer alone: records open in order, and every change a path
// can make — a flipped bit, a record injected, replayed, reordered or
// dropped, a cut length — is refused, and stays refused.
func TestRecordsRefuseEveryChange(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	seal := func(msgs ...string) [][]byte {
		s, _ := NewSealer(key)
		var out [][]byte
		for _, m := range msgs {
			r, err := s.AppendRecords(nil, []byte(m))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	recs := seal("one", "two", "three")
	forged := func() []byte {
		b := make([]byte, 2+20)
		binary.BigEndian.PutUint16(b, 20)
		rand.Read(b[2:])
		return b
	}()
	otherKey := func() []byte {
		s, _ := NewSealer(bytes.Repeat([]byte{8}, KeySize))
		r, _ := s.AppendRecords(nil, []byte("one"))
		return r
	}()
	flipped := bytes.Clone(recs[1])
	flipped[5] ^= 0x01
	tagFlipped := bytes.Clone(recs[1])
	tagFlipped[len(tagFlipped)-1] ^= 0x80
	lenChanged := bytes.Clone(recs[1])
	lenChanged[1]--
	cat := func(rs ...[]byte) []byte { return bytes.Join(rs, nil) }
	for _, c := range []struct {
		name string
		in   []byte
		good int // records that open before the refusal
	}{
		{"in order", cat(recs...), 3},
		{"a bit flipped", cat(recs[0], flipped, recs[2]), 1},
		{"the tag flipped", cat(recs[0], tagFlipped, recs[2]), 1},
		{"the length changed", cat(recs[0], lenChanged, recs[2]), 1},
		{"injected", cat(recs[0], forged, recs[1]), 1},
		{"injected under another key", cat(recs[0], otherKey, recs[1]), 1},
		{"replayed", cat(recs[0], recs[0], recs[1]), 1},
		{"replayed later", cat(recs[0], recs[1], recs[0]), 2},
		{"reordered", cat(recs[0], recs[2], recs[1]), 1},
		{"one dropped", cat(recs[0], recs[2]), 1},
		{"the first dropped", cat(recs[1], recs[2]), 0},
		{"empty record", cat(recs[0], []byte{0, 16}, bytes.Repeat([]byte{0}, 16)), 1},
		{"oversize record", cat(recs[0], []byte{0xff, 0xff}), 1},
	} {
		o, _ := NewOpener(key)
		r := bytes.NewReader(c.in)
		var got []string
		var err error
		for {
			var p []byte
			if p, err = o.ReadRecord(r); err != nil {
				break
			}
			got = append(got, string(p))
		}
		want := []string{"one", "two", "three"}[:c.good]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: opened %q, want %q", c.name, got, want)
		}
		if c.good == 3 {
			if !errors.Is(err, io.EOF) {
				t.Errorf("%s: ended with %v, want EOF", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrRecord) {
			t.Errorf("%s: ended with %v, want ErrRecord", c.name, err)
		}
		// Refused for good: the next good bytes do not open either.
		if _, err2 := o.ReadRecord(bytes.NewReader(recs[c.good])); !errors.Is(err2, ErrRecord) {
			t.Errorf("%s: after a refusal the next read gave %v", c.name, err2)
		}
	}
}

// A write larger than MaxRecord is split; the reader gets it all back,
// and the record numbers of the two directions never meet (their keys
// differ).
func TestRecordsSplitLargeWrites(t *testing.T) {
	key := bytes.Repeat([]byte{1}, KeySize)
	s, _ := NewSealer(key)
	o, _ := NewOpener(key)
	msg := make([]byte, 3*MaxRecord+5)
	rand.Read(msg)
	b, err := s.AppendRecords(nil, msg)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(msg) + 4*(2+recordOverhead); len(b) != want {
		t.Fatalf("%d bytes sealed, want %d (4 records)", len(b), want)
	}
	var got []byte
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		p, err := o.ReadRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("the large write did not come back whole")
	}
	if b, _ := s.AppendRecords(nil, nil); len(b) != 0 {
		t.Fatal("an empty write made a record")
	}
}

// The last record number is used once; then sealing stops instead of
// reusing a nonce.
func TestRecordNumbersNeverReused(t *testing.T) {
	s, _ := NewSealer(bytes.Repeat([]byte{1}, KeySize))
	s.seq = 1<<64 - 1
	if _, err := s.AppendRecords(nil, []byte("last")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRecords(nil, []byte("one more")); !errors.Is(err, ErrRecordsExhausted) {
		t.Fatalf("after the last number: %v", err)
	}
}

// recordCounter counts the records written through it.
type recordCounter struct {
	net.Conn
	mu      sync.Mutex
	buf     []byte
	records int
}

func (r *recordCounter) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.buf = append(r.buf, p...)
	for len(r.buf) >= 2 {
		n := 2 + int(binary.BigEndian.Uint16(r.buf))
		if len(r.buf) < n {
			break
		}
		r.buf, r.records = r.buf[n:], r.records+1
	}
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recordCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records
}

// A yamux data frame travels as one record (its header held back for its
// body), frames without a body at once; the bytes arrive whole.
func TestDataFrameIsOneRecord(t *testing.T) {
	c1, c2 := net.Pipe()
	k1, k2 := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	counter := &recordCounter{Conn: c1}
	s1, err := newSealedConn(counter, k1, k2, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := newSealedConn(c2, k2, k1, nil)
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	client, _ := yamux.Client(s1, cfg)
	server, _ := yamux.Server(s2, cfg)
	defer client.Close()
	defer server.Close()
	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	var sent bytes.Buffer
	for i := range 10 {
		msg := bytes.Repeat([]byte{byte('a' + i)}, 100)
		if _, err := st.Write(msg); err != nil {
			t.Fatal(err)
		}
		sent.Write(msg)
	}
	in, err := server.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, sent.Len())
	if _, err := io.ReadFull(in, got); err != nil || !bytes.Equal(got, sent.Bytes()) {
		t.Fatalf("read %q, %v", got, err)
	}
	// The stream's opening (a window update, no body) and ten data frames.
	if n := counter.count(); n != 11 {
		t.Fatalf("%d records for an opening and ten data frames, want 11", n)
	}
}

// SPEC §5 Mesh: the two ends derive the same keys, one per direction, and
// any change to the transcript or either secret changes them.
func TestSessionKeys(t *testing.T) {
	shared, tr := bytes.Repeat([]byte{3}, 32), []byte("transcript")
	d2a, a2d, err := SessionKeys(shared, testSecret, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(d2a) != KeySize || len(a2d) != KeySize || bytes.Equal(d2a, a2d) {
		t.Fatalf("keys %x %x", d2a, a2d)
	}
	for name, f := range map[string]func() ([]byte, []byte, error){
		"shared": func() ([]byte, []byte, error) { return SessionKeys(bytes.Repeat([]byte{4}, 32), testSecret, tr) },
		"secret": func() ([]byte, []byte, error) {
			return SessionKeys(shared, []byte("another gossip secret 0123456789"), tr)
		},
		"transcript": func() ([]byte, []byte, error) { return SessionKeys(shared, testSecret, []byte("transcripT")) },
	} {
		x, y, _ := f()
		if bytes.Equal(x, d2a) || bytes.Equal(y, a2d) {
			t.Errorf("changing the %s left a key unchanged", name)
		}
	}
}

// fault is what the on-path proxy does to one record.
type fault int

const (
	faultNone    fault = iota
	faultFlip          // flip a bit of the record
	faultInject        // send a made-up record before it
	faultReplay        // send it twice
	faultReorder       // send the next record first
	faultDrop          // do not send it
)

func (f fault) String() string {
	return [...]string{"none", "flip", "inject", "replay", "reorder", "drop"}[f]
}

// pathProxy sits between a dialer and an acceptor. It forwards the four
// handshake frames untouched, then reads each direction as records
// (2-byte length, body) and applies the armed fault to the next record of
// its direction. With raw set it forwards bytes as they come and flips
// the first byte of marker wherever it sees it (the unsealed baseline).
type pathProxy struct {
	t      *testing.T
	ln     net.Listener
	target string
	raw    bool
	marker []byte

	mu     sync.Mutex
	armed  map[bool]fault // by direction: true = dialer → acceptor
	seen   map[bool]*bytes.Buffer
	done   chan struct{}
	wg     sync.WaitGroup
	faults int // faults applied
}

func newPathProxy(t *testing.T, target string) *pathProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pathProxy{t: t, ln: ln, target: target, armed: map[bool]fault{}, seen: map[bool]*bytes.Buffer{true: {}, false: {}}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { close(p.done); ln.Close(); p.wg.Wait() })
	return p
}

func (p *pathProxy) addr() string { return p.ln.Addr().String() }

func (p *pathProxy) arm(toAcceptor bool, f fault) {
	p.mu.Lock()
	p.armed[toAcceptor] = f
	p.mu.Unlock()
}

func (p *pathProxy) take(toAcceptor bool) fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.armed[toAcceptor]
	if f != faultNone {
		p.armed[toAcceptor] = faultNone
		p.faults++
	}
	return f
}

func (p *pathProxy) applied() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

func (p *pathProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, s, true)
		go p.pipe(s, c, false)
		go func() { <-p.done; c.Close(); s.Close() }()
	}
}

func (p *pathProxy) pipe(from, to net.Conn, toAcceptor bool) {
	defer p.wg.Done()
	defer to.Close()
	defer from.Close()
	// The handshake: two frames each way, forwarded as they are.
	for range 2 {
		f, err := readRawRecord(from)
		if err != nil {
			return
		}
		if _, err := to.Write(f); err != nil {
			return
		}
	}
	if p.raw {
		p.pipeRaw(from, to, toAcceptor)
		return
	}
	var held []byte // a record kept back to be sent after the next
	for {
		rec, err := readRawRecord(from)
		if err != nil {
			return
		}
		p.mu.Lock()
		p.seen[toAcceptor].Write(rec)
		p.mu.Unlock()
		var out []byte
		switch p.take(toAcceptor) {
		case faultNone:
			out = rec
		case faultFlip:
			rec[2+len(rec)/3] ^= 0x04
			out = rec
		case faultInject:
			forged := make([]byte, 2+12+recordOverhead)
			binary.BigEndian.PutUint16(forged, 12+recordOverhead)
			rand.Read(forged[2:])
			out = append(forged, rec...)
		case faultReplay:
			out = append(bytes.Clone(rec), rec...)
		case faultReorder:
			held = rec
			continue
		case faultDrop:
			continue
		}
		if held != nil {
			out, held = append(out, held...), nil
		}
		if _, err := to.Write(out); err != nil {
			return
		}
	}
}

// pipeRaw forwards bytes, flipping the marker's first byte (unsealed
// baseline: shows what the record layer prevents).
func (p *pathProxy) pipeRaw(from, to net.Conn, toAcceptor bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			p.mu.Lock()
			p.seen[toAcceptor].Write(chunk)
			p.mu.Unlock()
			if i := bytes.Index(chunk, p.marker); i >= 0 && toAcceptor && p.take(toAcceptor) != faultNone {
				chunk[i] ^= 0x20
			}
			if _, err := to.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readRawRecord reads one 2-byte-length-prefixed unit, prefix included.
func readRawRecord(r io.Reader) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	b := make([]byte, 2+int(binary.BigEndian.Uint16(hdr[:])))
	copy(b, hdr[:])
	_, err := io.ReadFull(r, b[2:])
	return b, err
}

// SPEC §5 Mesh: an on-path attacker between two authenticated nodes that
// changes, injects, replays, reorders or drops one record of a session
// (after a good handshake, without TLS) closes the session; the receiving
// stream reads exactly a prefix of what the sender wrote, never a byte
// the attacker made, and the refusal is counted. Both directions.
func TestOnPathAttackerClosesSession(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	for _, toAcceptor := range []bool{true, false} {
		for _, f := range []fault{faultFlip, faultInject, faultReplay, faultReorder, faultDrop} {
			dir := map[bool]string{true: "dialer to acceptor", false: "acceptor to dialer"}[toAcceptor]
			t.Run(f.String()+" "+dir, func(t *testing.T) {
				a := start(t, testConfig(t, "node-a", trust))
				b := start(t, testConfig(t, "node-b", trust))
				proxy := newPathProxy(t, b.Addr())
				lb := b.Listener(ClassRaft)
				sa := dialAt(t, a, proxy.addr(), "node-b", ClassRaft)
				sb := accept(t, lb)
				echo(t, sa, sb) // a good session first
				sender, receiver, victim := sa, sb, b
				if !toAcceptor {
					sender, receiver, victim = sb, sa, a
				}
				var mu sync.Mutex
				var sent, recv bytes.Buffer
				readDone := make(chan struct{})
				go func() {
					defer close(readDone)
					receiver.SetReadDeadline(time.Now().Add(20 * time.Second))
					buf := make([]byte, 256)
					for {
						n, err := receiver.Read(buf)
						mu.Lock()
						recv.Write(buf[:n])
						mu.Unlock()
						if err != nil {
							return
						}
					}
				}()
				received := func() int { mu.Lock(); defer mu.Unlock(); return recv.Len() }
				// sent holds every byte handed to Write: one whose Write
				// failed as the session closed may still have gone out.
				write := func(i int) bool {
					msg := fmt.Appendf(nil, "entry %03d;", i)
					sent.Write(msg)
					_, err := sender.Write(msg)
					return err == nil
				}
				// Five entries through untouched, then the fault on the
				// next record; writing goes on until the session breaks
				// (the reorder needs a record after the one it holds).
				for i := range 5 {
					write(i)
				}
				eventually(t, "the first entries delivered", func() bool { return received() == sent.Len() })
				proxy.arm(toAcceptor, f)
				for i := 5; i < 200 && write(i); i++ {
					if victim.metric(t, "mesh_records_refused_total", "", "") > 0 {
						break
					}
				}
				eventually(t, "the refusal counted", func() bool {
					return victim.metric(t, "mesh_records_refused_total", "", "") == 1
				})
				eventually(t, "the session gone at the receiver", func() bool { return len(victim.Peers()) == 0 })
				<-readDone
				r := recv.Bytes()
				if len(r) < 50 || !bytes.HasPrefix(sent.Bytes(), r) {
					t.Fatalf("the receiver read %q, not a prefix of what was sent (at least the first five entries)", r)
				}
				if proxy.applied() != 1 {
					t.Fatalf("%d faults applied", proxy.applied())
				}
				t.Logf("%d of %d bytes arrived before the session closed", len(r), sent.Len())
			})
		}
	}
}

// The baseline that shows what the records prevent: with the record layer
// off (test-only), the same proxy flips a byte of a message and the
// receiver reads the changed message as if it had been sent, and the
// proxy sees the message in the clear. With the records on, neither.
func TestUnsealedSessionIsOpenToThePath(t *testing.T) {
	trust := newKeyMap("node-a", "node-b")
	marker := []byte("GRANT ticket-7 to alice")
	for _, sealed := range []bool{false, true} {
		ca, cb := testConfig(t, "node-a", trust), testConfig(t, "node-b", trust)
		ca.unsealed, cb.unsealed = !sealed, !sealed
		a, b := start(t, ca), start(t, cb)
		proxy := newPathProxy(t, b.Addr())
		proxy.raw, proxy.marker = !sealed, marker
		lb := b.Listener(ClassRaft)
		sa := dialAt(t, a, proxy.addr(), "node-b", ClassRaft)
		sb := accept(t, lb)
		proxy.arm(true, faultFlip)
		sa.Write(marker)
		got := make([]byte, len(marker))
		sb.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.ReadFull(sb, got)
		proxy.mu.Lock()
		inClear := bytes.Contains(proxy.seen[true].Bytes(), marker)
		proxy.mu.Unlock()
		switch {
		case !sealed && (err != nil || bytes.Equal(got, marker) || !inClear):
			t.Fatalf("unsealed: read %q, %v, seen in the clear %v: the baseline attack did not work", got, err, inClear)
		case sealed && (err == nil || inClear):
			t.Fatalf("sealed: read %q, %v, seen in the clear %v", got, err, inClear)
		}
		t.Logf("sealed=%v: the receiver read %q (%v); the path saw the plaintext: %v", sealed, got, err, inClear)
		a.Close()
		b.Close()
	}
}

// benchPair is two meshes with one stream between them.
func benchPair(b *testing.B, sealed bool) (*Stream, *Stream) {
	trust := newKeyMap("node-a", "node-b")
	ca, cb := testConfig(b, "node-a", trust), testConfig(b, "node-b", trust)
	ca.unsealed, cb.unsealed = !sealed, !sealed
	ca.Logger, cb.Logger = slog.New(slog.DiscardHandler), slog.New(slog.DiscardHandler)
	x, y := start(b, ca), start(b, cb)
	l := y.Listener(ClassRaft)
	s := dial(b, x, y, "node-b", ClassRaft)
	return s, accept(b, l)
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op: the CPU both ends spent per op, which a
// loaded machine disturbs far less than the throughput.
func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-since)/float64(b.N), "cpu-ns/op")
}

// BenchmarkMeshStream: the mesh stream's throughput (bulk: 64 KiB writes)
// and round trips (Raft-sized messages: 256 bytes there and back), sealed
// and with the record layer off, in the same process, with the CPU both
// ends spend per op. Compare the pairs:
//
//	go test -run '^$' -bench MeshStream -count 5 ./node/cluster/mesh
func BenchmarkMeshStream(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		name := map[bool]string{false: "unsealed", true: "sealed"}[sealed]
		b.Run("bulk/"+name, func(b *testing.B) {
			src, dst := benchPair(b, sealed)
			chunk := make([]byte, 64<<10)
			done := make(chan error, 1)
			total := int64(b.N) * int64(len(chunk))
			go func() {
				_, err := io.CopyN(io.Discard, dst, total)
				done <- err
			}()
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			cpu := cpuTime(b)
			for range b.N {
				if _, err := src.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			reportCPU(b, cpu)
		})
		b.Run("roundtrip256/"+name, func(b *testing.B) {
			x, y := benchPair(b, sealed)
			go func() { io.Copy(y, y) }() // echo
			msg := make([]byte, 256)
			back := make([]byte, 256)
			b.SetBytes(2 * 256)
			b.ResetTimer()
			cpu := cpuTime(b)
			for range b.N {
				if _, err := x.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(x, back); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// failWrites is a connection whose writes fail with err (a reset the
// kernel reports to a write) and send nothing.
type failWrites struct {
	net.Conn
	err error
}

func (c failWrites) Write([]byte) (int, error) { return 0, c.err }

// A Write that ran into a reset closes the connection; a Read that fails
// because of that close (yamux's receive loop, which may end the session
// before the send loop does) reports the reset, so the session ends as
// the peer's doing (peerGone, SPEC §5 "Crash failover"), not as this
// node's close.
func TestSealedReadReportsWriteReset(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := <-accepted; p != nil {
		defer p.Close()
	}
	reset := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	k1, k2 := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	sc, err := newSealedConn(failWrites{c, reset}, k1, k2, nil)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() { _, err := sc.Read(make([]byte, 1)); read <- err }()
	if _, err := sc.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write: %v", err)
	}
	if err := <-read; !peerGone(err) {
		t.Errorf("the Read pending at the reset: %v, not the peer gone", err)
	}
	if _, err := sc.Read(make([]byte, 1)); !peerGone(err) {
		t.Errorf("a Read after the reset: %v, not the peer gone", err)
	}
}
