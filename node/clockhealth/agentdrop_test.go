package clockhealth_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tckclk/tckclk/agent"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// clockAnswerer answers as healthy() does: R = the manual wall clock in ms,
// u = 3, synced, age 100, signed with the vector secret.
type clockAnswerer struct {
	key *protocol.Key
	clk *clockhealthtest.Clock
}

func (a clockAnswerer) Answer(n protocol.Nonce) protocol.Response {
	r := protocol.Response{Nonce: n, ReferenceUnixMs: uint64(a.clk.WallNs() / 1e6), UncertaintyMs: 3, Synced: true, SourceAgeMs: 100}
	a.key.Sign(&r)
	return r
}

// resultObserver hands the agent's per-connection results to the test:
// overloads (a connection dropped at max_conns) apart from the rest.
type resultObserver struct{ overloads, others chan string }

func (o resultObserver) Exchange(result string, _ time.Duration) {
	if result == agent.ResultOverload {
		o.overloads <- result
		return
	}
	o.others <- result
}

// dropDialer connects as a node does, but its first drops connections are
// handed to the prober only once the agent has dropped them at its cap: the
// node's request is not written yet, the case a clean EOF would turn into
// format. (On loopback the reset can even beat the dial's own completion:
// then the dial fails with connect.) After the last of them, freed runs (it
// may free the agent's slot).
type dropDialer struct {
	drops int
	obs   resultObserver
	freed func() error
}

func (d *dropDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if d.drops == 0 {
		return c, err
	}
	d.drops--
	select {
	case <-d.obs.overloads:
	case <-time.After(5 * time.Second):
		err = errors.Join(err, errors.New("the agent did not drop a connection over its max_conns"))
	}
	if d.drops == 0 && d.freed != nil {
		err = errors.Join(err, d.freed())
	}
	if err != nil && c != nil {
		c.Close()
		c = nil
	}
	return c, err
}

// The real agent server (package agent) at max_conns drops the connection
// over the cap before reading its request. The node's exchange on it fails
// with io (or connect, when the reset beats the dial) — could not complete,
// tried again within the burst (SPEC §3.1) — never format, which a clean
// EOF before the LF would be (§1.1) and which would fail the node as a
// lying agent, refused replacement (§3.4).
func TestAgentAtMaxConnsIsIncompleteNotFormat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drops int  // exchanges of the burst (3) the agent drops
		free  bool // the agent's slot is freed after the last dropped one
	}{
		{"every exchange of the burst dropped: FAILED with io or connect", 3, false},
		{"the slot freed within the burst: the next exchange passes", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clockhealthtest.NewClock(t0)
			obs := resultObserver{overloads: make(chan string, 16), others: make(chan string, 16)}
			srv := agent.NewServer(agent.ServerConfig{ReadTimeout: time.Minute, WriteTimeout: 5 * time.Second, MaxConns: 1},
				clockAnswerer{protocol.NewKey([]byte(vectorSecret)), clk}, obs, testLogger(t))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			held, err := net.Dial("tcp", ln.Addr().String()) // the agent's one connection, silent
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				held.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := srv.Shutdown(ctx); err != nil {
					t.Errorf("agent shutdown: %v", err)
				}
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}
			})
			for deadline := time.Now().Add(5 * time.Second); srv.OpenConns() != 1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the agent does not hold the first connection")
				}
			}
			d := &dropDialer{drops: tc.drops, obs: obs}
			if tc.free {
				d.freed = func() error {
					held.Close()
					select { // its result is reported once the agent has let it go
					case <-obs.others:
						return nil
					case <-time.After(5 * time.Second):
						return errors.New("the agent did not release the held connection")
					}
				}
			}
			hs := &harness{t: t, clk: clk, reg: prometheus.NewRegistry()}
			opts := clockhealth.Options{
				Config: baseConfig(ln.Addr().String()), Secret: []byte(vectorSecret),
				Wall: clk, Mono: clk, Logger: testLogger(t), Registerer: hs.reg, Dialer: d,
			}
			opts.Config.ProbeTimeoutMs = opts.Config.ProbeIntervalMs // a loaded machine's loopback is not the subject
			if hs.mon, err = clockhealth.New(opts); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = hs.mon.Close() })

			err = hs.mon.Probe(t.Context())
			if tc.free {
				if err != nil && !errors.Is(err, clockhealth.ErrClockCheck) {
					t.Fatalf("round after one dropped exchange: %v (reason %q)", err, reasonOf(t, err))
				}
				if st := hs.mon.Status(); st.Stage == clockhealth.StageFailed {
					t.Fatalf("FAILED after one dropped exchange: %+v", st)
				}
			} else {
				r := reasonOf(t, err)
				if r != protocol.ReasonIO && r != protocol.ReasonConnect {
					t.Fatalf("reason %q, want io or connect (incomplete exchanges): %v", r, err)
				}
				hs.wantFailed(err, r)
			}
			if d.drops != 0 {
				t.Fatalf("%d of the dropped exchanges never dialled", d.drops)
			}
		})
	}
}
