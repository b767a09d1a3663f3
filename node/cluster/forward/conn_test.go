package forward

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testWait = 10 * time.Second

// peerConn is a server-side conn that knows its peer, as a mesh stream does.
type peerConn struct {
	net.Conn
	id string
}

func (p peerConn) PeerID() string { return p.id }

// trackingListener names its connections' peer and remembers them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return peerConn{c, "node-2"}, nil
}

func (l *trackingListener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

type harness struct {
	t      *testing.T
	srv    *Server
	ln     *trackingListener
	client *Client
	dials  atomic.Int32
	served chan error
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, cfg ServerConfig, h Handler) *harness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = quietLogger()
	hs := &harness{t: t, srv: NewServer(cfg), ln: &trackingListener{Listener: ln}, served: make(chan error, 1)}
	go func() { hs.served <- hs.srv.Serve(hs.ln, h) }()
	hs.client = NewClient(func(ctx context.Context) (net.Conn, error) {
		hs.dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
	t.Cleanup(func() {
		hs.client.Close()
		hs.srv.Close()
		select {
		case err := <-hs.served:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Serve returned %v, want ErrClosed", err)
			}
		case <-time.After(testWait):
			t.Error("Serve did not return after Close")
		}
	})
	return hs
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

// echo answers every request with the response table keyed by op, and
// records what it saw.
type echo struct {
	mu   sync.Mutex
	seen []Request
	peer []string
	resp func(Request) Response
}

func (e *echo) Forwarded(_ context.Context, peer string, r Request) Response {
	e.mu.Lock()
	e.seen = append(e.seen, r)
	e.peer = append(e.peer, peer)
	e.mu.Unlock()
	return e.resp(r)
}

// Every op and every code crosses the wire intact; the handler learns
// the peer's NodeId; errors match their codes.
func TestRoundTripEveryOpAndCode(t *testing.T) {
	responses := sampleResponses()
	var next atomic.Int32
	e := &echo{resp: func(Request) Response { return responses[int(next.Add(1)-1)%len(responses)] }}
	h := start(t, ServerConfig{}, e)
	for i := range responses {
		req := sampleRequests()[i%len(sampleRequests())]
		got, err := h.client.Do(ctxT(t), req)
		want := responses[i]
		if want.List != nil && len(want.List.Tickets) == 0 {
			want.List = &List{Truncated: want.List.Truncated} // decoded as nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("response %d: %+v, want %+v", i, got, want)
		}
		if want.Code == CodeOK {
			if err != nil {
				t.Fatalf("ok answer with error %v", err)
			}
			continue
		}
		var fe *Error
		if !errors.As(err, &fe) || fe.Code != want.Code || fe.Message != want.Message || fe.Holder != want.Holder || fe.Token != want.Token || fe.Stage != want.Stage || fe.Reason != want.Reason {
			t.Fatalf("code %v: error %#v", want.Code, err)
		}
		if !errors.Is(err, &Error{Code: want.Code}) {
			t.Fatalf("errors.Is does not match code %v", want.Code)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, r := range e.seen {
		want := sampleRequests()[i%len(sampleRequests())]
		if r != want {
			t.Fatalf("handler saw %+v, want %+v", r, want)
		}
		if e.peer[i] != "node-2" {
			t.Fatalf("peer %q", e.peer[i])
		}
	}
	if n := h.dials.Load(); n != 1 {
		t.Fatalf("%d dials for sequential calls, want 1", n)
	}
}

// Many requests in flight over one connection, answered out of order,
// each reach their own caller.
func TestConcurrentOneConn(t *testing.T) {
	e := &echo{resp: func(r Request) Response {
		return Response{Code: CodeOK, Ticket: &Ticket{Name: r.Name, Holder: r.Holder}}
	}}
	h := start(t, ServerConfig{}, e)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				name := fmt.Sprintf("t-%d-%d", g, i)
				resp, err := h.client.Do(ctxT(t), Request{Op: OpGrant, Name: name, Holder: "h", LeaseS: 1})
				if err != nil || resp.Ticket == nil || resp.Ticket.Name != name {
					errs <- fmt.Errorf("%s: %+v %v", name, resp, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := h.dials.Load(); n != 1 {
		t.Fatalf("%d dials, want 1 connection for all", n)
	}
}

// blocker holds every request until released.
type blocker struct {
	in      chan Request
	release chan struct{}
	active  atomic.Int32
	max     atomic.Int32
}

func newBlocker() *blocker {
	return &blocker{in: make(chan Request, 100), release: make(chan struct{})}
}

func (b *blocker) Forwarded(ctx context.Context, _ string, r Request) Response {
	n := b.active.Add(1)
	defer b.active.Add(-1)
	for {
		m := b.max.Load()
		if n <= m || b.max.CompareAndSwap(m, n) {
			break
		}
	}
	b.in <- r
	select {
	case <-b.release:
		return Response{Code: CodeOK, Ticket: &Ticket{Name: r.Name}}
	case <-ctx.Done():
		return Response{Code: CodeUnavailable, Message: "closing"}
	}
}

func waitIn(t *testing.T, b *blocker) Request {
	t.Helper()
	select {
	case r := <-b.in:
		return r
	case <-time.After(testWait):
		t.Fatal("the handler never got the request")
		return Request{}
	}
}

// A ctx that ends after the send gives ErrOutcomeUnknown (with the ctx's
// error); the late answer is dropped and the connection serves on.
func TestCtxDeadlineAfterSend(t *testing.T) {
	b := newBlocker()
	h := start(t, ServerConfig{}, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Do(ctx, Request{Op: OpGrant, Name: "slow", Holder: "h", LeaseS: 1})
		done <- err
	}()
	waitIn(t, b)
	cancel()
	err := <-done
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do after cancel: %v, want ErrOutcomeUnknown and context.Canceled", err)
	}
	b.release <- struct{}{} // the late answer
	go func() { b.release <- struct{}{} }()
	resp, err := h.client.Do(ctxT(t), Request{Op: OpGet, Name: "next"})
	if err != nil || resp.Ticket == nil || resp.Ticket.Name != "next" {
		t.Fatalf("next call: %+v %v", resp, err)
	}
	waitIn(t, b)
	if n := h.dials.Load(); n != 1 {
		t.Fatalf("%d dials, want the same connection", n)
	}
	// A ctx already done sends nothing.
	dead, c2 := context.WithCancel(context.Background())
	c2()
	if _, err := h.client.Do(dead, Request{Op: OpGet, Name: "x"}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("done ctx: %v", err)
	}
}

// A connection that breaks with a write in flight reports ErrOutcomeUnknown
// (never a silent retry); the next call redials.
func TestBrokenConnRedials(t *testing.T) {
	renews := make(chan struct{}, 10)
	h := start(t, ServerConfig{}, HandlerFunc(func(ctx context.Context, _ string, r Request) Response {
		if r.Op == OpRenew { // held until its connection breaks
			renews <- struct{}{}
			<-ctx.Done()
			return Response{Code: CodeUnavailable}
		}
		return Response{Code: CodeOK, Ticket: &Ticket{Name: r.Name}}
	}))
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Do(ctxT(t), Request{Op: OpRenew, Name: "n", Holder: "h", Token: 1, LeaseS: 1})
		done <- err
	}()
	select {
	case <-renews:
	case <-time.After(testWait):
		t.Fatal("the renew never arrived")
	}
	h.ln.closeConns()
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("in-flight write on a broken conn: %v, want ErrOutcomeUnknown", err)
		}
	case <-time.After(testWait):
		t.Fatal("the in-flight call never returned")
	}
	resp, err := h.client.Do(ctxT(t), Request{Op: OpGet, Name: "again"})
	if err != nil || resp.Ticket.Name != "again" {
		t.Fatalf("after redial: %+v %v", resp, err)
	}
	if n := h.dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
	if n := len(renews); n != 0 {
		t.Fatalf("the renew was sent again (%d more)", n)
	}
}

// MaxInFlight bounds the handlers running at once.
func TestBoundedConcurrency(t *testing.T) {
	b := newBlocker()
	h := start(t, ServerConfig{MaxInFlight: 2}, b)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.client.Do(ctxT(t), Request{Op: OpGet, Name: fmt.Sprint(i)})
		}()
	}
	waitIn(t, b)
	waitIn(t, b)
	for range 4 {
		b.release <- struct{}{}
		waitIn(t, b)
	}
	b.release <- struct{}{}
	b.release <- struct{}{}
	wg.Wait()
	if m := b.max.Load(); m != 2 {
		t.Fatalf("%d handlers at once, want at most (and here exactly) 2", m)
	}
}

