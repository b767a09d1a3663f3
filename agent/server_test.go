package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

func devKeys() protocol.KeyRing {
	return protocol.KeyRing{protocol.NewKey(protocol.DevKey(testSecret))}
}

// SPEC §1.3, §2.2: a --dev agent answers synced, signs with dev_key and only
// with it, and says so in /readyz, /v1/status and /metrics.
func TestDevReferenceEndToEnd(t *testing.T) {
	r := startAgent(t, devConfig(t), Options{})
	addr := r.Addr().String()
	waitFor(t, "readyz 200", 3*time.Second, func() bool {
		code, _ := httpGet(t, "http://"+r.HTTPAddr().String()+"/readyz")
		return code == 200
	})
	resp, err := exchange(addr, devKeys(), 2*time.Second)
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if !resp.Synced || resp.UncertaintyMs < 1 {
		t.Fatalf("dev answer %+v: want synced with uncertainty ≥ 1", resp)
	}
	now := uint64(time.Now().UnixMilli())
	if d := int64(now) - int64(resp.ReferenceUnixMs); d < -50 || d > 1000 {
		t.Fatalf("dev reference %d is %d ms from the local clock", resp.ReferenceUnixMs, d)
	}
	// SPEC §1.3: the plain secret must not verify a dev answer.
	if _, err := exchange(addr, protocol.KeyRing{protocol.NewKey(testSecret)}, 2*time.Second); err == nil {
		t.Fatal("a dev answer verified under the plain secret")
	} else if r, _ := protocol.ReasonOf(err); r != protocol.ReasonMAC {
		t.Fatalf("want mac, got %v", err)
	}
	_, body := httpGet(t, "http://"+r.HTTPAddr().String()+"/readyz")
	if !strings.Contains(body, "DEV REFERENCE") {
		t.Fatalf("/readyz does not label the dev reference: %q", body)
	}
	st := getStatus(t, r)
	if !st.DevReference || st.Mode != "dev-reference" || !st.Synced || st.Selected != "dev" {
		t.Fatalf("/v1/status %+v", st)
	}
	if v, ok := metricValue(t, r, "tckclk_agent_dev_reference"); !ok || v != "1" {
		t.Fatalf("metric tckclk_agent_dev_reference = %q", v)
	}
	if v, _ := metricValue(t, r, `tckclk_agent_requests_total{result="synced"}`); v != "2" {
		t.Fatalf("requests synced = %q, want 2", v)
	}
}

// SPEC §2.1: a synced sample never has uncertainty 0 (every answer of a
// run of exchanges is synced with uncertainty_ms ≥ 1, and /v1/status says
// the same); §2.2: a --dev agent is ready (/readyz 200) within a second of
// being started.
func TestDevReadyWithinASecond(t *testing.T) {
	start := time.Now()
	r := startAgent(t, devConfig(t), Options{})
	url := "http://" + r.HTTPAddr().String() + "/readyz"
	waitFor(t, "readyz 200 within 1 s of the start", time.Second-time.Since(start), func() bool {
		code, _ := httpGet(t, url)
		return code == 200
	})
	t.Logf("dev agent ready in %v", time.Since(start))
	for i := range 20 {
		resp, err := exchange(r.Addr().String(), devKeys(), 2*time.Second)
		if err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
		if !resp.Synced || resp.UncertaintyMs < 1 {
			t.Fatalf("exchange %d: synced=%v uncertainty_ms=%d; a ready dev agent answers synced with uncertainty ≥ 1", i, resp.Synced, resp.UncertaintyMs)
		}
	}
	if st := getStatus(t, r); !st.Synced || st.UncertaintyMs == nil || *st.UncertaintyMs < 1 {
		t.Fatalf("/v1/status synced=%v uncertainty_ms=%v", st.Synced, st.UncertaintyMs)
	}
}

