package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// testSecret is the clock secret shared by the test agents and the runs.
var testSecret = []byte("conformance-test-secret-0123456789abcdef")

// fakeAgent is an in-process TCKCLK/2 agent on loopback. Its defaults are a
// correct agent (SPEC §1, §2.1): the reference every check must pass. A
// broken agent changes one step.
type fakeAgent struct {
	key         *protocol.Key
	keyRaw      []byte
	readTimeout time.Duration // the whole line must arrive within it; 0 never times out
	// lines makes the per-connection reader of request lines.
	lines func(a *fakeAgent, c net.Conn) func() ([]byte, error)
	// parse turns a line into a request; an error means no answer.
	parse func(line []byte) (protocol.Request, error)
	// sample is the answer before signing.
	sample func(n protocol.Nonce) protocol.Response
	// sign sets the MAC.
	sign func(a *fakeAgent, r *protocol.Response)
	// encode renders the answer, LF included.
	encode func(r *protocol.Response) []byte
	// delay holds the answer back.
	delay time.Duration
	// holdOpen keeps the connection open after answering.
	holdOpen bool
	// multi answers every line of a connection, not only the first.
	multi bool
	// maxConns closes connections beyond this many at once (0: no cap).
	maxConns int32
	// serve replaces the whole handler (hostile agents).
	serve func(ctx context.Context, c net.Conn)
	// accepted, if set, gets a value (without blocking) at every accept.
	accepted chan struct{}

	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	open   atomic.Int32
	once   sync.Once
}

// reference returns a correct agent signing with key.
func reference(key []byte) *fakeAgent {
	return &fakeAgent{
		key:    protocol.NewKey(key),
		keyRaw: key,
		// SPEC §2.1's default: a shorter one closed connections whose
		// request a loaded machine delivered late (a spurious EOF)
		readTimeout: 2 * time.Second,
		lines:       oneLine,
		parse:       protocol.ParseRequest,
		sample:      honestSample(0),
		sign:        func(a *fakeAgent, r *protocol.Response) { a.key.Sign(r) },
		encode:      protocol.EncodeResponse,
	}
}

// honestSample reads the local clock (shifted by skew) as a synced source
// with a 3 ms uncertainty.
func honestSample(skew time.Duration) func(protocol.Nonce) protocol.Response {
	return func(n protocol.Nonce) protocol.Response {
		return protocol.Response{Nonce: n, ReferenceUnixMs: uint64(time.Now().Add(skew).UnixMilli()),
			UncertaintyMs: 3, Synced: true, SourceAgeMs: 250}
	}
}

// oneLine reads one line with protocol.LineReader under one deadline for the
// whole line, as SPEC §2.1 asks.
func oneLine(a *fakeAgent, c net.Conn) func() ([]byte, error) {
	if a.readTimeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(a.readTimeout))
	}
	return func() ([]byte, error) { return protocol.NewLineReader(c).ReadLine() }
}

// start listens on loopback and serves until the test ends.
func (a *fakeAgent) start(t testing.TB) string {
	t.Helper()
	addr, err := a.listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return addr
}

// listen serves on a loopback port until Close.
func (a *fakeAgent) listen() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.ln, a.cancel = ln, cancel
	a.wg.Go(func() { a.accept(ctx) })
	return ln.Addr().String(), nil
}

func (a *fakeAgent) accept(ctx context.Context) {
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		if a.accepted != nil {
			select {
			case a.accepted <- struct{}{}:
			default:
			}
		}
		a.wg.Go(func() {
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			if n := a.open.Add(1); a.maxConns > 0 && n > a.maxConns {
				a.open.Add(-1)
				return
			}
			defer a.open.Add(-1)
			if a.serve != nil {
				a.serve(ctx, c)
				return
			}
			a.handle(ctx, c)
		})
	}
}

// Close stops the agent and waits for every connection's goroutine.
func (a *fakeAgent) Close() {
	a.once.Do(func() {
		a.cancel()
		a.ln.Close()
		a.wg.Wait()
	})
}

func (a *fakeAgent) handle(ctx context.Context, c net.Conn) {
	next := a.lines(a, c)
	for {
		line, err := next()
		if err != nil {
			return
		}
		req, err := a.parse(line)
		if err != nil {
			return
		}
		r := a.sample(req.Nonce)
		a.sign(a, &r)
		if a.delay > 0 && !wait(ctx, a.delay) {
			return
		}
		if _, err := c.Write(a.encode(&r)); err != nil {
			return
		}
		if !a.multi {
			break
		}
	}
	if a.holdOpen {
		<-ctx.Done()
	}
}

// wait is a cancellable pause (an agent that is slow on purpose).
func wait(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// everyLine reads line after line from one connection, each within the
// read timeout (the agent that answers several requests on a connection).
func everyLine(a *fakeAgent, c net.Conn) func() ([]byte, error) {
	br := bufio.NewReaderSize(c, 512)
	return func() ([]byte, error) {
		_ = c.SetReadDeadline(time.Now().Add(a.readTimeout))
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		return bytes.TrimSuffix(line, []byte{'\n'}), nil
	}
}

// perRead restarts the read timeout before every read: a trickling client
// keeps it alive forever (slowloris).
type perRead struct {
	c net.Conn
	d time.Duration
}

func (p perRead) Read(b []byte) (int, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(p.d))
	return p.c.Read(b)
}

func perReadLine(a *fakeAgent, c net.Conn) func() ([]byte, error) {
	return func() ([]byte, error) { return protocol.NewLineReader(perRead{c, a.readTimeout}).ReadLine() }
}

// firstRead takes whatever the first read returns as the whole line.
func firstRead(a *fakeAgent, c net.Conn) func() ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(a.readTimeout))
	return func() ([]byte, error) {
		buf := make([]byte, protocol.MaxLine+1)
		n, err := c.Read(buf)
		if n == 0 {
			return nil, errors.Join(err, errors.New("nothing read"))
		}
		return bytes.TrimSuffix(buf[:n], []byte{'\n'}), nil
	}
}
