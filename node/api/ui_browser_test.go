package api

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

// ticketsBackend lists two tickets, one of them revoked.
type ticketsBackend struct{ fakeBackend }

func (*ticketsBackend) List(context.Context, string, int) ([]ticket.Ticket, bool, error) {
	exp := uint64(time.Now().Add(time.Minute).UnixMilli())
	return []ticket.Ticket{
		{Name: "build-lock", Holder: "ci-7", Token: 42, LeaseS: 30, ValidBeforeMs: exp - 500, ExpiryMs: exp, Revoked: true},
		{Name: "deploy", Holder: "alice", Token: 43, LeaseS: 60, ValidBeforeMs: exp - 500, ExpiryMs: exp, Waiters: 3},
	}, false, nil
}

func (*ticketsBackend) Status(context.Context) wire.Status {
	return wire.Status{NodeID: "node-1", Mode: "single-node", Role: "leader", Ready: true, DeltaMs: 500, TicketsActive: 2}
}

// chromium is headless Chromium on PATH, or a skip.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (Debian package chromium); CI installs it")
	return ""
}

// renderPage loads /ui/+query from srv in headless Chromium with the
// token in the fragment and returns the DOM after 5 s of virtual time.
func renderPage(t *testing.T, browser, url, query, token string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", url+"/ui/"+query+"#token="+token).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

// SPEC §4 (Revoke: "Get shows revoked"), in a real browser: headless
// Chromium renders /ui/ from a server whose tickets include a revoked one;
// the ticket table marks that row revoked and only that one, under the
// page's CSP (nothing else may run); the filter (?q=) keeps the tickets
// whose name or holder matches; each row shows its waiters.
func TestStatusPageShowsRevokedInChromium(t *testing.T) {
	browser := chromium(t)
	const adminTok = "admin-token-0123456789abcdef012345"
	srv := httptest.NewServer(NewHandler(Options{Backend: &ticketsBackend{}, AdminToken: []byte(adminTok)}))
	defer srv.Close()
	render := func(query string) string { return renderPage(t, browser, srv.URL, query, adminTok) }
	dom := render("")
	row := func(dom, name string) string {
		m := regexp.MustCompile(`<tr data-ticket="` + name + `">(.*?)</tr>`).FindStringSubmatch(dom)
		if m == nil {
			return ""
		}
		return m[1]
	}
	if r := row(dom, "build-lock"); !regexp.MustCompile(`^<td>build-lock</td><td>ci-7</td><td class="num">42</td><td class="num[^"]*" title="[^"]+">\d+ s</td><td class="num">30 s</td><td><span class="pill bad">revoked</span></td>`).MatchString(r) {
		t.Errorf("the revoked ticket's row: %q\n%s", r, dom)
	}
	if r := row(dom, "deploy"); !strings.Contains(r, `<td class="num">60 s</td><td class="muted">-</td><td class="num leader" title="blocking grants queued for it on the leader">3</td>`) || strings.Contains(r, "revoked") {
		t.Errorf("the held ticket's row: %q", r)
	}
	if strings.Contains(dom, adminTok) {
		t.Error("the admin token is in the rendered page")
	}
	// The filter (seeded by ?q=) keeps the tickets whose name or holder
	// contains it.
	dom = render("?q=alice")
	if row(dom, "deploy") == "" || row(dom, "build-lock") != "" || !strings.Contains(dom, `<span id="ticketcount" class="count">(1 of 2)</span>`) {
		t.Errorf("filtered by holder alice:\n%s", dom)
	}
}

// clusterBackend is a cluster node's answers as the page reads them:
// its status, the cluster health (or the error it answers) and the
// member table.
type clusterBackend struct {
	fakeBackend
	status    wire.Status
	mu        sync.Mutex // health and healthErr: the test changes them while the page may still poll
	health    wire.ClusterHealth
	healthErr error
	members   []wire.Member
	retired   []string
}

func (b *clusterBackend) Status(context.Context) wire.Status { return b.status }
func (b *clusterBackend) Members(context.Context) (wire.Members, error) {
	return wire.Members{Members: b.members, RetiredNodeIDs: b.retired}, nil
}
func (b *clusterBackend) ClusterHealth(context.Context) (wire.ClusterHealth, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.health, b.healthErr
}

func ptr[T any](v T) *T { return &v }

// The member table and banner from crafted answers (SPEC §3.5): a member
// dead in gossip, or not answering, is shown so and never healthy, with
// its clock unknown; a retired member and one removed from the Raft
// configuration are marked so, not as clients, and a gossip-only client
// is a client; the generation comes from the NodeId (NAME~G, 1 without);
// without a leader the banner is red and points at the runbook. When the
// cluster health cannot be read, no server is shown healthy (a client's
// clock is still what gossip says).
func TestStatusPageMemberStatesInChromium(t *testing.T) {
	browser := chromium(t)
	const adminTok = "admin-token-0123456789abcdef012345"
	idx := func(v uint64) *uint64 { return ptr(v) }
	b := &clusterBackend{
		status: wire.Status{NodeID: "node-1", Mode: "cluster", Role: "follower", Leader: "node-2", Stage: "ready", Ready: true, DeltaMs: 500,
			Raft:  wire.RaftStatus{Term: 7, CommitIndex: 90, AppliedIndex: 90},
			Clock: wire.ClockStatus{Healthy: true, BoundMs: 4, BoundLimitMs: 250}},
		health: wire.ClusterHealth{Healthy: false, FailureTolerance: 0, MaxFailureTolerance: 1, Voters: 3, HealthyVoters: 2, Leader: "node-2", ServedBy: "node-1",
			Servers: []wire.ServerHealth{
				{ID: "node-1", Suffrage: "voter", Gossip: "alive", Clock: "healthy", ClockBoundMs: 4, ClockBoundHistoryMs: []uint32{3, 4, 5, 9, 4}, LastContactMs: ptr(int64(12)), Term: idx(7), LastIndex: idx(90), LogLag: idx(0), Healthy: true},
				{ID: "node-2~3", Suffrage: "voter", Leader: true, Gossip: "alive", Clock: "healthy", ClockBoundMs: 5, LastContactMs: ptr(int64(0)), LastIndex: idx(90), LogLag: idx(0), Healthy: true},
				{ID: "node-3", Suffrage: "voter", Gossip: "dead", Clock: "healthy", ClockBoundMs: 6, Why: "gossip dead"},
				{ID: "node-4", Suffrage: "nonvoter", Gossip: "alive", Clock: "healthy", ClockBoundMs: 3, Why: "no answer over the mesh (i/o timeout)"},
				{ID: "node-5", Suffrage: "", Gossip: "alive", Clock: "failed", Retired: true, Why: "retired"},
				{ID: "node-7", Suffrage: "voter", Term: idx(6), LastContactMs: ptr(int64(3)), Why: "retired"}, // out of gossip: its next generation took its name
			}},
		members: []wire.Member{
			{ID: "node-1", Suffrage: "voter", Gossip: "alive", Role: "voter", Clock: "healthy", ClockBoundMs: 4, BoundLimitMs: 250, FailureDomain: "rack-a"},
			{ID: "node-2~3", Suffrage: "voter", Leader: true, Gossip: "alive", Role: "voter", Clock: "healthy", ClockBoundMs: 5, BoundLimitMs: 250, FailureDomain: "rack-b"},
			{ID: "node-3", Suffrage: "voter", Gossip: "dead", Role: "voter", Clock: "healthy", ClockBoundMs: 6, BoundLimitMs: 250},
			{ID: "node-4", Suffrage: "nonvoter", Gossip: "alive", Role: "standby", Clock: "healthy", ClockBoundMs: 3, BoundLimitMs: 250},
			{ID: "node-5", Gossip: "alive", Role: "voter", Clock: "failed", Retired: true, BoundLimitMs: 250},
			{ID: "node-6", Gossip: "alive", Role: "voter", Clock: "healthy", BoundLimitMs: 250},
			{ID: "worker-1", Gossip: "alive", Role: "client", Clock: "healthy", BoundLimitMs: 250},
		},
		retired: []string{"node-0", "node-5", "node-7"},
	}
	srv := httptest.NewServer(NewHandler(Options{Backend: b, AdminToken: []byte(adminTok)}))
	defer srv.Close()
	rowRe := regexp.MustCompile(`<tr data-node="([^"]+)" data-status="([^"]+)">(.*?)</tr>`)
	rows := func(dom string) map[string][2]string {
		out := map[string][2]string{}
		for _, m := range rowRe.FindAllStringSubmatch(dom, -1) {
			out[m[1]] = [2]string{m[2], m[3]}
		}
		return out
	}
	dom := renderPage(t, browser, srv.URL, "", adminTok)
	got := rows(dom)
	want := map[string]string{"node-1": "healthy", "node-2~3": "leader", "node-3": "dead", "node-4": "no answer", "node-5": "retired", "node-6": "not in Raft", "worker-1": "client", "node-7": "retired"}
	for id, status := range want {
		if got[id][0] != status {
			t.Errorf("%s: status %q, want %q (row %s)", id, got[id][0], status, got[id][1])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d member rows, want %d: %v", len(got), len(want), got)
	}
	if !strings.Contains(got["node-1"][1], `<td>alive</td><td class="num">7</td><td class="num">90</td><td class="num">0</td><td class="num">12 ms ago</td>`) {
		t.Errorf("node-1: term 7, index 90, lag 0, contact 12 ms not shown: %s", got["node-1"][1])
	}
	if !strings.Contains(dom, `<div id="retired" style="display: block;">Retired NodeIds (refused if they come back): node-0, node-5, node-7</div>`) {
		t.Errorf("the retired NodeIds are not listed:\n%s", dom)
	}
	// node-1's chart is the node's record (5 samples every 5 s), not the
	// page's own few polls.
	if !strings.Contains(got["node-1"][1], `<title>5 samples every 5 s: min 3 ms, max 9 ms, Δ/2 250 ms (off the scale)</title>`) {
		t.Errorf("node-1's chart is not the recorded history: %s", got["node-1"][1])
	}
	// Out of gossip: no clock and no bound (not a made-up 0).
	if r := got["node-7"][1]; !strings.Contains(r, `<td class="muted">-</td><td class="num">-</td>`) {
		t.Errorf("node-7 (out of gossip) shows a clock or a bound: %s", r)
	}
	for id, gen := range map[string]string{"node-1": "1", "node-2~3": "3"} {
		if !strings.Contains(got[id][1], `</td><td class="num">`+gen+`</td>`) {
			t.Errorf("%s: generation not %s: %s", id, gen, got[id][1])
		}
	}
	for _, id := range []string{"node-3", "node-4"} {
		if r := got[id][1]; strings.Contains(r, `"pill ok"`) || !strings.Contains(r, `<span class="pill">unknown</span><span class="why">last said healthy</span>`) {
			t.Errorf("%s (gone or silent) shows something healthy, or its clock as current: %s", id, r)
		}
	}
	if !regexp.MustCompile(`<header id="banner" data-state="degraded"><div id="banner-title">Degraded: 1 voter not healthy</div><div id="banner-detail">[^<]*node-3: gossip dead`).MatchString(dom) {
		t.Errorf("banner:\n%s", dom)
	}

	// No leader: red, with the runbook.
	b.mu.Lock()
	b.health.Leader, b.health.HealthyVoters = "", 1
	b.mu.Unlock()
	dom = renderPage(t, browser, srv.URL, "", adminTok)
	if !regexp.MustCompile(`<header id="banner" data-state="down"><div id="banner-title">No leader: nothing can be granted</div><div id="banner-detail">3 voters, 1 healthy; no quorum \(2 needed\)[^<]*</div><div id="banner-runbook" style="display: block;">Runbook: docs/operations.md, section “No leader or no quorum”</div>`).MatchString(dom) {
		t.Errorf("banner without a leader:\n%s", dom)
	}

	// The health cannot be read: nobody is shown healthy.
	b.mu.Lock()
	b.healthErr = Unavailable("raft", "starting", "this node has not joined the cluster yet")
	b.mu.Unlock()
	dom = renderPage(t, browser, srv.URL, "", adminTok)
	got = rows(dom)
	for id, r := range got {
		if r[0] == "healthy" || r[0] == "leader" || (r[0] != "client" && strings.Contains(r[1], `"pill ok"`)) {
			t.Errorf("%s shows healthy without the cluster health: %v", id, r)
		}
	}
	if got["node-1"][0] != "unknown" || got["node-5"][0] != "retired" || got["worker-1"][0] != "client" {
		t.Errorf("without health: %v", got)
	}
	if !strings.Contains(dom, `<header id="banner" data-state="unknown"><div id="banner-title">Cluster health unknown</div>`) {
		t.Errorf("banner without health:\n%s", dom)
	}
}