// SPEC §2.1: requests are answered only when well-formed; every
// invalid_requests vector gets no answer, the connection is closed, and the
// reason is counted.
func TestInvalidRequestsGetNoAnswer(t *testing.T) {
	r := startAgent(t, devConfig(t), Options{})
	addr := r.Addr().String()
	v := loadVectors(t)
	for _, iv := range v.InvalidRequests {
		t.Run(iv.Name, func(t *testing.T) {
			got, took, err := sendRaw(t, addr, iv.Wire(), 5*time.Second)
			if len(got) != 0 {
				t.Fatalf("agent answered %q", got)
			}
			if isTimeout(err) {
				t.Fatalf("connection not closed after the invalid request (%v)", took)
			}
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("ended by %v after %v, want a reset (doc.go: never a clean EOF unanswered)", err, took)
			}
		})
	}
	// Every one counted under a SPEC §1.5 reason, none answered.
	total := 0
	for _, res := range []string{"size", "format", "version"} {
		if v, ok := metricValue(t, r, `tckclk_agent_requests_total{result="`+res+`"}`); ok {
			var n int
			for _, c := range v {
				n = n*10 + int(c-'0')
			}
			total += n
		}
	}
	if total != len(v.InvalidRequests) {
		t.Fatalf("counted %d invalid requests by reason, sent %d", total, len(v.InvalidRequests))
	}
	if v, _ := metricValue(t, r, `tckclk_agent_requests_total{result="synced"}`); v != "0" {
		t.Fatalf("synced answers = %q, want 0", v)
	}
}

// SPEC §2.1: a connection that has not delivered its line within the read
// timeout is closed — silent, or slow (a byte at a time).
func TestSilentAndSlowClientsClosed(t *testing.T) {
	cfg := devConfig(t)
	cfg.ReadTimeoutMs = 300
	r := startAgent(t, cfg, Options{})
	addr := r.Addr().String()
	got, took, err := sendRaw(t, addr, nil, 5*time.Second)
	if len(got) != 0 || !errors.Is(err, syscall.ECONNRESET) || took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("silent client: got %q after %v (err %v); want reset after ~300 ms", got, took, err)
	}
	// Slowloris: a byte every 100 ms never completes a line in time.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	line := []byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw\n")
	var werr error
	for i := 0; i < len(line) && werr == nil; i++ {
		_, werr = c.Write(line[i : i+1])
		time.Sleep(100 * time.Millisecond) // the client's pace, not synchronisation
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	// The reset fails the write after it, or else the read.
	if n != 0 || !errors.Is(werr, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("slow client: read %q err %v (write err %v), want a reset", buf[:n], err, werr)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("slow client held %v", took)
	}
	if v, _ := metricValue(t, r, `tckclk_agent_requests_total{result="timeout"}`); v != "2" {
		t.Fatalf("timeouts counted %q, want 2", v)
	}
}

// SPEC §1.1: pipelined requests get at most one answer, then the close.
func TestPipelinedRequestsGetOneAnswer(t *testing.T) {
	r := startAgent(t, devConfig(t), Options{})
	n1, _ := protocol.NewNonce()
	n2, _ := protocol.NewNonce()
	msg := append(protocol.EncodeRequest(protocol.Request{Nonce: n1}), protocol.EncodeRequest(protocol.Request{Nonce: n2})...)
	got, _, err := sendRaw(t, r.Addr().String(), msg, 5*time.Second)
	if isTimeout(err) {
		t.Fatal("not closed")
	}
	lines := bytes.Split(bytes.TrimSuffix(got, []byte("\n")), []byte("\n"))
	if len(lines) != 1 || !bytes.HasSuffix(got, []byte("\n")) {
		t.Fatalf("want exactly one answer line, got %q", got)
	}
	if _, err := protocol.ParseVerify(lines[0], n1, devKeys()); err != nil {
		t.Fatalf("the one answer is not the first request's: %v", err)
	}
}

// SPEC §2.1: 100 concurrent clients are all answered.
func TestConcurrentClientsAllAnswered(t *testing.T) {
	r := startAgent(t, devConfig(t), Options{})
	addr := r.Addr().String()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := exchange(addr, devKeys(), 5*time.Second); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// SPEC §2.1: concurrent connections are capped; beyond the cap new ones are
// reset at once (not after the read timeout), and counted. A node's
// exchange over the cap fails with io — incomplete, tried again within its
// burst (SPEC §3.1) — never format, which a clean EOF before the LF would
// be (§1.1) and which would fail the node as if the agent lied (§3.4).
func TestMaxConnsClosesNewOnesAtOnce(t *testing.T) {
	cfg := devConfig(t)
	cfg.MaxConns = 3
	cfg.ReadTimeoutMs = 5000
	r := startAgent(t, cfg, Options{})
	addr := r.Addr().String()
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, "3 connections held", 3*time.Second, func() bool { return r.server.OpenConns() == 3 })
	// A node's exchange over the cap, its request written before the agent
	// drops the connection (or its write refused), the line read as
	// clockhealth reads it; and one that has written nothing yet when the
	// reset comes, the case where a FIN read as format. On loopback the
	// reset can beat the dial's own completion: connect, also incomplete.
	for _, write := range []bool{true, false} {
		start := time.Now()
		err := overTheCap(addr, write)
		reason, _ := protocol.ReasonOf(err)
		if reason != protocol.ReasonIO && reason != protocol.ReasonConnect || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("over the cap (request written: %v): %v (reason %q); want a reset, io or connect", write, err, reason)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("over the cap: reset after %v, want at once", took)
		}
	}
	if v, _ := metricValue(t, r, `tckclk_agent_requests_total{result="overload"}`); v != "2" {
		t.Fatalf("overload counted %q", v)
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "held connections released", 3*time.Second, func() bool { return r.server.OpenConns() == 0 })
	if _, err := exchange(addr, devKeys(), 2*time.Second); err != nil {
		t.Fatalf("after the held ones closed: %v", err)
	}
}

