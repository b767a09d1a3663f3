package api

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
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
		{Name: "deploy", Holder: "alice", Token: 43, LeaseS: 60, ValidBeforeMs: exp - 500, ExpiryMs: exp},
	}, false, nil
}

func (*ticketsBackend) Status(context.Context) wire.Status {
	return wire.Status{NodeID: "node-1", Mode: "single-node", Role: "leader", Ready: true, DeltaMs: 500, TicketsActive: 2}
}

// SPEC §4 (Revoke: "Get shows revoked"), in a real browser: headless
// Chromium renders /ui/ from a server whose tickets include a revoked one;
// the ticket table marks that row revoked and only that one, under the
// page's CSP (nothing else may run).
func TestStatusPageShowsRevokedInChromium(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no chromium on PATH (Debian package chromium); CI installs it")
	}
	const adminTok = "admin-token-0123456789abcdef012345"
	srv := httptest.NewServer(NewHandler(Options{Backend: &ticketsBackend{}, AdminToken: []byte(adminTok)}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", srv.URL+"/ui/#token="+adminTok).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	row := func(name string) string {
		m := regexp.MustCompile(`<tr data-ticket="` + name + `">(.*?)</tr>`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no row for %s in the rendered page:\n%s", name, dom)
		}
		return m[1]
	}
	if r := row("build-lock"); !strings.Contains(r, `<td>ci-7</td><td>42</td><td>30 s</td>`) || !strings.HasSuffix(r, `<td class="bad">revoked</td>`) {
		t.Errorf("the revoked ticket's row: %s", r)
	}
	if r := row("deploy"); !strings.HasSuffix(r, `<td class="muted">-</td>`) || strings.Contains(r, "revoked") {
		t.Errorf("the held ticket's row: %s", r)
	}
	if strings.Contains(dom, adminTok) {
		t.Error("the admin token is in the rendered page")
	}
}
