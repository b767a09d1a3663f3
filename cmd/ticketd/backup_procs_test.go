package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/backup"
	"github.com/tckclk/tckclk/node/ticket"
)

// newClusterNames are the NodeIds of the cluster restored from a backup:
// never used by the old one.
var newClusterNames = []string{"new-1", "new-2", "new-3"}

// adminTokenFile writes a fresh admin token (mode 0600) into dir.
func adminTokenFile(t *testing.T, dir string) (path, token string) {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	token = hex.EncodeToString(b)
	path = filepath.Join(dir, "admin.token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, token
}

// stopAll sends SIGTERM to each named process and waits for its exit 0.
func (pc *procCluster) stopAll(names ...string) {
	pc.t.Helper()
	for _, name := range names {
		if err := pc.procs[name].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			pc.t.Fatal(err)
		}
	}
	for _, name := range names {
		if code, err := pc.procs[name].exitCodeOf(60 * time.Second); code != 0 || err != nil {
			pc.t.Fatalf("%s after SIGTERM: exit %d, %v", name, code, err)
		}
	}
}

// SPEC §3.4, backup and restore, through the binaries: a three-node
// cluster under load through every node; `ticketctl snapshot save` (given
// every node's address: the leader serves it) while the load runs; the
// load goes on after the save, then the cluster stops. `ticketd restore`
// builds new-1 from the file; new-1, new-2 and new-3 (a new key set, the
// NodeIds never used) form the new cluster. Every ticket in the file is
// served by every new node with its holder, token, expiries and revoked
// flag; Grant is refused until 250 s + Δ after the restore. With
// TCKCLK_RESTORE_HOLDOFF=1 the test waits out the hold-off (about 4.5
// min) and checks that the first new token is above every token the old
// cluster issued, those after the save included.
func TestBackupRestoreProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs eight real processes")
	}
	dir := runClusterKeys(t, clustertest.Ports(t, 3), clustertest.Ports(t, 3), "127.0.0.1:1")
	tokenFile, token := adminTokenFile(t, dir)
	pc := &procCluster{t: t, dir: dir, agentAddr: startDevAgent(t, filepath.Join(dir, "clock.secret")), procs: map[string]*proc{}}
	var addrs []string
	for _, name := range clusterNames {
		addrs = append(addrs, pc.start(name, "--api.admin_token_file", tokenFile).addr)
	}
	leader := pc.waitLeader(30*time.Second, clusterNames...)
	revoked := pc.grantVia(leader, "revoked-before-save", 10*time.Second)
	admin, err := client.New(strings.Join(addrs, ","), client.WithAdminToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = admin.Revoke(ctx, revoked.Name, revoked.Token)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	// A follower alone does not serve a backup: it names the leader.
	for _, name := range clusterNames {
		if name == leader {
			continue
		}
		fc, err := client.New(pc.procs[name].addr, client.WithAdminToken(token), client.WithFailover(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = fc.Backup(ctx, io.Discard)
		cancel()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.ErrorBody.Error != "not_leader" || !strings.Contains(ce.Message, leader) {
			t.Fatalf("backup from the follower %s alone: %v, want not_leader naming %s", name, err, leader)
		}
		break
	}

	load := pc.startLoad()
	load.waitAcked(t, 40, 60*time.Second)
	file := filepath.Join(t.TempDir(), "cluster.snap")
	out, err := exec.Command(ctlBinary(t), "--addr", strings.Join(addrs, ","), "--admin-token-file", tokenFile, "--timeout", "30s",
		"snapshot", "save", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ticketctl snapshot save: %v\n%s", err, out)
	}
	t.Logf("ticketctl snapshot save:\n%s", out)
	load.mu.Lock()
	atSave := len(load.acked)
	load.mu.Unlock()
	load.waitAcked(t, atSave+30, 60*time.Second) // the old cluster goes on after the save
	load.stop()
	pc.stopAll(clusterNames...)
	oldMax := revoked.Token
	for _, a := range load.acked {
		oldMax = max(oldMax, a.grant.Token)
	}

	b, err := backup.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	inFile, _ := b.State.List("", 0)
	if len(inFile) < 40 || b.Header.HighestToken >= oldMax {
		t.Fatalf("the file holds %d tickets, highest token %d; the old cluster issued up to %d: want ≥ 40 and grants after the save", len(inFile), b.Header.HighestToken, oldMax)
	}

	newDir := runClusterKeysFor(t, newClusterNames, clustertest.Ports(t, 3), clustertest.Ports(t, 3), "127.0.0.1:1")
	newToken, _ := adminTokenFile(t, newDir)
	restored := time.Now()
	out, err = exec.Command(binary(t, "ticketd"), "restore", "--from-snapshot", file, "--node-id", "new-1",
		"--data-dir", filepath.Join(newDir, "new-1", "data"), "--delta-ms", procClockFlags[1]).CombinedOutput()
	if err != nil {
		t.Fatalf("ticketd restore: %v\n%s", err, out)
	}
	t.Logf("ticketd restore:\n%s", out)
	npc := &procCluster{t: t, dir: newDir, agentAddr: startDevAgent(t, filepath.Join(newDir, "clock.secret")), procs: map[string]*proc{}}
	for _, name := range newClusterNames {
		npc.start(name, "--api.admin_token_file", newToken)
	}
	nb, _ := os.ReadFile(newToken)
	nadmin, err := client.New(npc.procs["new-1"].addr, client.WithAdminToken(strings.TrimSpace(string(nb))))
	if err != nil {
		t.Fatal(err)
	}
	npc.waitVoters(nadmin, 90*time.Second, newClusterNames...)

	for _, via := range newClusterNames {
		for _, want := range inFile {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, err := npc.procs[via].c.Get(ctx, want.Name)
			cancel()
			if err != nil {
				t.Fatalf("%s through %s after the restore: %v", want.Name, via, err)
			}
			if *got != api.TicketFrom(want) {
				t.Fatalf("%s through %s: %+v, the backup holds %+v", want.Name, via, *got, api.TicketFrom(want))
			}
		}
	}
	if g, _ := b.State.Get(revoked.Name); !g.Revoked {
		t.Fatalf("%s: not revoked in the backup", revoked.Name)
	}
	st, err := npc.status("new-1")
	holdEnd := restored.Add(250*time.Second + 12*time.Second)
	if err != nil || st.HoldOffUntilUnixMs < uint64(holdEnd.UnixMilli()) {
		t.Fatalf("new-1 status %+v, %v: want a hold-off to ≥ %v (the restore + 250 s + Δ)", st, err, holdEnd)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	_, err = npc.procs["new-2"].c.Grant(ctx, "first-new", "h", 30)
	cancel()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Reason != "hold_off" {
		t.Fatalf("grant during the hold-off: %v", err)
	}
	t.Logf("%d tickets from the file on all three new nodes; the old cluster issued tokens up to %d (%d in the file)", len(inFile), oldMax, b.Header.HighestToken)
	if os.Getenv("TCKCLK_RESTORE_HOLDOFF") == "" {
		t.Log("TCKCLK_RESTORE_HOLDOFF unset: not waiting out the hold-off for the first new token")
		return
	}
	until := time.UnixMilli(int64(st.HoldOffUntilUnixMs))
	t.Logf("waiting %v for the hold-off to pass", time.Until(until).Round(time.Second))
	time.Sleep(time.Until(until)) // the hold-off is wall-clock time: nothing to poll before it
	g := npc.grantVia("new-2", "first-new", 60*time.Second)
	if g.Token <= oldMax || ticket.TokenEpoch(g.Token) != b.Header.Epoch+1 {
		t.Fatalf("first new token %d (epoch %d): want above %d, every token the old cluster issued, in epoch %d", g.Token, ticket.TokenEpoch(g.Token), oldMax, b.Header.Epoch+1)
	}
	t.Logf("first new token %d = %d<<48 | %d, above the old cluster's %d", g.Token, ticket.TokenEpoch(g.Token), ticket.TokenIndex(g.Token), oldMax)
}

// waitVoters polls the members (admin) until every named node is a voter.
func (pc *procCluster) waitVoters(admin *client.Client, timeout time.Duration, names ...string) {
	pc.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := admin.Members(ctx)
		cancel()
		voters := map[string]bool{}
		if err == nil {
			for _, x := range m.Members {
				voters[x.ID] = x.Suffrage == "voter"
			}
		}
		all := true
		for _, n := range names {
			all = all && voters[n]
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			pc.t.Fatalf("not all of %v voters after %v: %v %v", names, timeout, voters, err)
		}
		time.Sleep(200 * time.Millisecond) // members poll with a deadline
	}
}
