package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/backup"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// saveBackup takes a backup through the API of tn (admin client c) into
// a file and returns its path and what the client saw.
func saveBackup(t *testing.T, c *client.Client, dir string) (string, *client.Saved) {
	t.Helper()
	var b bytes.Buffer
	saved, err := c.Backup(bg, &b)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	path := filepath.Join(dir, "backup.snap")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, saved
}

// SPEC §3.4, backup and restore: a backup taken through GET
// /v1/cluster/backup holds every acknowledged ticket; the old node goes on
// granting after it; `ticketd restore` builds a one-voter cluster under a
// new NodeId that serves every ticket of the backup with its holder, token,
// absolute expiry and revoked flag, refuses Grant until 250 s + Δ after the
// restore, and then issues tokens in the next epoch — above every token the
// old node issued, also after the backup.
func TestRestoreFromBackup(t *testing.T) {
	dir := t.TempDir()
	clk := newManualClock()
	ocfg := testConfig(t, filepath.Join(dir, "old"))
	ocfg.API.AdminTokenFile = writeFile(t, dir, "admin.token", "backup-admin-token-0123456789-abcdef", 0o600)
	old := startNode(t, ocfg, Deps{Wall: clk, Env: noEnv}, client.WithAdminToken("backup-admin-token-0123456789-abcdef"))
	for _, name := range []string{"a", "b", "c"} {
		if _, err := old.c.Grant(bg, name, "h-"+name, 250); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.c.Revoke(bg, "b", mustToken(t, old, "b")); err != nil {
		t.Fatal(err)
	}
	inBackup := listAll(t, old)
	path, saved := saveBackup(t, old.c, dir)
	if saved.Tickets != 3 || saved.NodeID != "node-1" || saved.Epoch != 0 || saved.HighestToken != mustToken(t, old, "c") {
		t.Fatalf("saved %+v", saved)
	}
	// The old node goes on after the backup: more Raft indexes than the
	// restored node will use before its first grant, so only the new
	// epoch puts that grant's token above these.
	var after *client.Lease
	for i := range 10 {
		l, err := old.c.Grant(bg, fmt.Sprintf("later-%d", i), "h", 30)
		if err != nil {
			t.Fatal(err)
		}
		after = l
	}
	if err := old.stop(); err != nil {
		t.Fatal(err)
	}

	to := filepath.Join(dir, "new")
	res, err := Restore(RestoreOptions{From: path, To: to, NodeID: "node-2", DeltaMs: 500, Now: clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tickets != 3 || res.Epoch != 1 || res.TokenFloor != ticket.TokenFor(1, saved.Index) || res.OldCeiling >= res.TokenFloor {
		t.Fatalf("restore %+v", res)
	}
	if !res.HoldOffUntil.Equal(clk.Now().Add(250*time.Second + 500*time.Millisecond)) {
		t.Fatalf("hold-off until %v, want restore + 250 s + Δ", res.HoldOffUntil)
	}
	cfg := testConfig(t, to)
	cfg.Cluster.Name = "node-2"
	rn := startHeldOff(t, cfg, clk, "backup "+path, inBackup)
	if !inBackup["b"].Revoked {
		t.Fatal("the revoked ticket was not in the backup")
	}
	clk.Advance(251 * time.Second)
	g, err := rn.c.Grant(bg, "e", "h", 30)
	if err != nil {
		t.Fatalf("grant after the hold-off: %v", err)
	}
	if g.Token <= after.Token || g.Token <= res.TokenFloor || ticket.TokenEpoch(g.Token) != 1 {
		t.Fatalf("first new token %d (epoch %d): want above %d (granted by the old node after the backup) and in epoch 1",
			g.Token, ticket.TokenEpoch(g.Token), after.Token)
	}
	t.Logf("old tokens up to %d (%d after the backup); first restored token %d = 1<<48 | %d", saved.HighestToken, after.Token, g.Token, ticket.TokenIndex(g.Token))
}

// startHeldOff starts the node of a data dir written by recover or
// restore (cfg) and checks what SPEC §3.4 says of it until its hold-off
// passes: stage hold_off, the hold-off of 250 s + Δ naming cause, every
// ticket of want with holder, token, expiries and revoked flag as they
// were, and Grant refused.
func startHeldOff(t *testing.T, cfg Config, clk *clockhealthtest.Clock, cause string, want map[string]wire.Ticket) *testNode {
	t.Helper()
	rn, err := tryStart(t, cfg, Deps{Wall: clk, Env: noEnv}, false)
	if err != nil {
		t.Fatal(err)
	}
	var cerr *client.Error
	waitFor(t, "stage hold_off", 10*time.Second, func() bool {
		_, err := rn.c.Ready(bg)
		return errors.As(err, &cerr) && cerr.Stage == string(stage.HoldOff)
	})
	st, err := rn.c.Status(bg)
	if err != nil || !strings.Contains(st.HoldOffCause, cause) || st.HoldOffUntilUnixMs < uint64(clk.Now().Add(250*time.Second).UnixMilli()) {
		t.Fatalf("status %+v %v: want a hold-off of 250 s + Δ naming %q", st, err, cause)
	}
	got := listAll(t, rn)
	if len(got) != len(want) {
		t.Fatalf("tickets %v, before %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Fatalf("ticket %s: %+v now, %+v before (holder, token, expiry and revoked must be identical)", name, got[name], w)
		}
	}
	if _, err := rn.c.Grant(bg, "held-off", "h", 30); !errors.As(err, &cerr) || cerr.Reason != "hold_off" {
		t.Fatalf("grant during the hold-off: %v", err)
	}
	return rn
}

// SPEC §3.4: restore refuses, naming what, and writes nothing: a data
// dir that holds anything, a NodeId of the old cluster, another Δ, an
// epoch not above the backup's or past the last, a damaged backup. A
// second restore of one backup into a higher epoch is allowed.
func TestRestoreRefusals(t *testing.T) {
	dir := t.TempDir()
	f := ticket.New(500)
	b, _ := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	f.Apply(1, b)
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Raft = &ticket.Position{Index: 3, Term: 2, TakenMs: 1, ConfigurationIndex: 1, Servers: []ticket.Server{{ID: "node-1", Address: "node-1"}}}
	s.Retired = []string{"node-0"}
	var file bytes.Buffer
	if _, err := backup.Encode(&file, "node-1", s); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.snap")
	cut := filepath.Join(dir, "cut.snap")
	if err := os.WriteFile(good, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, file.Bytes()[:file.Len()-1], 0o600); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full")
	if err := os.Mkdir(full, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, full, "keep", "x", 0o600)
	fresh := filepath.Join(dir, "fresh")
	for _, c := range []struct {
		o     RestoreOptions
		field string // a config.Error's key, or text of the error
	}{
		{RestoreOptions{From: good, To: full, NodeID: "node-2"}, "--data-dir"},
		{RestoreOptions{From: good, To: fresh, NodeID: "node-1"}, "--node-id"},
		{RestoreOptions{From: good, To: fresh, NodeID: "node-0"}, "--node-id"},
		{RestoreOptions{From: good, To: fresh, NodeID: "bad id"}, "--node-id"},
		{RestoreOptions{From: good, To: fresh, NodeID: "node-2", DeltaMs: 400}, "--delta-ms"},
		{RestoreOptions{From: good, To: fresh, NodeID: "node-2", DeltaMs: 1}, "--delta-ms"},
		{RestoreOptions{From: good, To: fresh, NodeID: "node-2", Epoch: ticket.MaxTokenEpoch + 1}, "--epoch"},
		{RestoreOptions{From: cut, To: fresh, NodeID: "node-2"}, cut + ": truncated backup"},
		{RestoreOptions{From: filepath.Join(dir, "none.snap"), To: fresh, NodeID: "node-2"}, "none.snap"},
	} {
		_, err := Restore(c.o)
		var ce *config.Error
		ok := errors.As(err, &ce) && ce.Path == c.field || err != nil && strings.Contains(err.Error(), c.field)
		if !ok {
			t.Errorf("restore %+v: %v, want a refusal naming %s", c.o, err, c.field)
		}
		if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("restore %+v refused but wrote %s", c.o, fresh)
		}
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Fatalf("the full dir was changed: %v", ents)
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "cut.snap full good.snap" {
		t.Fatalf("after the refusals %s holds %v: a refused restore left something", dir, names)
	}
	res, err := Restore(RestoreOptions{From: good, To: fresh, NodeID: "node-2", Epoch: 5})
	if err != nil || res.Epoch != 5 || res.TokenFloor != ticket.TokenFor(5, 3) {
		t.Fatalf("restore into epoch 5: %+v %v", res, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(RestoreOptions{From: good, To: empty, NodeID: "node-3", Epoch: 0}); err != nil {
		t.Fatalf("a second restore of the backup, into an empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, "recovered")); err != nil {
		t.Fatalf("the empty dir did not become the data dir: %v", err)
	}
	names = names[:0]
	ents, _ = os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "cut.snap empty fresh full good.snap" {
		t.Fatalf("after the restores %s holds %v: want no build directory left", dir, names)
	}
	var ce *config.Error
	s.Epoch = 7
	file.Reset()
	if _, err := backup.Encode(&file, "node-1", s); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(RestoreOptions{From: good, To: filepath.Join(dir, "x"), NodeID: "node-2", Epoch: 7}); !errors.As(err, &ce) || ce.Path != "--epoch" {
		t.Fatalf("restore into the backup's own epoch: %v", err)
	}
}
