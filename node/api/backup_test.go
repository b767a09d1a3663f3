package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"
)

// backupBackend is a fakeBackend that serves a backup of state, or err.
type backupBackend struct {
	fakeBackend
	state  []byte
	short  int // the state reader ends this many bytes early
	err    error
	closed bool
}

type closeRecorder struct {
	io.Reader
	b *backupBackend
}

func (c closeRecorder) Close() error { c.b.closed = true; return nil }

func (b *backupBackend) Backup(context.Context) (*Backup, error) {
	if b.err != nil {
		return nil, b.err
	}
	h := &wire.BackupHeader{TakenUnixMs: 1, NodeID: "node-1", Voters: []string{"node-1"}, DeltaMs: 500, Index: 3, Term: 1, Tickets: 0, StateBytes: uint64(len(b.state))}
	return &Backup{Header: h, State: closeRecorder{bytes.NewReader(b.state[:len(b.state)-b.short]), b}}, nil
}

// SPEC §3.4: GET /v1/cluster/backup is admin-only, takes no query, streams
// the backup with its length, closes the state; the Backend's refusal
// (not_leader) is its answer; a state that ends early gives fewer bytes
// than Content-Length (a truncated backup every reader refuses).
func TestBackupRoute(t *testing.T) {
	b := &backupBackend{state: bytes.Repeat([]byte{7}, 1000)}
	h := NewHandler(Options{Backend: b, AdminToken: []byte("admin-secret"), ClientToken: []byte("client-secret")})
	get := func(tok, path string) *http.Response {
		rec := httptest.NewRecorder()
		req, _ := http.NewRequest(http.MethodGet, path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	for tok, want := range map[string]int{"": 401, "client-secret": 401} {
		if r := get(tok, "/v1/cluster/backup"); r.StatusCode != want {
			t.Errorf("token %q: %d, want %d", tok, r.StatusCode, want)
		}
	}
	if r := get("admin-secret", "/v1/cluster/backup?x=1"); r.StatusCode != 400 {
		t.Errorf("with a query: %d", r.StatusCode)
	}
	r := get("admin-secret", "/v1/cluster/backup")
	body, _ := io.ReadAll(r.Body)
	hdr, _, err := wire.CopyBackup(nil, bytes.NewReader(body))
	if r.StatusCode != 200 || err != nil || hdr.StateBytes != 1000 || r.Header.Get("Content-Length") != strconv.Itoa(len(body)) || !b.closed {
		t.Fatalf("backup: %d, %d bytes (Content-Length %s), %v, closed %v", r.StatusCode, len(body), r.Header.Get("Content-Length"), err, b.closed)
	}
	b.short = 10
	r = get("admin-secret", "/v1/cluster/backup")
	body, _ = io.ReadAll(r.Body)
	if cl, _ := strconv.Atoi(r.Header.Get("Content-Length")); len(body) >= cl {
		t.Fatalf("a state cut short: %d bytes sent of %d", len(body), cl)
	}
	if _, _, err := wire.CopyBackup(nil, bytes.NewReader(body)); !errors.Is(err, wire.ErrBackupTruncated) {
		t.Fatalf("what a cut-short backup sends reads as %v, want truncated", err)
	}
	b.err = NotLeader("raft", "a backup is taken by the leader: this node is not the leader, node-2 is")
	r = get("admin-secret", "/v1/cluster/backup")
	if r.StatusCode != 503 {
		t.Fatalf("not the leader: %d", r.StatusCode)
	}
	h = NewHandler(Options{Backend: &fakeBackend{}, AdminToken: []byte("admin-secret")})
	rec := httptest.NewRecorder()
	req, _ := http.NewRequest(http.MethodGet, "/v1/cluster/backup", nil)
	req.Header.Set("Authorization", "Bearer admin-secret")
	if h.ServeHTTP(rec, req); rec.Result().StatusCode != 404 {
		t.Fatalf("a Backend without backups: %d, want 404", rec.Result().StatusCode)
	}
}