// overTheCap runs a node's exchange (as harness's exchange does) against
// an agent at max_conns, with the request written or, once the agent has
// dropped the connection, nothing written at all; it returns the error.
func overTheCap(addr string, write bool) error {
	if write {
		_, err := exchange(addr, devKeys(), 4*time.Second)
		return err
	}
	c, err := net.DialTimeout("tcp", addr, 4*time.Second)
	if err != nil {
		return protocol.Wrap(protocol.ReasonConnect, "dial", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(4 * time.Second))
	_, err = protocol.NewLineReader(c).ReadLine()
	return err
}

// SPEC §2.1 / issue: graceful shutdown finishes the exchange in flight — a
// client that had connected and was still sending gets its answer.
func TestShutdownFinishesInFlight(t *testing.T) {
	cfg := devConfig(t)
	a, err := New(cfg, Options{Logger: testLogger(t), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	c, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, _ := protocol.NewNonce()
	req := protocol.EncodeRequest(protocol.Request{Nonce: n})
	c.Write(req[:10])
	waitFor(t, "connection held", 2*time.Second, func() bool { return a.server.OpenConns() == 1 })
	cancel() // SIGTERM
	// New connections are refused once the listener is closed.
	waitFor(t, "listener closed", 2*time.Second, func() bool {
		nc, err := net.Dial("tcp", a.Addr().String())
		if err != nil {
			return true
		}
		nc.Close()
		return false
	})
	if !a.draining.Load() {
		t.Fatal("listener closed but not draining (/readyz would still say ready)")
	}
	c.Write(req[10:])
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	lr := protocol.NewLineReader(c)
	line, err := lr.ReadLine()
	if err != nil {
		t.Fatalf("in-flight request not answered: %v", err)
	}
	if _, err := protocol.ParseVerify(line, n, devKeys()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
}

// A connection still held when shutdown_timeout_ms runs out is reset, not
// left to the process's exit (a FIN, which a node whose request was not
// read yet would take for format); Run returns once it is.
func TestShutdownPastItsDeadlineResets(t *testing.T) {
	cfg := devConfig(t)
	cfg.ReadTimeoutMs = 10000
	cfg.ShutdownTimeoutMs = 200
	r := startAgent(t, cfg, Options{})
	c, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "connection held", 2*time.Second, func() bool { return r.server.OpenConns() == 1 })
	start := time.Now()
	r.cancel() // SIGTERM
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := protocol.NewLineReader(c).ReadLine(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("held past the shutdown deadline: %v after %v; want a reset", err, time.Since(start))
	}
	r.stop(t) // Run has returned
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %v (read timeout 10 s, shutdown 200 ms)", took)
	}
	if n := r.server.OpenConns(); n != 0 {
		t.Fatalf("%d connections open after Run returned", n)
	}
}

// SPEC §1.4 / §2.3: SIGHUP reloads the secret without dropping requests in
// flight; a bad secret file keeps the previous secret. Exchanges run during
// every one of the 20 reloads (each reload waits until at least two more
// have completed since the previous one), a connection opened before each
// reload and finished after it is answered, every answer verifies under one
// of the two secrets, and right after each reload an answer verifies under
// the new secret alone.
func TestSecretReloadUnderLoad(t *testing.T) {
	cfg := devConfig(t)
	r := startAgent(t, cfg, Options{})
	addr := r.Addr().String()
	next := []byte("the-next-secret-for-rotation-0123456789abcdef")
	keyOf := func(secret []byte) protocol.KeyRing {
		return protocol.KeyRing{protocol.NewKey(protocol.DevKey(secret))}
	}
	both := protocol.KeyRing{protocol.NewKey(protocol.DevKey(testSecret)), protocol.NewKey(protocol.DevKey(next))}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []error
	done := 0 // successful exchanges
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := exchange(addr, both, 2*time.Second)
				mu.Lock()
				if err != nil {
					fails = append(fails, err)
				} else {
					done++
				}
				mu.Unlock()
			}
		}()
	}
	completed := func() int { mu.Lock(); defer mu.Unlock(); return done }
	inFlight := 0
	for i := range 20 {
		secret := testSecret
		if i%2 == 0 {
			secret = next
		}
		// A request in flight across the reload: connected and half sent
		// before it, the rest after.
		n, err := protocol.NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		req := protocol.EncodeRequest(protocol.Request{Nonce: n})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(req[:12]); err != nil {
			t.Fatal(err)
		}
		before := completed()
		if err := os.WriteFile(cfg.SecretFile, secret, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := r.ReloadSecret(); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		if _, err := c.Write(req[12:]); err != nil {
			t.Fatalf("reload %d: finishing the in-flight request: %v", i, err)
		}
		line, err := protocol.NewLineReader(c).ReadLine()
		c.Close()
		if err != nil {
			t.Fatalf("reload %d dropped the request in flight: %v", i, err)
		}
		if _, err := protocol.ParseVerify(line, n, both); err != nil {
			t.Fatalf("reload %d: in-flight answer: %v", i, err)
		}
		inFlight++
		if _, err := exchange(addr, keyOf(secret), 2*time.Second); err != nil {
			t.Fatalf("reload %d: an answer after the reload does not verify under the new secret: %v", i, err)
		}
		waitFor(t, "two exchanges after the reload", 5*time.Second, func() bool { return completed() >= before+2 })
	}
	close(stop)
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("%d exchanges failed during reloads (%d succeeded): %v", len(fails), done, fails[0])
	}
	if done < 40 || inFlight != 20 {
		t.Fatalf("%d exchanges and %d in-flight answers during 20 reloads; want ≥ 40 and 20", done, inFlight)
	}
	t.Logf("%d exchanges and %d in-flight requests across 20 reloads, none failed", done, inFlight)
	// Ends on testSecret (i=19 odd). A bad file: error, old key stays.
	if err := os.Chmod(cfg.SecretFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.ReloadSecret(); err == nil || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("reload of a group-readable file: %v", err)
	}
	if _, err := exchange(addr, devKeys(), 2*time.Second); err != nil {
		t.Fatalf("after a failed reload the previous secret must stay: %v", err)
	}
	if v, _ := metricValue(t, r, `tckclk_agent_secret_reloads_total{result="error"}`); v != "1" {
		t.Fatalf("reload errors counted %q", v)
	}
}

