package fuzz

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
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

// FuzzAgentRequest sends arbitrary bytes to the agent's server over
// loopback TCP (then half-closes): it answers iff the naive parser accepts
// the bytes before the first LF (SPEC §1.2, §2.1), with exactly one line
// that echoes the nonce and verifies, and never reads on past 257 bytes.
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
	key := protocol.NewKey([]byte("fuzz-agent-request-secret-0123456789abcdef"))
	srv := agent.NewServer(agent.ServerConfig{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxConns: 64},
		fixedAnswer{key}, noObserver{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go srv.Serve(ln)
	f.Cleanup(func() { ln.Close() })
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Skip(err) // the fuzzing machine ran out of ports or descriptors
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(in) // may fail once the agent has closed: that is fine
		c.(*net.TCPConn).CloseWrite()
		var out bytes.Buffer
		_, err = io.Copy(&out, c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%q: reading the answer: %v", in, err)
		}
		idx := bytes.IndexByte(in, '\n')
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
		if _, err := protocol.ParseVerify(line, nonce, protocol.KeyRing{key}); err != nil {
			t.Fatalf("%q: answer %q: %v", in, line, err)
		}
	})
}
