package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
)

// SPEC §3.4, whole-cluster recovery: `ticketd recover` builds a new data
// dir from a retired one under a new NodeId. Every ticket keeps its holder,
// token and absolute expiry; Grant and Expire are refused until 250 s + Δ
// after the recovery; then a new grant's fencing token is above every token
// the old cluster issued.
// Once from each log store into the other: the old dir's store is read
// (a WAL from a private copy), never written.
func TestRecoverKeepsTicketsRaisesTokensHoldsOff(t *testing.T) {
	for _, c := range []struct{ from, to string }{{consensus.LogStoreWAL, consensus.LogStoreBolt}, {consensus.LogStoreBolt, consensus.LogStoreWAL}} {
		t.Run(c.from+" to "+c.to, func(t *testing.T) { recoverKeepsTickets(t, c.from, c.to) })
	}
}

// treeState lists every file under dir with its size and modification time.
func treeState(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %s\n", p, fi.Size(), fi.ModTime())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func recoverKeepsTickets(t *testing.T, fromStore, toStore string) {
	old := filepath.Join(t.TempDir(), "old")
	clk := newManualClock()
	ocfg := testConfig(t, old)
	ocfg.Cluster.Raft.LogStore = fromStore
	tn := startNode(t, ocfg, Deps{Wall: clk, Env: noEnv})
	for _, name := range []string{"a", "b", "c"} {
		if _, err := tn.c.Grant(bg, name, "h-"+name, 250); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tn.c.Release(bg, "b", "h-b", mustToken(t, tn, "b")); err != nil {
		t.Fatal(err)
	}
	before := listAll(t, tn)
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}

	fresh := filepath.Join(t.TempDir(), "new")
	// Refusals first: nothing is written.
	if _, err := Recover(RecoverOptions{From: old, To: fresh, NodeID: "node-2", DeltaMs: 500, Now: clk.Now()}); !errors.Is(err, ErrNotRetired) {
		t.Fatalf("recover from a healthy node's dir: %v", err)
	}
	d, err := datadir.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteRetired("clockhealth: FAILED (connect)"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	var ce *config.Error
	if _, err := Recover(RecoverOptions{From: old, To: fresh, NodeID: "node-1", DeltaMs: 500, Now: clk.Now()}); !errors.As(err, &ce) || ce.Path != "--node-id" {
		t.Fatalf("recover under the old NodeId: %v", err)
	}
	if _, err := Recover(RecoverOptions{From: old, To: fresh, NodeID: "node-2", DeltaMs: 400, Now: clk.Now()}); err == nil || !strings.Contains(err.Error(), "Δ") {
		t.Fatalf("recover with another Δ: %v", err)
	}

	if _, err := os.Stat(filepath.Join(old, map[string]string{consensus.LogStoreWAL: datadir.WALDir, consensus.LogStoreBolt: datadir.RaftDBFile}[fromStore])); err != nil {
		t.Fatalf("the old dir does not hold a %s log: %v", fromStore, err)
	}
	oldState := treeState(t, old)
	res, err := Recover(RecoverOptions{From: old, To: fresh, NodeID: "node-2", DeltaMs: 500, Now: clk.Now(), LogStore: toStore})
	if err != nil {
		t.Fatal(err)
	}
	if got := treeState(t, old); got != oldState {
		t.Fatalf("recover changed the old dir:\nbefore\n%s\nafter\n%s", oldState, got)
	}
	if res.Tickets != len(before) {
		t.Fatalf("recovered %d tickets, want %d", res.Tickets, len(before))
	}
	if _, err := Recover(RecoverOptions{From: old, To: fresh, NodeID: "node-3", DeltaMs: 500, Now: clk.Now()}); !errors.As(err, &ce) || ce.Path != "--data-dir" {
		t.Fatalf("recover into a non-empty dir: %v", err)
	}

	cfg := testConfig(t, fresh)
	cfg.Cluster.Name = "node-2"
	cfg.Cluster.Raft.LogStore = toStore // auto would do too; the explicit key must agree with what recover wrote
	rn := startHeldOff(t, cfg, clk, "recovered from", before)
	clk.Advance(251 * time.Second)
	g, err := rn.c.Grant(bg, "d", "h", 30)
	if err != nil {
		t.Fatalf("grant after the hold-off: %v", err)
	}
	for _, w := range before {
		if g.Token <= w.Token || g.Token <= res.LastIndex {
			t.Fatalf("new token %d not above old token %d / last index %d", g.Token, w.Token, res.LastIndex)
		}
	}
}

func mustToken(t *testing.T, tn *testNode, name string) uint64 {
	t.Helper()
	tk, err := tn.c.Get(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	return tk.Token
}

func listAll(t *testing.T, tn *testNode) map[string]wire.Ticket {
	t.Helper()
	l, err := tn.c.List(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]wire.Ticket{}
	for _, tk := range l.Tickets {
		out[tk.Name] = tk
	}
	return out
}