// Garbage, an oversize length, an unknown version and a stalled frame each
// get their connection dropped and counted; the server keeps serving.
func TestBadInputDropped(t *testing.T) {
	e := &echo{resp: func(r Request) Response { return Response{Code: CodeOK} }}
	h := start(t, ServerConfig{FrameTimeout: 200 * time.Millisecond}, e)
	addr := h.ln.Addr().String()
	var oversize [4]byte
	binary.BigEndian.PutUint32(oversize[:], MaxFrame+1)
	badVersion, _ := AppendRequest(1, Request{Op: OpGet, Name: "n"})
	badVersion[0] = 7
	framed := func(b []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
		return append(out, b...)
	}
	for name, in := range map[string][]byte{
		"garbage":     framed([]byte("GET / HTTP/1.1\r\n\r\n")),
		"oversize":    oversize[:],
		"version":     framed(badVersion),
		"stalled":     {0, 0, 0, 50, 1, 1},
		"http prefix": []byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		before := h.srv.Dropped()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(testWait))
		if _, err := c.Write(in); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("%s: the server answered %d bytes", name, n)
		} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: the server kept the connection open", name)
		}
		c.Close()
		// The server counts the drop before it closes the connection we
		// just saw closed.
		if h.srv.Dropped() != before+1 {
			t.Fatalf("%s: dropped %d → %d", name, before, h.srv.Dropped())
		}
		if _, err := h.client.Do(ctxT(t), Request{Op: OpGet, Name: "still"}); err != nil {
			t.Fatalf("after %s the server stopped serving: %v", name, err)
		}
	}
}

// Close ends handlers through their ctx, answers nothing more, and leaves
// no goroutine (TestMain's goleak); Do after Close is ErrClosed; a dial
// error sends nothing.
func TestCloseAndDialErrors(t *testing.T) {
	b := newBlocker()
	h := start(t, ServerConfig{}, b)
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Do(ctxT(t), Request{Op: OpRelease, Name: "n", Holder: "h", Token: 2})
		done <- err
	}()
	waitIn(t, b)
	h.srv.Close()
	if err := <-done; !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("in flight at server Close: %v", err)
	}
	h.client.Close()
	if _, err := h.client.Do(ctxT(t), Request{Op: OpGet, Name: "n"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
	c := NewClient(func(context.Context) (net.Conn, error) { return nil, errors.New("no route") })
	defer c.Close()
	if _, err := c.Do(ctxT(t), Request{Op: OpGet, Name: "n"}); err == nil || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("dial failure: %v, want a plain error", err)
	}
}
