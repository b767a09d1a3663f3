package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// SPEC §4 (snapshots carry a format version and a checksum; a bad one
// stops the node, never a skip), the trial of issue 23 (Critical 2)
// through real processes: three ticketd nodes, grants, an admin snapshot
// on the leader, more grants, a clean stop of that node, one digit of its
// newest snapshot's meta.json changed ("Index":N → "Index":9N; state.bin
// untouched, raft's CRC covers only it), a restart: the node refuses to
// start, exits 1 and names the file. Before the fix it started ready with
// the snapshot's tickets only (and later, as leader, lost acknowledged
// grants and granted a held ticket again). The other two serve every
// acknowledged ticket throughout.
func TestClusterSnapshotMetaDigitRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four real processes")
	}
	dir := runClusterKeys(t, clustertest.Ports(t, len(clusterNames)), clustertest.Ports(t, len(clusterNames)), "127.0.0.1:1")
	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	tokenFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pc := &procCluster{t: t, dir: dir, agentAddr: startDevAgent(t, filepath.Join(dir, "clock.secret")), procs: map[string]*proc{}}
	for _, name := range clusterNames {
		pc.start(name, "--api.admin_token_file", tokenFile)
	}
	leader := pc.waitLeader(30*time.Second, clusterNames...)
	acked := map[string]wire.Ticket{}
	grant := func(prefix string, n int) {
		for i := range n {
			g := pc.grantVia(clusterNames[i%len(clusterNames)], fmt.Sprintf("%s-%d", prefix, i), 10*time.Second)
			acked[g.Name] = wire.Ticket{}
		}
	}
	grant("pre", 30)
	admin, err := client.New(pc.procs[leader].addr, client.WithAdminToken(token), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	info, err := admin.Snapshot(ctx)
	cancel()
	if err != nil {
		t.Fatalf("admin snapshot on the leader %s: %v", leader, err)
	}
	t.Logf("snapshot on %s: %+v", leader, info)
	grant("post", 20)
	for name := range acked { // what every node serves now
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := pc.procs[leader].c.Get(ctx, name)
		cancel()
		if err != nil {
			t.Fatalf("read back %s: %v", name, err)
		}
		acked[name] = *got
	}
	pc.checkTickets(acked, clusterNames...)

	// A clean stop of the node that took the snapshot.
	victim := pc.procs[leader]
	if err := victim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := victim.exitCodeOf(60 * time.Second); err != nil || code != 0 {
		t.Fatalf("%s did not stop cleanly: exit %d %v", leader, code, err)
	}
	var survivors []string
	for _, name := range clusterNames {
		if name != leader {
			survivors = append(survivors, name)
		}
	}

	// One digit of its newest snapshot's meta.json.
	data := filepath.Join(dir, leader, "data")
	store, err := raft.NewFileSnapshotStoreWithLogger(data, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	metas, err := store.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("no snapshot in %s: %v", data, err)
	}
	metaPath := filepath.Join(data, "snapshots", metas[0].ID, "meta.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	index := regexp.MustCompile(`"Index":(\d+),`)
	m := index.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no Index in %s", b)
	}
	changed := index.ReplaceAll(b, []byte(`"Index":9${1},`))
	if err := os.WriteFile(metaPath, changed, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: \"Index\":%s → \"Index\":9%s", metaPath, m[1], m[1])

	args := append([]string{"--config", filepath.Join(dir, leader+".yaml"), "--http", "127.0.0.1:0", "--clock.agent_addr", pc.agentAddr,
		"--api.admin_token_file", tokenFile}, procClockFlags...)
	p, ok := startProc(t, args...)
	if ok {
		pc.procs[leader] = p
		if err := p.waitReady(30 * time.Second); err == nil {
			st, _ := pc.status(leader)
			t.Fatalf("%s started ready on a snapshot whose meta.json was changed (status %+v)", leader, st)
		}
	}
	code, err := p.exitCodeOf(60 * time.Second)
	if err != nil {
		t.Fatalf("%s still runs on the changed meta.json: %v", leader, err)
	}
	log := p.logText()
	if code != 1 || !strings.Contains(log, metaPath) {
		t.Fatalf("%s exited %d; want 1 with the refusal naming %s:\n%s", leader, code, metaPath, log)
	}
	t.Logf("%s refused the changed meta.json: exit %d", leader, code)
	pc.waitLeader(30*time.Second, survivors...)
	pc.checkTickets(acked, survivors...)
}
