package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

// SPEC §4 (Revoke, admin): POST /v1/tickets/{name}/revoke needs the admin
// token (the client token is not enough); it takes no body or
// {"token":N}; its outcomes map to 200 (the ticket, revoked), 404 (not
// held), 409 (another token); a renew refused as revoked is a 409
// "revoked" that says what the holder must do.
func TestRevokeRoute(t *testing.T) {
	const clientTok, adminTok = "client-token-0123456789abcdef0123", "admin-token-0123456789abcdef012345"
	b := &fakeBackend{}
	h := NewHandler(Options{Backend: b, ClientToken: []byte(clientTok), AdminToken: []byte(adminTok)})
	req := func(method, path, body, tok string) (int, string) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		h.ServeHTTP(rec, r)
		return rec.Code, rec.Body.String()
	}
	for _, tok := range []string{"", clientTok} {
		if code, _ := req("POST", "/v1/tickets/job/revoke", "", tok); code != 401 {
			t.Fatalf("revoke with token %q: %d", tok, code)
		}
	}
	for _, body := range []string{`{"token":"1"}`, `{"token":-1}`, `{"holder":"h"}`, `[1]`, `{"token":1} x`} {
		if code, out := req("POST", "/v1/tickets/job/revoke", body, adminTok); code != 400 {
			t.Fatalf("revoke body %s: %d %s", body, code, out)
		}
	}
	if code, _ := req("GET", "/v1/tickets/job/revoke", "", adminTok); code != 405 {
		t.Fatalf("GET revoke: %d", code)
	}
	if code, _ := req("POST", "/v1/tickets/-bad/revoke", "", adminTok); code != 400 {
		t.Fatalf("revoke of a bad name: %d", code)
	}
	if len(b.writes) != 0 {
		t.Fatalf("refused requests reached the backend: %+v", b.writes)
	}

	tk := ticket.Ticket{Name: "job", Holder: "alice", Token: 7, LeaseS: 30, ValidBeforeMs: 31000, ExpiryMs: 31500, Revoked: true}
	for _, c := range []struct {
		body   string
		token  uint64
		res    ticket.Result
		status int
		want   string
	}{
		{"", 0, ticket.Result{Code: ticket.CodeOK, Ticket: tk}, 200, `"revoked":true`},
		{`{"token":7}`, 7, ticket.Result{Code: ticket.CodeExisting, Ticket: tk}, 200, `"server_expiry_unix_ms":31500`},
		{" ", 0, ticket.Result{Code: ticket.CodeNotHeld}, 404, `"error":"not_found"`},
		{`{"token":8}`, 8, ticket.Result{Code: ticket.CodeWrongToken, Ticket: tk}, 409, `"error":"wrong_token"`},
	} {
		b.writes, b.res = nil, c.res
		code, out := req("POST", "/v1/tickets/job/revoke", c.body, adminTok)
		if code != c.status || !strings.Contains(out, c.want) {
			t.Fatalf("%v: %d %s", c.res.Code, code, out)
		}
		if len(b.writes) != 1 || b.writes[0] != (Write{Op: ticket.OpRevoke, Name: "job", Token: c.token}) {
			t.Fatalf("backend got %+v", b.writes)
		}
	}
	b.res = ticket.Result{Code: ticket.CodeRevoked, Ticket: tk}
	code, out := req("POST", "/v1/tickets/job/renew", `{"holder":"alice","token":7,"lease_s":30}`, clientTok)
	var e wire.ErrorBody
	if code != 409 || json.Unmarshal([]byte(out), &e) != nil || e.Error != "revoked" || !strings.Contains(e.Message, "stop using token 7") {
		t.Fatalf("renew refused as revoked: %d %s", code, out)
	}
}
