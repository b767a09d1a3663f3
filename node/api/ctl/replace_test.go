package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeReplace answers POST /v1/cluster/replace with NEW a non-voter and
// GET /v1/cluster/members with OLD and NEW as they stand after promoteAt
// members calls (0: never promoted). It records the replace body.
func fakeReplace(t *testing.T, promoteAt int64, body *string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/cluster/replace":
			b, _ := io.ReadAll(r.Body)
			*body = string(b)
			io.WriteString(w, `{"old":"n1","new":"n4","new_suffrage":"nonvoter"}`)
		case "/v1/cluster/members":
			if n := calls.Add(1); promoteAt > 0 && n >= promoteAt {
				io.WriteString(w, `{"members":[{"id":"n1","suffrage":""},{"id":"n4","suffrage":"voter"}]}`)
				return
			}
			io.WriteString(w, `{"members":[{"id":"n1","suffrage":"voter"},{"id":"n4","suffrage":"nonvoter"}]}`)
		default:
			http.NotFound(w, r)
		}
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// Issue 12 item 3: cluster replace posts OLD and NEW, then waits until
// NEW is a voter and OLD has left (--json: result done); when --wait
// passes first it exits 1 saying where things stand; --wait 0 does not
// wait and prints the server's answer.
func TestClusterReplaceWaits(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tok, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	var body string
	addr := fakeReplace(t, 3, &body)
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"--admin-token-file", tok, "--addr", addr, "--json", "cluster", "replace", "n1", "--with", "n4", "--wait", "30s"}, testEnv(nil, &out, &errb))
	var got replaced
	if code != 0 || json.Unmarshal(out.Bytes(), &got) != nil || got.Result != "done" || got.NewSuffrage != "voter" || got.OldInConfig {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, out.String(), errb.String())
	}
	if body != `{"old":"n1","new":"n4"}` {
		t.Fatalf("replace body %s", body)
	}

	addr = fakeReplace(t, 0, &body)
	out.Reset()
	errb.Reset()
	code = Main(context.Background(), []string{"--admin-token-file", tok, "--addr", addr, "cluster", "replace", "n1", "--with", "n4", "--wait", "500ms"}, testEnv(nil, &out, &errb))
	if code != 1 || !strings.Contains(errb.String(), "after --wait 500ms: n4 is nonvoter and n1 is still in the Raft configuration") {
		t.Fatalf("wait passed: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}

	out.Reset()
	errb.Reset()
	code = Main(context.Background(), []string{"--admin-token-file", tok, "--addr", addr, "cluster", "replace", "n1", "--with", "n4", "--wait", "0"}, testEnv(nil, &out, &errb))
	if code != 0 || !strings.Contains(out.String(), "n1 retired; n4 is in the Raft configuration as nonvoter") {
		t.Fatalf("--wait 0: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
