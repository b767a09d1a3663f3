package ctl

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// healthAnswers serves GET /v1/cluster/health: the n-th request gets
// answer(n). It checks that no admin token is sent (the client token is).
func healthAnswers(t *testing.T, answer func(n int) wire.ClusterHealth) (string, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/cluster/health" {
			t.Errorf("%s %s, want GET /v1/cluster/health", r.Method, r.URL.Path)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer client-tok" {
			t.Errorf("Authorization %q, want the client token", got)
		}
		h := answer(int(calls.Add(1)))
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &calls
}

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

// three is a three-voter cluster's health with the named voters unhealthy.
func three(down ...string) wire.ClusterHealth {
	h := wire.ClusterHealth{Leader: "n1", ServedBy: "n1", LeaderView: true, Voters: 3, MaxFailureTolerance: 1}
	for _, id := range []string{"n1", "n2", "n3"} {
		s := wire.ServerHealth{ID: id, Suffrage: "voter", Leader: id == "n1", Gossip: "alive", Clock: "healthy", ClockBoundMs: 4,
			LastContactMs: i64(12), LastIndex: u64(42), LogLag: u64(0), Healthy: true, Version: "v1"}
		for _, d := range down {
			if d == id {
				s.Gossip, s.Healthy, s.Why, s.LastContactMs, s.LastIndex, s.LogLag = "suspect", false, "gossip suspect", nil, nil, nil
			}
		}
		h.Servers = append(h.Servers, s)
		if s.Healthy {
			h.HealthyVoters++
		}
	}
	h.Healthy = h.HealthyVoters == h.Voters
	h.FailureTolerance = max(h.HealthyVoters-2, 0)
	return h
}

func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "client.token")
	if err := os.WriteFile(p, []byte("client-tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// SPEC §3.5: cluster health exits 0 only when the cluster is healthy and
// tolerates the most failures its voter count allows, printing a table
// (or --json); otherwise 1, saying what is not healthy. It needs the
// client token, not the admin one.
func TestClusterHealthExitStatus(t *testing.T) {
	tok := tokenFile(t)
	addr, _ := healthAnswers(t, func(int) wire.ClusterHealth { return three() })
	r := runCtl(t, nil, "--addr", addr, "--token-file", tok, "cluster", "health")
	if r.code != 0 || !strings.Contains(r.out, "healthy: failure tolerance 1 of 1, 3 of 3 voters healthy, leader n1 (answered by n1, the leader's view)") ||
		!strings.Contains(r.out, "n2  voter") || !strings.Contains(r.out, "12ms") {
		t.Fatalf("healthy: %+v", r)
	}
	r = runCtl(t, nil, "--addr", addr, "--token-file", tok, "cluster", "health", "--json")
	var h wire.ClusterHealth
	if r.code != 0 || json.Unmarshal([]byte(r.out), &h) != nil || !h.Healthy || h.FailureTolerance != 1 || len(h.Servers) != 3 {
		t.Fatalf("healthy --json: %+v", r)
	}
	// At least --voters voters.
	if r = runCtl(t, nil, "--addr", addr, "--token-file", tok, "cluster", "health", "--voters", "5"); r.code != 1 || !strings.Contains(r.stderr, "3 voters, --voters 5") {
		t.Fatalf("--voters 5 of 3: %+v", r)
	}

	down, _ := healthAnswers(t, func(int) wire.ClusterHealth { return three("n3") })
	r = runCtl(t, nil, "--addr", down, "--token-file", tok, "cluster", "health")
	if r.code != 1 || !strings.Contains(r.out, "UNHEALTHY: failure tolerance 0 of 1") || !strings.Contains(r.out, "NO: gossip suspect") ||
		!strings.Contains(r.stderr, "not healthy: n3: gossip suspect; failure tolerance 0 of 1") {
		t.Fatalf("one voter down: %+v", r)
	}

	// Healthy, but tolerating less than the voter count allows: 5 voters,
	// one of them a healthy voter short of the most (a standby does not
	// count).
	five := three()
	five.Voters, five.HealthyVoters, five.MaxFailureTolerance, five.FailureTolerance = 5, 4, 2, 1
	short, _ := healthAnswers(t, func(int) wire.ClusterHealth { return five })
	if r = runCtl(t, nil, "--addr", short, "--token-file", tok, "cluster", "health"); r.code != 1 || !strings.Contains(r.stderr, "failure tolerance 1 of 2") {
		t.Fatalf("tolerance 1 of 2: %+v", r)
	}
}

// cluster health --wait polls until the cluster passes (exit 0, having
// said once what it waited for) or the wait passes (exit 1, saying what
// is still not healthy).
func TestClusterHealthWait(t *testing.T) {
	tok := tokenFile(t)
	addr, calls := healthAnswers(t, func(n int) wire.ClusterHealth {
		if n < 4 {
			return three("n2")
		}
		return three()
	})
	start := time.Now()
	r := runCtl(t, nil, "--addr", addr, "--token-file", tok, "cluster", "health", "--wait", "20s")
	if r.code != 0 || calls.Load() != 4 || strings.Count(r.stderr, "waiting: n2: gossip suspect; failure tolerance 0 of 1\n") != 1 ||
		!strings.HasPrefix(r.out, "healthy: ") {
		t.Fatalf("--wait until healthy: %+v after %d calls", r, calls.Load())
	}
	if took := time.Since(start); took < 3*healthPoll {
		t.Fatalf("4 polls in %v, faster than every %v", took, healthPoll)
	}

	never, _ := healthAnswers(t, func(int) wire.ClusterHealth { return three("n3") })
	start = time.Now()
	r = runCtl(t, nil, "--addr", never, "--token-file", tok, "cluster", "health", "--wait", "1200ms")
	if took := time.Since(start); r.code != 1 || took < 1200*time.Millisecond || took > 10*time.Second ||
		!strings.Contains(r.stderr, "not healthy after --wait 1.2s: n3: gossip suspect; failure tolerance 0 of 1") || !strings.Contains(r.out, "UNHEALTHY") {
		t.Fatalf("--wait that passes: %+v after %v", r, took)
	}

	// Nothing answers: it keeps trying for --wait, then says why.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	r = runCtl(t, nil, "--addr", gone, "--token-file", tok, "cluster", "health", "--wait", "700ms")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach ticketd at "+gone) || !strings.Contains(r.stderr, "waiting: no answer") {
		t.Fatalf("nothing answers: %+v", r)
	}
}

func TestClusterHealthUsage(t *testing.T) {
	for _, args := range [][]string{
		{"cluster", "health", "extra"},
		{"cluster", "health", "--with", "n4"},
		{"cluster", "--voters", "3"},
		{"cluster", "health", "--voters", "-1"},
		{"cluster", "health", "--wait", "soon"},
	} {
		if r := runCtl(t, nil, args...); r.code != 2 {
			t.Errorf("%q: %+v, want exit 2", args, r)
		}
	}
}
