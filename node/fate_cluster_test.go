package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/lograte"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// SPEC §5 (a graceful stop), §4.1 (errors a client can act on): while
// the followers forward a steady stream of grants to the leader, the
// leader is stopped gracefully. It keeps serving forwarded requests until
// it has handed its leadership off and the requests in flight have their
// answers — applied, or refused before anything was applied (not the
// leader, stopping) — and any proposal the hand-off caught in flight has
// learnt its entry's fate under the next leader (consensus.Raft.Settle);
// only then does it stop serving forwarded requests and shut Raft down.
// No forwarded write may end with an unknown outcome. (Before, the
// forward server stopped at the signal, and every forwarded write in
// flight ended unknown.) The stopped leader's fate counts are logged:
// how many proposals its hand-off caught in flight.
func TestGracefulStopAnswersForwardedWrites(t *testing.T) {
	tc, leader := formThree(t)
	tc.waitReady(tc.names...)
	followers := tc.others(leader)
	stop := make(chan struct{})
	var applied, refused atomic.Int64
	var mu sync.Mutex
	var unknown []string
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			f := followers[i%len(followers)]
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				name := fmt.Sprintf("g%d-%d", i, j)
				start := time.Now()
				w, err := f.n.Write(ctx, api.Write{Op: ticket.OpGrant, Name: name, Holder: "h", LeaseS: 60})
				cancel()
				var ae *api.Error
				switch {
				case err == nil && w.Result.Code == ticket.CodeOK:
					applied.Add(1)
				case err == nil:
					t.Errorf("grant %s via %s: %v", name, f.n.cfg.Cluster.Name, w.Result.Code)
				case errors.As(err, &ae) && ae.Reason == "unknown_outcome":
					mu.Lock()
					unknown = append(unknown, fmt.Sprintf("%s via %s, sent %s, answered %s: %v", name, f.n.cfg.Cluster.Name,
						start.Format("15:04:05.000"), time.Now().Format("15:04:05.000"), err))
					mu.Unlock()
				default: // refused before anything was applied (no leader, not the leader, unreachable)
					refused.Add(1)
					time.Sleep(5 * time.Millisecond) // pacing: no election is won faster for being asked
				}
			}
		})
	}
	waitFor(t, "grants forwarded to the leader", 30*time.Second, func() bool { return applied.Load() >= 100 })
	t.Logf("stopping %s at %s", leader, time.Now().Format("15:04:05.000"))
	if err := tc.nodes[leader].tn.stop(); err != nil {
		t.Fatalf("graceful stop of %s: %v", leader, err)
	}
	close(stop)
	wg.Wait()
	fates := tc.nodes[leader].n.cons.Load().Fates()
	t.Logf("%d grants applied, %d refused; the stopped leader's proposals caught in flight by its hand-off: %+v", applied.Load(), refused.Load(), fates)
	for _, u := range unknown {
		t.Errorf("an unknown outcome: %s", u)
	}
	if fates.Unknown != 0 {
		t.Errorf("%d proposals on the stopped leader ended with an unknown outcome", fates.Unknown)
	}
}

// A shutdown that ended an entry in flight (consensus.ErrShutdown with
// ErrUnknownOutcome) is an unknown outcome to the client, not the
// "stopping" refusal that says nothing was applied; a shutdown before
// anything was proposed is that refusal.
func TestShutdownWithTheEntryInFlightIsUnknown(t *testing.T) {
	var ae *api.Error
	inFlight := fmt.Errorf("%w (%w: the entry may have been committed)", consensus.ErrShutdown, consensus.ErrUnknownOutcome)
	if err := consensusRefusal(inFlight); !errors.As(err, &ae) || ae.Reason != "unknown_outcome" || ae.Stage != "" {
		t.Errorf("a shutdown with the entry in flight: %#v", err)
	}
	before := fmt.Errorf("%w: closing; the entry was not proposed", consensus.ErrShutdown)
	if err := consensusRefusal(before); !errors.As(err, &ae) || ae.Stage != string(stage.Stopping) {
		t.Errorf("a shutdown before the proposal: %#v", err)
	}
}

// A cluster node's API server, once stopping, still answers what arrives
// until no request came for its quiet spell — each answer closing its
// connection — before it closes: closing at once races a client's next
// request on an idle connection, which then has no answer (an unknown
// outcome to a client although nothing was read).
func TestAPIStopAnswersUntilQuiet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &apiServer{errc: make(chan error, 1), errLog: lograte.New(testLogger(t), lograte.Config{}), drain: true,
		quietFor: 2 * time.Second, drainMax: time.Minute}
	s.serve(ln, &http.Server{Handler: s.track(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // a stopping node's refusal
	}))})
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	url := "http://" + ln.Addr().String() + "/v1/tickets/x/grant"
	get := func() (*http.Response, error) {
		resp, err := hc.Post(url, "application/json", strings.NewReader("{}"))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := get(); err != nil || resp.Close { // an idle keep-alive connection now
		t.Fatalf("before the stop: %v (close %v)", err, resp != nil && resp.Close)
	}
	stopped := make(chan struct{})
	go func() { s.stop(); close(stopped) }()
	waitFor(t, "the stop beginning", 10*time.Second, s.stopping.Load)
	resp, err := get()
	if err != nil {
		t.Fatalf("a request once the stop began: %v; want an answer", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("a request once the stop began: %d, close %v; want the refusal closing its connection", resp.StatusCode, resp.Close)
	}
	<-stopped
}
