package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadRSS(t *testing.T) {
	r, err := readRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if r.RSS <= 0 || r.Anon <= 0 || r.HWM < r.RSS {
		t.Fatalf("readRSS(self) = %+v: want RSS and anon > 0, peak ≥ RSS", r)
	}
	if _, err := readRSS(-1); err == nil {
		t.Fatal("readRSS(-1): no error")
	}
}

// The restore figures come from consensus's "restored snapshot" line.
func TestRestoredLine(t *testing.T) {
	log := `time=2026-12-01T14:22:01.000Z level=INFO msg="restored snapshot" id=2-2005-1 index=2005 tickets=1999 delta_ms=12000 size_bytes=92095 took_ms=7
time=2026-12-01T14:23:01.000Z level=INFO msg="restored snapshot" id=2-4005-1 index=4005 tickets=4001 delta_ms=12000 size_bytes=184095 took_ms=12
`
	m := restoredRe.FindAllStringSubmatch(log, -1)
	if len(m) != 2 || m[1][1] != "4001" || m[1][2] != "12" {
		t.Fatalf("restoredRe matches %q, want the last line's tickets 4001 and took_ms 12", m)
	}
}

// A real, short scale section: a 3-node cluster filled through POST
// /v1/batch, snapshotted, its leader restarted and a new node caught up —
// from a snapshot, as the log keeps 10 entries only; the JSON holds every
// figure. The lease is 3 s (expiry 3 s + Δ 12 s, shorter than the
// measurements): every ticket is still active at the end only because the
// keeper renewed them all along.
func TestRunScaleSection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ticketd and starts a 3-node cluster")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl (for deploy/cluster-keys.sh) is not on PATH")
	}
	_, md, b := runReport(t, "-sections", "scale", "-scale", "400", "-scale-clients", "16", "-scale-batch", "50", "-scale-lease", "3",
		"-ticketd-flags", "--cluster.raft.trailing_logs 10")
	var rep struct {
		Items struct {
			Scale *scaleSection `json:"scale"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Items.Scale == nil || len(rep.Items.Scale.Results) != 1 || rep.Items.Scale.Clients != 16 {
		t.Fatalf("scale section %+v, want one result of 16 clients", rep.Items.Scale)
	}
	for _, r := range rep.Items.Scale.Results {
		// The fill's tickets, and the one probe grant before each snapshot.
		if r.Error != "" || r.FillErrors != 0 || r.ActiveAfter != r.Tickets || r.ActiveEnd < r.Tickets || r.RestoredTickets < r.Tickets {
			t.Errorf("%d tickets: active %d then %d, restored %d, fill errors %d, error %q", r.Tickets, r.ActiveAfter, r.ActiveEnd, r.RestoredTickets, r.FillErrors, r.Error)
		}
		if r.Renewals < int64(r.Tickets) || r.RenewFailures != 0 {
			t.Errorf("%d tickets: the keeper renewed %d, lost %d (first: %s); want each renewed, none lost", r.Tickets, r.Renewals, r.RenewFailures, r.FirstRenewError)
		}
		if r.Leader.RSS <= 0 || len(r.Followers) != 2 || r.SnapshotBytes < int64(30*r.Tickets) || r.RestartReadyMs <= 0 || r.CatchUpMs <= 0 || r.CatchUpIndex < uint64(r.Tickets) || r.CatchUpRSS.RSS <= 0 || r.CatchUpSnap == 0 {
			t.Errorf("%d tickets: figures %+v", r.Tickets, r)
		}
	}
	if !strings.Contains(md, "| 400 |") {
		t.Errorf("report lacks the 400-ticket row:\n%s", md)
	}
}

// The plot needs two counts without an error; it is a PNG.
func TestScalePlot(t *testing.T) {
	dir := t.TempDir()
	r := func(n int) scaleResult {
		return scaleResult{Tickets: n, ActiveAfter: n, Leader: rss{RSS: float64(n) / 1000, Anon: float64(n) / 2000}, CatchUpRSS: rss{RSS: 30},
			SnapshotBytes: int64(46 * n), SnapshotMs: int64(n / 1000), RestoreMs: int64(n / 2000), RestartReadyMs: 7000, CatchUpMs: 8000}
	}
	if name, err := writeScalePlot(dir, "s", []scaleResult{r(100000), {Tickets: 5, Error: "failed"}}); err != nil || name != "" {
		t.Fatalf("one good point: plot %q, %v; want none", name, err)
	}
	name, err := writeScalePlot(dir, "s", []scaleResult{r(100000), r(1000000)})
	if err != nil || name != "s-scale.png" {
		t.Fatalf("plot %q, %v", name, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("%s: %d bytes, %v; want a PNG", name, len(b), err)
	}
}
