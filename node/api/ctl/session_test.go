package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"

	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/api/client"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const adminTok = "admin-token-for-tests-0123456789abcdef"

// startNode runs a real node in-process on a loopback port.
func startNode(t *testing.T) (addr, adminFile string) {
	t.Helper()
	dir := t.TempDir()
	adminFile = filepath.Join(dir, "admin.token")
	if err := os.WriteFile(adminFile, []byte(adminTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Cluster.Raft.DataDir = filepath.Join(dir, "data")
	cfg.API.AdminTokenFile = adminFile
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.RunWith(ctx, cfg, node.Deps{Listener: ln}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
	addr = "http://" + ln.Addr().String()
	c, _ := client.New(addr)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Ready(context.Background()); err == nil {
			return addr, adminFile
		}
		if time.Now().After(deadline) {
			t.Fatal("node not ready")
		}
		time.Sleep(5 * time.Millisecond) // readiness poll with a deadline
	}
}

type result struct {
	code        int
	out, stderr string
}

// testEnv is a process for Main: buffers, the given environment, the
// real clock and a plain file reader for token files.
func testEnv(env map[string]string, out, errb *bytes.Buffer) Env {
	return Env{Stdout: out, Stderr: errb, Now: time.Now, Version: "ticketctl test",
		Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		ReadSecret: func(p string) ([]byte, error) {
			b, err := os.ReadFile(p)
			return bytes.TrimSuffix(b, []byte("\n")), err
		},
	}
}

func runCtl(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, testEnv(env, &out, &errb))
	return result{code, out.String(), errb.String()}
}

// SPEC §8: the command lines, with readable output and --json.
func TestSession(t *testing.T) {
	addr, adminFile := startNode(t)
	env := map[string]string{"TICKETCTL_ADDR": addr}

	r := runCtl(t, env, "grant", "build-lock", "--holder", "alice", "--lease", "30", "--json")
	if r.code != 0 {
		t.Fatalf("grant: %+v", r)
	}
	var g wire.Grant
	if err := json.Unmarshal([]byte(r.out), &g); err != nil || g.Holder != "alice" || g.LeaseS != 30 || g.Token == 0 {
		t.Fatalf("grant --json: %q %v", r.out, err)
	}
	tok := func(n uint64) string { return strings.TrimSpace(string(must(json.Marshal(n)))) }

	r = runCtl(t, env, "--addr", addr, "grant", "build-lock", "--holder", "bob", "--lease", "30")
	if r.code != 1 || !strings.Contains(r.stderr, `held by "alice" with token `+tok(g.Token)) {
		t.Fatalf("grant by bob: %+v", r)
	}
	r = runCtl(t, env, "grant", "build-lock", "--holder", "bob", "--lease", "30", "--json")
	if r.code != 1 || !strings.Contains(r.out, `"error": "held"`) {
		t.Fatalf("grant by bob --json: %+v", r)
	}
	// SPEC §8 spelling: renew NAME --token N --lease 30, the holder from the environment.
	env["TICKETCTL_HOLDER"] = "alice"
	r = runCtl(t, env, "renew", "build-lock", "--token", tok(g.Token), "--lease", "60")
	if r.code != 0 || !strings.Contains(r.out, "lease           60s") || !strings.Contains(r.out, "local deadline") {
		t.Fatalf("renew: %+v", r)
	}
	r = runCtl(t, env, "get", "build-lock")
	if r.code != 0 || !strings.Contains(r.out, "NAME") || !strings.Contains(r.out, "build-lock  alice") {
		t.Fatalf("get: %+v", r)
	}
	runCtl(t, env, "grant", "other", "--holder", "carol", "--lease", "5")
	r = runCtl(t, env, "list", "--prefix", "bui", "--json")
	var l wire.TicketList
	if r.code != 0 || json.Unmarshal([]byte(r.out), &l) != nil || len(l.Tickets) != 1 || l.Tickets[0].Name != "build-lock" {
		t.Fatalf("list --prefix: %+v", r)
	}
	r = runCtl(t, env, "list")
	if r.code != 0 || strings.Count(r.out, "\n") != 3 {
		t.Fatalf("list: %+v", r)
	}
	r = runCtl(t, env, "release", "build-lock", "--token", tok(g.Token+1))
	if r.code != 1 || !strings.Contains(r.stderr, "wrong_token (409)") {
		t.Fatalf("release with a wrong token: %+v", r)
	}
	r = runCtl(t, env, "release", "build-lock", "--token", tok(g.Token))
	if r.code != 0 || !strings.Contains(r.out, "released build-lock") {
		t.Fatalf("release: %+v", r)
	}
	r = runCtl(t, env, "get", "build-lock")
	if r.code != 1 || !strings.Contains(r.stderr, "not_found (404)") {
		t.Fatalf("get after release: %+v", r)
	}
	r = runCtl(t, env, "status")
	if r.code != 0 || !strings.Contains(r.out, "role     leader") || !strings.Contains(r.out, "Δ        500 ms") {
		t.Fatalf("status: %+v", r)
	}
	r = runCtl(t, env, "status", "--json")
	var st wire.Status
	if r.code != 0 || json.Unmarshal([]byte(r.out), &st) != nil || !st.Ready || st.TicketsActive != 1 {
		t.Fatalf("status --json: %+v", r)
	}
	r = runCtl(t, env, "cluster", "--admin-token-file", adminFile)
	if r.code != 0 || !strings.Contains(r.out, "node-1") || !strings.Contains(r.out, "voter") {
		t.Fatalf("cluster: %+v", r)
	}
}

// SPEC §4: holders may hold spaces; tables quote such a holder so the
// column stays unambiguous, --json carries it verbatim, and renew/release
// by that holder work.
func TestHolderWithSpaces(t *testing.T) {
	addr, _ := startNode(t)
	env := map[string]string{"TICKETCTL_ADDR": addr}
	r := runCtl(t, env, "grant", "spaced", "--holder", "alice smith ", "--lease", "30")
	if r.code != 0 || !strings.Contains(r.out, `holder          "alice smith "`) {
		t.Fatalf("grant: %+v", r)
	}
	r = runCtl(t, env, "list")
	if r.code != 0 || !strings.Contains(r.out, `spaced  "alice smith "`) {
		t.Fatalf("list: %+v", r)
	}
	r = runCtl(t, env, "get", "spaced", "--json")
	var got wire.Ticket
	if r.code != 0 || json.Unmarshal([]byte(r.out), &got) != nil || got.Holder != "alice smith " {
		t.Fatalf("get --json: %+v", r)
	}
	env["TICKETCTL_HOLDER"] = "alice smith "
	r = runCtl(t, env, "release", "spaced", "--token", strconv.FormatUint(got.Token, 10))
	if r.code != 0 || !strings.Contains(r.out, `released spaced (holder "alice smith ", token`) {
		t.Fatalf("release: %+v", r)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// SPEC §4 (Revoke): ticketctl revoke NAME [--token N] needs the admin
// token; it revokes the grant held now (or the one named), says what that
// means, and get and list mark the ticket revoked.
func TestRevokeCommand(t *testing.T) {
	addr, adminFile := startNode(t)
	env := map[string]string{"TICKETCTL_ADDR": addr}
	r := runCtl(t, env, "grant", "job", "--holder", "alice", "--lease", "30", "--json")
	var g wire.Grant
	if r.code != 0 || json.Unmarshal([]byte(r.out), &g) != nil {
		t.Fatalf("grant: %+v", r)
	}
	if r = runCtl(t, env, "revoke", "job"); r.code != 2 || !strings.Contains(r.stderr, "--admin-token-file") {
		t.Fatalf("revoke without the admin token: %+v", r)
	}
	if r = runCtl(t, env, "revoke", "--admin-token-file", adminFile); r.code != 2 {
		t.Fatalf("revoke without a name: %+v", r)
	}
	if r = runCtl(t, env, "revoke", "job", "--holder", "x", "--admin-token-file", adminFile); r.code != 2 {
		t.Fatalf("revoke --holder: %+v", r)
	}
	other := strconv.FormatUint(g.Token+1, 10)
	if r = runCtl(t, env, "revoke", "job", "--token", other, "--admin-token-file", adminFile); r.code != 1 || !strings.Contains(r.stderr, "wrong_token") {
		t.Fatalf("revoke of another token: %+v", r)
	}
	if r = runCtl(t, env, "revoke", "free", "--admin-token-file", adminFile); r.code != 1 || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("revoke of a free ticket: %+v", r)
	}
	r = runCtl(t, env, "revoke", "job", "--admin-token-file", adminFile)
	if r.code != 0 || !strings.Contains(r.out, "revoked job (holder alice, token "+strconv.FormatUint(g.Token, 10)+"): it can no longer be renewed") {
		t.Fatalf("revoke: %+v", r)
	}
	r = runCtl(t, env, "revoke", "job", "--token", strconv.FormatUint(g.Token, 10), "--admin-token-file", adminFile, "--json")
	var tk wire.Ticket
	if r.code != 0 || json.Unmarshal([]byte(r.out), &tk) != nil || !tk.Revoked {
		t.Fatalf("revoke again --json: %+v", r)
	}
	if r = runCtl(t, env, "get", "job"); r.code != 0 || !strings.Contains(r.out, " (revoked)") {
		t.Fatalf("get after revoke: %+v", r)
	}
	env["TICKETCTL_HOLDER"] = "alice"
	if r = runCtl(t, env, "renew", "job", "--token", strconv.FormatUint(g.Token, 10), "--lease", "30"); r.code != 1 || !strings.Contains(r.stderr, "revoked") {
		t.Fatalf("renew after revoke: %+v", r)
	}
}