// SPEC §2.3 /metrics: requests by result, a latency histogram, per-source
// offset, uncertainty, age, healthy, and synced.
func TestMetricsExposeTheState(t *testing.T) {
	r := startAgent(t, devConfig(t), Options{})
	if _, err := exchange(r.Addr().String(), devKeys(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{
		`tckclk_agent_requests_total{result="synced"}`,
		`tckclk_agent_answer_duration_seconds_count`,
		`tckclk_agent_synced`,
		`tckclk_agent_uncertainty_ms`,
		`tckclk_agent_source_healthy{source="dev"}`,
		`tckclk_agent_source_selected{source="dev"}`,
		`tckclk_agent_source_offset_seconds{source="dev"}`,
		`tckclk_agent_source_uncertainty_ms{source="dev"}`,
		`tckclk_agent_source_age_seconds{source="dev"}`,
		`tckclk_agent_source_polls_total{result="ok",source="dev"}`,
		`tckclk_agent_connections_open`,
	} {
		if _, ok := metricValue(t, r, series); !ok {
			t.Errorf("no %s in /metrics", series)
		}
	}
	if v, _ := metricValue(t, r, "tckclk_agent_synced"); v != "1" {
		t.Errorf("synced %q", v)
	}
	if code, body := httpGet(t, "http://"+r.HTTPAddr().String()+"/livez"); code != 200 || body != "ok\n" {
		t.Errorf("/livez %d %q", code, body)
	}
}

// The request path on arbitrary bytes: answered iff ParseRequest accepts the
// bytes before the first LF, with exactly one line echoing the nonce.
func TestServeConnAnswersOnlyValid(t *testing.T) {
	r := startAgent(t, devConfig(t), Options{})
	n, _ := protocol.NewNonce()
	good := protocol.EncodeRequest(protocol.Request{Nonce: n})
	for _, in := range [][]byte{good, append(good, "junk"...), []byte("TCKCLK 2 x\n"), {}, bytes.Repeat([]byte("A"), 400), []byte("\n"), append([]byte{0}, good...)} {
		cli, srv := net.Pipe()
		done := make(chan string, 1)
		go func() { done <- r.server.ServeConn(srv) }()
		go func() {
			cli.Write(in)
		}()
		cli.SetReadDeadline(time.Now().Add(3 * time.Second))
		var out bytes.Buffer
		buf := make([]byte, 512)
		for {
			k, err := cli.Read(buf)
			out.Write(buf[:k])
			if err != nil {
				break
			}
		}
		res := <-done
		cli.Close()
		line, _, _ := bytes.Cut(in, []byte("\n"))
		_, perr := protocol.ParseRequest(line)
		valid := perr == nil && bytes.Contains(in, []byte("\n"))
		if valid != (out.Len() > 0) {
			t.Errorf("%q: valid=%v but answered %q (result %s)", in, valid, out.Bytes(), res)
		}
		if valid {
			got := bytes.TrimSuffix(out.Bytes(), []byte("\n"))
			if bytes.Contains(got, []byte("\n")) {
				t.Errorf("%q: more than one line", in)
			}
			if _, err := protocol.ParseVerify(got, n, devKeys()); err != nil {
				t.Errorf("%q: %v", in, err)
			}
		}
	}
}

// A silent connection holds no line buffer (doc.go): with 5 connections
// parked before their first byte none of the pooled buffers is taken; one
// that sends half a line holds one, and every buffer is back once all are
// answered or closed. A partial first read (no LF yet) is completed from
// the connection.
func TestSilentConnectionsHoldNoBuffer(t *testing.T) {
	cfg := devConfig(t)
	cfg.ReadTimeoutMs = 5000
	r := startAgent(t, cfg, Options{})
	addr := r.Addr().String()
	s := r.server
	var silent []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	waitFor(t, "5 connections parked", 3*time.Second, func() bool { return s.waiting.Load() == 5 })
	if n := s.buffers.Load(); n != 0 {
		t.Fatalf("%d buffers held by 5 silent connections, want 0", n)
	}
	nonce, _ := protocol.NewNonce()
	req := protocol.EncodeRequest(protocol.Request{Nonce: nonce})
	half, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	if _, err := half.Write(req[:10]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the half line read", 3*time.Second, func() bool { return s.buffers.Load() == 1 && s.waiting.Load() == 5 })
	if _, err := half.Write(req[10:]); err != nil {
		t.Fatal(err)
	}
	half.SetReadDeadline(time.Now().Add(3 * time.Second))
	lr := protocol.NewLineReader(half)
	line, err := lr.ReadLine()
	if err != nil {
		t.Fatalf("half line then the rest: %v", err)
	}
	if _, err := protocol.ParseVerify(line, nonce, devKeys()); err != nil {
		t.Fatalf("answer: %v", err)
	}
	for _, c := range silent {
		c.Close()
	}
	waitFor(t, "all connections released", 3*time.Second, func() bool { return s.OpenConns() == 0 })
	if n, w := s.buffers.Load(), s.waiting.Load(); n != 0 || w != 0 {
		t.Fatalf("after all closed: %d buffers held, %d waiting; want 0, 0", n, w)
	}
}

// Before its first sample the agent has no reference, uncertainty or age:
// /v1/status shows none (null), never a sentinel such as the largest uint64.
func TestStatusShowsNoFiguresBeforeTheFirstSample(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen, cfg.HTTP = "127.0.0.1:0", "127.0.0.1:0"
	cfg.SecretFile = writeSecret(t, testSecret)
	cfg.Sources.Chrony.Address = "unix://" + filepath.Join(t.TempDir(), "no-chronyd.sock") // never answers
	r := startAgent(t, cfg, Options{})
	code, body := httpGet(t, "http://"+r.HTTPAddr().String()+"/v1/status")
	if code != 200 {
		t.Fatalf("/v1/status: %d %s", code, body)
	}
	for _, field := range []string{`"uncertainty_ms": null`, `"source_age_ms": null`, `"reference_unix_ms": null`} {
		if !strings.Contains(body, field) {
			t.Errorf("/v1/status lacks %s:\n%s", field, body)
		}
	}
	if strings.Contains(body, "18446744073709551615") {
		t.Errorf("/v1/status shows the largest uint64:\n%s", body)
	}
}
