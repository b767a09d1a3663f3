package api

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// Issue 10: an encoded slash (or any byte outside the name grammar) in a
// ticket name is a 400 naming the byte escaped, never a route on a shorter
// name; the Backend sees nothing.
func TestEncodedNameBytesRefused(t *testing.T) {
	b := &fakeBackend{}
	h := NewHandler(Options{Backend: b})
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/v1/tickets/a%2Fgrant", `"/"`},
		{"POST", "/v1/tickets/a%2Fb/grant", `"/"`},
		{"GET", "/v1/tickets/a%2Frenew", `"/"`},
		{"POST", "/v1/tickets/a%C3%A9/grant", `"\xc3"`},
		{"POST", "/v1/tickets/%00a/grant", `"\x00"`},
	} {
		rec, e := serve(h, c.method, c.path, `{"holder":"h","lease_s":30}`)
		if rec.Code != 400 || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s %s: %d %+v (want 400 naming %s)", c.method, c.path, rec.Code, e, c.want)
		}
	}
	if len(b.writes) != 0 {
		t.Fatalf("reached the backend: %+v", b.writes)
	}
}

// Issue 10: the admin token also opens the client endpoints; the client
// token never opens the admin ones.
func TestAdminTokenOpensClientEndpoints(t *testing.T) {
	client, admin := []byte(strings.Repeat("c", 32)), []byte(strings.Repeat("a", 32))
	h := NewHandler(Options{Backend: &fakeBackend{}, ClientToken: client, AdminToken: admin})
	call := func(path, tok string) int {
		r := httptest.NewRequest("GET", path, nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	for _, c := range []struct {
		path, tok string
		want      int
	}{
		{"/v1/status", string(admin), 200},
		{"/v1/status", string(client), 200},
		{"/v1/status", "", 401},
		{"/v1/status", "wrong", 401},
		{"/v1/cluster/members", string(admin), 200},
		{"/v1/cluster/members", string(client), 401},
	} {
		if got := call(c.path, c.tok); got != c.want {
			t.Errorf("%s with %.1q…: %d, want %d", c.path, c.tok, got, c.want)
		}
	}
}
