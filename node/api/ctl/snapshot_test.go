package ctl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"
)

// testBackup is a backup whose state is opaque bytes (ticketctl checks the
// envelope; ticketd restore decodes the state).
func testBackup(t *testing.T) []byte {
	t.Helper()
	state := bytes.Repeat([]byte("state "), 200)
	h := &wire.BackupHeader{TakenUnixMs: 1_800_000_000_000, NodeID: "node-2", Voters: []string{"node-1", "node-2", "node-3"},
		DeltaMs: 500, Index: 9, Term: 4, Epoch: 1, HighestToken: 1<<48 | 5, Tickets: 3, StateBytes: uint64(len(state))}
	var b bytes.Buffer
	if _, err := wire.WriteBackup(&b, h, bytes.NewReader(state)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// backupServer serves body at GET /v1/cluster/backup to the admin token
// "secret", claiming length claim (0: the body's); with notLeader it
// answers 503 not_leader instead.
func backupServer(t *testing.T, body []byte, claim int, notLeader bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/v1/cluster/backup" || r.Method != http.MethodGet:
			http.NotFound(w, r)
		case r.Header.Get("Authorization") != "Bearer secret":
			w.WriteHeader(http.StatusForbidden)
		case notLeader:
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"not_leader","message":"a backup is taken by the leader: this node is not the leader, node-2 is","stage":"raft"}`)
		default:
			if claim == 0 {
				claim = len(body)
			}
			w.Header().Set("Content-Length", strconv.Itoa(claim))
			w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// dirNames lists dir.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// SPEC §3.4: snapshot save writes the leader's backup to FILE, mode 0600,
// byte for byte, and prints what it holds and its SHA-256 (sha256sum's);
// given several addresses it moves past a follower (not_leader). A backup
// cut short or damaged on the way exits 1 and leaves FILE as it was, with
// no temporary file behind.
func TestSnapshotSave(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tok, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := testBackup(t)
	file := filepath.Join(dir, "b.snap")
	addrs := backupServer(t, nil, 0, true) + "," + backupServer(t, good, 0, false)
	r := runCtl(t, nil, "--addr", addrs, "--admin-token-file", tok, "snapshot", "save", file)
	if r.code != 0 {
		t.Fatalf("save: %+v", r)
	}
	got, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(got, good) {
		t.Fatalf("FILE holds %d bytes (%v), want the %d served", len(got), err, len(good))
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("FILE mode %v, want 0600", fi.Mode().Perm())
	}
	sum := sha256.Sum256(good)
	for _, want := range []string{"saved " + file + ": 3 tickets at Raft index 9, term 4", "by node-2 (voters node-1,node-2,node-3), Δ 500 ms",
		"highest token 281474976710661 (token epoch 1)", strconv.Itoa(len(good)) + " bytes, sha256 " + hex.EncodeToString(sum[:])} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}

	r = runCtl(t, nil, "--addr", addrs, "--admin-token-file", tok, "--json", "snapshot", "save", file)
	var js SavedJSON
	if err := json.Unmarshal([]byte(r.out), &js); r.code != 0 || err != nil || js.Tickets != 3 || js.SHA256 != hex.EncodeToString(sum[:]) || js.Bytes != uint64(len(good)) {
		t.Fatalf("--json: %+v %v", r, err)
	}

	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	for name, addr := range map[string]string{
		"cut short": backupServer(t, good[:len(good)-40], len(good), false),
		"bit flip":  backupServer(t, flipped, 0, false),
		"foreign":   backupServer(t, []byte("<html>proxy error</html>"), 0, false),
	} {
		r := runCtl(t, nil, "--addr", addr, "--admin-token-file", tok, "snapshot", "save", file)
		if r.code != 1 || !strings.Contains(r.stderr, "backup") {
			t.Errorf("%s: %+v, want exit 1 naming the backup", name, r)
		}
		if now, _ := os.ReadFile(file); !bytes.Equal(now, good) {
			t.Fatalf("%s: FILE changed", name)
		}
		if names := dirNames(t, dir); names != "admin.token b.snap" {
			t.Fatalf("%s: %s holds %s: a temporary file was left", name, dir, names)
		}
	}
	if r := runCtl(t, nil, "--addr", backupServer(t, good, 0, false), "--admin-token-file", tok, "snapshot", "save", filepath.Join(dir, "none", "b.snap")); r.code != 1 || !strings.Contains(r.stderr, filepath.Join(dir, "none")) {
		t.Errorf("into a missing directory: %+v", r)
	}
}

func TestSnapshotUsage(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tok, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TICKETCTL_ADDR": "http://127.0.0.1:1"} // never reached
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"snapshot"}, "snapshot save FILE"},
		{[]string{"snapshot", "take", "f"}, "snapshot save FILE"},
		{[]string{"--admin-token-file", tok, "snapshot", "save"}, "exactly one FILE"},
		{[]string{"--admin-token-file", tok, "snapshot", "save", "a", "b"}, "exactly one FILE"},
		{[]string{"snapshot", "save", "f"}, "needs --admin-token-file"},
		{[]string{"--admin-token-file", tok, "snapshot", "save", "f", "--holder", "h"}, "snapshot takes no --holder"},
	} {
		if r := runCtl(t, env, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%q: exit %d stderr %q; want 2 with %q", c.args, r.code, r.stderr, c.msg)
		}
	}
}
