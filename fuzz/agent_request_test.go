package fuzz

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/agent"
	"github.com/tckclk/tckclk/protocol"
)

type fixedAnswer struct{ key *protocol.Key }

func (a fixedAnswer) Answer(n protocol.Nonce) protocol.Response {
	r := protocol.Response{Nonce: n, ReferenceUnixMs: 1_800_000_000_000, UncertaintyMs: 3, Synced: true, SourceAgeMs: 7}
	a.key.Sign(&r)
	return r
}

type noObserver struct{}

func (noObserver) Exchange(string, time.Duration) {}

// countingConn is the agent's side of one connection: it counts the bytes
// the agent reads and the reads it issues after a chunk that held an LF.
type countingConn struct {
	net.Conn
	mu        sync.Mutex
	read      int
	sawLF     bool
	afterLF   int
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.sawLF {
		c.afterLF++
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read += n
	if bytes.IndexByte(p[:n], '\n') >= 0 {
		c.sawLF = true
	}
	c.mu.Unlock()
	return n, err
}

// countingConn deliberately has no SyscallConn: the agent's socket path
// reads the first bytes straight from the fd (agent.Server.firstRead),
// which no wrapper could count, so here every read goes through Read. That
// path's bound is its buffer (LineReader.ReadOnce reads into the free part
// of the 257-byte line buffer once; ReadLine reads on only without an LF),
// tested in protocol and agent.

func (c *countingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// countingListener hands every accepted connection, wrapped, to conns.
type countingListener struct {
	net.Listener
	conns chan *countingConn
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c, closed: make(chan struct{})}
	l.conns <- cc
	return cc, nil
}

// FuzzAgentRequest sends arbitrary bytes to the agent's server over
// loopback TCP (then half-closes): it answers iff the naive parser accepts
// the bytes before the first LF (SPEC §1.2, §2.1), with exactly one line
// that echoes the nonce and whose MAC the naive HMAC of SPEC §1.3 verifies.
// A counting wrapper around the agent's side of the connection measures
// what it reads (SPEC §1.1): never more than 257 bytes, no read issued
// once the LF has arrived, and at least what it needed to decide (up to
// the LF, or 257 bytes, or everything sent).
func FuzzAgentRequest(f *testing.F) {
	for _, s := range []string{
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\n",
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\nTCKCLK 2 AAECAwQFBgcICQoLDA0ODw\n",
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODx\n",
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\r\n",
		"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw",
		"\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Add(bytes.Repeat([]byte("A"), 300))                              // no LF in 257 bytes
	f.Add(append(bytes.Repeat([]byte("A"), 280), "\nTCKCLK 2 x\n"...)) // LF past 257
	f.Add(append([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\n"), bytes.Repeat([]byte("B"), 400)...))
	secret := []byte("fuzz-agent-request-secret-0123456789abcdef")
	key := protocol.NewKey(secret)
	srv := agent.NewServer(agent.ServerConfig{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxConns: 64},
		fixedAnswer{key}, noObserver{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	cl := countingListener{Listener: ln, conns: make(chan *countingConn, 1)}
	go srv.Serve(cl)
	f.Cleanup(func() { ln.Close() })
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Skip(err) // the fuzzing machine ran out of ports or descriptors
		}
		defer c.Close()
		var agentSide *countingConn
		select {
		case agentSide = <-cl.conns:
		case <-time.After(5 * time.Second):
			t.Fatal("the agent did not accept the connection")
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(in) // may fail once the agent has closed: that is fine
		c.(*net.TCPConn).CloseWrite()
		var out bytes.Buffer
		_, err = io.Copy(&out, c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%q: reading the answer: %v", in, err)
		}
		select {
		case <-agentSide.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the agent did not close its side")
		}
		agentSide.mu.Lock()
		read, afterLF := agentSide.read, agentSide.afterLF
		agentSide.mu.Unlock()
		idx := bytes.IndexByte(in, '\n')
		need := min(len(in), protocol.MaxLine+1)
		if idx >= 0 {
			need = min(need, idx+1)
		}
		if read > protocol.MaxLine+1 || afterLF != 0 || read < need {
			t.Fatalf("%q: the agent read %d bytes (%d reads after the LF); want %d..=%d and none after the LF",
				in, read, afterLF, need, protocol.MaxLine+1)
		}
		want := false
		var nonce protocol.Nonce
		if idx >= 0 && idx <= protocol.MaxLine {
			var reason protocol.Reason
			nonce, reason = naiveParseRequest(string(in[:idx]))
			want = reason == ""
		}
		if !want {
			if out.Len() != 0 {
				t.Fatalf("%q: invalid request answered with %q", in, out.Bytes())
			}
			return
		}
		line, rest, ok := bytes.Cut(out.Bytes(), []byte("\n"))
		if !ok || len(rest) != 0 {
			t.Fatalf("%q: want exactly one answer line, got %q", in, out.Bytes())
		}
		resp, err := protocol.ParseVerify(line, nonce, protocol.KeyRing{key})
		if err != nil {
			t.Fatalf("%q: answer %q: %v", in, line, err)
		}
		if !naiveMACValid(secret, resp) {
			t.Fatalf("%q: answer %q: protocol verified a MAC the naive HMAC refuses", in, line)
		}
	})
}
