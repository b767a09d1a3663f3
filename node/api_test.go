package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

type rawAnswer struct {
	status int
	body   wire.ErrorBody
	raw    string
	header http.Header
}

func do(t *testing.T, tn *testNode, method, path, body string, hdr ...string) rawAnswer {
	t.Helper()
	req, err := http.NewRequest(method, tn.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Transport: tn.tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := rawAnswer{status: resp.StatusCode, raw: string(b), header: resp.Header}
	_ = json.Unmarshal(b, &a.body)
	return a
}

// fingerprint is every ticket, as JSON.
func fingerprint(t *testing.T, tn *testNode) string {
	t.Helper()
	l, err := tn.c.List(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return string(must(json.Marshal(l)))
}

// SPEC §4, §4.1: every malformed request is a 4xx with a JSON error and a
// message, and changes nothing (no Raft entry is even proposed).
func TestAPIBadInputTable(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{})
	g, err := tn.c.Grant(bg, "held", "alice", 30)
	if err != nil {
		t.Fatal(err)
	}
	tok := func(n uint64) string { return strings.TrimSpace(string(must(json.Marshal(n)))) }
	big := `{"holder":"` + strings.Repeat("h", 2<<20) + `","lease_s":30}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"name starts with dash", "POST", "/v1/tickets/-x/grant", `{"holder":"h","lease_s":30}`, 400, "bad_request", "must start with a letter or digit"},
		{"name starts with dot", "POST", "/v1/tickets/.x/grant", `{"holder":"h","lease_s":30}`, 400, "bad_request", "name"},
		{"name with space", "POST", "/v1/tickets/a%20b/grant", `{"holder":"h","lease_s":30}`, 400, "bad_request", `" "`}, // the byte named, escaped (issue 10)
		{"name non-ASCII", "POST", "/v1/tickets/%C3%A9/grant", `{"holder":"h","lease_s":30}`, 400, "bad_request", "name"},
		{"name 129 bytes", "POST", "/v1/tickets/" + strings.Repeat("n", 129) + "/grant", `{"holder":"h","lease_s":30}`, 400, "bad_request", "129 bytes"},
		{"name empty", "POST", "/v1/tickets//grant", `{"holder":"h","lease_s":30}`, 400, "bad_request", "empty"},
		{"holder empty", "POST", "/v1/tickets/a/grant", `{"holder":"","lease_s":30}`, 400, "bad_request", "holder is empty"},
		{"holder 129", "POST", "/v1/tickets/a/grant", `{"holder":"` + strings.Repeat("h", 129) + `","lease_s":30}`, 400, "bad_request", "129 bytes"},
		{"holder tab", "POST", "/v1/tickets/a/grant", `{"holder":"a\tb","lease_s":30}`, 400, "bad_request", "0x09"},
		{"holder DEL", "POST", "/v1/tickets/a/grant", `{"holder":"a\u007f","lease_s":30}`, 400, "bad_request", "0x7f"},
		{"holder NUL", "POST", "/v1/tickets/a/grant", `{"holder":"a\u0000","lease_s":30}`, 400, "bad_request", "0x00"},
		{"holder non-ASCII", "POST", "/v1/tickets/a/grant", `{"holder":"ü","lease_s":30}`, 400, "bad_request", "printable ASCII"},
		{"holder number", "POST", "/v1/tickets/a/grant", `{"holder":7,"lease_s":30}`, 400, "bad_request", "want a string"},
		{"holder missing", "POST", "/v1/tickets/a/grant", `{"lease_s":30}`, 400, "bad_request", `"holder" is required`},
		{"lease 0", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":0}`, 400, "bad_request", "lease_s 0 is outside 1..=250"},
		{"lease 251", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":251}`, 400, "bad_request", "lease_s 251"},
		{"lease -1", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":-1}`, 400, "bad_request", "lease_s -1"},
		{"lease string", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":"30"}`, 400, "bad_request", `want an integer, got the string "30"`},
		{"lease fraction", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30.5}`, 400, "bad_request", "fractions"},
		{"lease 30.0", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30.0}`, 400, "bad_request", "fractions"},
		{"lease exponent", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":3e1}`, 400, "bad_request", "exponents"},
		{"lease null", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":null}`, 400, "bad_request", "got null"},
		{"lease bool", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":true}`, 400, "bad_request", "got true"},
		{"lease huge", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":99999999999999999999}`, 400, "bad_request", "out of range"},
		{"lease missing", "POST", "/v1/tickets/a/grant", `{"holder":"h"}`, 400, "bad_request", `"lease_s" is required`},
		{"unknown field", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30,"extend":true}`, 400, "bad_request", `unknown field "extend"`},
		{"token on grant", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30,"token":1}`, 400, "bad_request", `unknown field "token"`},
		{"duplicate field", "POST", "/v1/tickets/a/grant", `{"holder":"h","holder":"i","lease_s":30}`, 400, "bad_request", "twice"},
		{"nested", "POST", "/v1/tickets/a/grant", `{"holder":{"x":1},"lease_s":30}`, 400, "bad_request", "an object"},
		{"array body", "POST", "/v1/tickets/a/grant", `[1]`, 400, "bad_request", "JSON object"},
		{"not JSON", "POST", "/v1/tickets/a/grant", `holder=h`, 400, "bad_request", "not JSON"},
		{"empty body", "POST", "/v1/tickets/a/grant", ``, 400, "bad_request", "empty"},
		{"trailing data", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30}{}`, 400, "bad_request", "after the JSON object"},
		{"truncated JSON", "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":3`, 400, "bad_request", "not JSON"},
		{"2 MB body", "POST", "/v1/tickets/a/grant", big, 413, "too_large", "65536"},
		{"query on grant", "POST", "/v1/tickets/a/grant?force=1", `{"holder":"h","lease_s":30}`, 400, "bad_request", "no query"},
		{"renew token string", "POST", "/v1/tickets/held/renew", `{"holder":"alice","token":"` + tok(g.Token) + `","lease_s":30}`, 400, "bad_request", "want an integer"},
		{"renew token negative", "POST", "/v1/tickets/held/renew", `{"holder":"alice","token":-1,"lease_s":30}`, 400, "bad_request", "non-negative"},
		{"renew token fraction", "POST", "/v1/tickets/held/renew", `{"holder":"alice","token":1.5,"lease_s":30}`, 400, "bad_request", "fractions"},
		{"renew token 0", "POST", "/v1/tickets/held/renew", `{"holder":"alice","token":0,"lease_s":30}`, 400, "bad_request", "at least 1"},
		{"renew token missing", "POST", "/v1/tickets/held/renew", `{"holder":"alice","lease_s":30}`, 400, "bad_request", `"token" is required`},
		{"renew lease 251", "POST", "/v1/tickets/held/renew", `{"holder":"alice","token":` + tok(g.Token) + `,"lease_s":251}`, 400, "bad_request", "lease_s 251"},
		{"release lease given", "POST", "/v1/tickets/held/release", `{"holder":"alice","token":` + tok(g.Token) + `,"lease_s":1}`, 400, "bad_request", `unknown field "lease_s"`},
		{"release holder missing", "POST", "/v1/tickets/held/release", `{"token":` + tok(g.Token) + `}`, 400, "bad_request", `"holder" is required`},
		{"GET grant", "GET", "/v1/tickets/a/grant", ``, 405, "method_not_allowed", "takes POST"},
		{"DELETE ticket", "DELETE", "/v1/tickets/held", ``, 405, "method_not_allowed", "takes GET"},
		{"PUT grant", "PUT", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30}`, 405, "method_not_allowed", "takes POST"},
		{"unknown action", "POST", "/v1/tickets/a/steal", `{}`, 404, "not_found", "no endpoint"},
		{"unknown path", "GET", "/v2/tickets", ``, 404, "not_found", "no endpoint"},
		{"GET with body", "GET", "/v1/tickets/held", `{"x":1}`, 400, "bad_request", "takes no body"},
		{"list bad prefix", "GET", "/v1/tickets?prefix=%2Fx", ``, 400, "bad_request", "prefix"},
		{"list limit 0", "GET", "/v1/tickets?limit=0", ``, 400, "bad_request", "limit"},
		{"list unknown param", "GET", "/v1/tickets?holder=alice", ``, 400, "bad_request", "unknown query parameter"},
		{"get bad name", "GET", "/v1/tickets/-x", ``, 400, "bad_request", "name"},
		{"get absent", "GET", "/v1/tickets/absent", ``, 404, "not_found", "not held"},
		{"renew by other holder", "POST", "/v1/tickets/held/renew", `{"holder":"bob","token":` + tok(g.Token) + `,"lease_s":30}`, 409, "wrong_holder", "not held by"},
		{"renew other token", "POST", "/v1/tickets/held/renew", `{"holder":"alice","token":` + tok(g.Token+100) + `,"lease_s":30}`, 409, "wrong_token", "another token"},
		{"release other token", "POST", "/v1/tickets/held/release", `{"holder":"alice","token":` + tok(g.Token+100) + `}`, 409, "wrong_token", "another token"},
		{"release absent", "POST", "/v1/tickets/absent/release", `{"holder":"alice","token":1}`, 409, "not_held", "not held"},
		{"admin without admin token", "GET", "/v1/cluster/members", ``, 403, "forbidden", "admin_token_file"},
	}
	before := fingerprint(t, tn)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := do(t, tn, c.method, c.path, c.body)
			if a.status != c.status || a.body.Error != c.code || !strings.Contains(a.body.Message, c.msg) {
				t.Fatalf("got %d %q %q; want %d %q containing %q\n%s", a.status, a.body.Error, a.body.Message, c.status, c.code, c.msg, a.raw)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
		})
	}
	// 409s go through Raft (they must be decided against the current
	// state), so compare the tickets here; TestAPIBadInputProposesNothing
	// checks that 400s never reach the log.
	if after := fingerprint(t, tn); after != before {
		t.Fatalf("state changed:\n%s\n%s", before, after)
	}
}

// SPEC §4.1: 400s never reach Raft.
func TestAPIBadInputProposesNothing(t *testing.T) {
	tn := startNode(t, testConfig(t, t.TempDir()), Deps{})
	st, _ := tn.c.Status(bg)
	for _, body := range []string{`{"holder":"h","lease_s":0}`, `{"holder":"h","lease_s":"30"}`, `{"holder":"h","lease_s":30.5}`, `{"holder":"h","lease_s":30,"x":1}`} {
		if a := do(t, tn, "POST", "/v1/tickets/a/grant", body); a.status != 400 {
			t.Fatalf("%s: %d", body, a.status)
		}
	}
	st2, _ := tn.c.Status(bg)
	if st2.Raft.LastIndex != st.Raft.LastIndex {
		t.Fatalf("refused requests appended to the log: %d → %d", st.Raft.LastIndex, st2.Raft.LastIndex)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// SPEC §4.1: the client bearer token guards tickets and status, the admin
// token guards /v1/cluster/...; probes stay open.
func TestAPITokens(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir+"/data")
	clientTok := strings.Repeat("c", 40)
	adminTok := strings.Repeat("a", 40)
	cfg.API.TokenFile = writeFile(t, dir, "client.token", clientTok+"\n", 0o600)
	cfg.API.AdminTokenFile = writeFile(t, dir, "admin.token", adminTok, 0o600)
	tn := startNode(t, cfg, Deps{}, client.WithToken(clientTok), client.WithAdminToken(adminTok))
	if _, err := tn.c.Grant(bg, "a", "h", 30); err != nil {
		t.Fatal(err)
	}
	m, err := tn.c.Members(bg)
	if err != nil || len(m.Members) != 1 || m.Members[0].ID != "node-1" || !m.Members[0].Leader || m.Members[0].Suffrage != "voter" {
		t.Fatalf("members %+v %v", m, err)
	}
	for _, c := range []struct {
		path, auth string
		status     int
	}{
		{"/v1/tickets/a", "", 401},
		{"/v1/tickets/a", "Bearer " + adminTok, 200}, // issue 10: the admin token opens the client endpoints
		{"/v1/tickets/a", "Bearer " + clientTok + "x", 401},
		{"/v1/tickets/a", "bearer " + clientTok, 401},
		{"/v1/tickets/a", "Bearer " + clientTok, 200},
		{"/v1/status", "", 401},
		{"/v1/cluster/members", "Bearer " + clientTok, 401},
		{"/v1/cluster/members", "", 401},
		{"/v1/cluster/members", "Bearer " + adminTok, 200},
		{"/v1/cluster/health", "", 401}, // SPEC §3.5: the client token, not the admin one
		{"/v1/cluster/health", "Bearer " + clientTok, 200},
		{"/v1/cluster/health?verbose=1", "Bearer " + clientTok, 400},
		{"/livez", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 200},
	} {
		a := do(t, tn, "GET", c.path, "", "Authorization", c.auth)
		if a.status != c.status {
			t.Fatalf("%s with %q: %d, want %d: %s", c.path, c.auth, a.status, c.status, a.raw)
		}
		if c.status == 401 {
			if a.header.Get("WWW-Authenticate") == "" || a.body.Error != "unauthorized" {
				t.Fatalf("401 without challenge or code: %v %s", a.header, a.raw)
			}
			if strings.Contains(a.raw, clientTok) || strings.Contains(a.raw, adminTok) {
				t.Fatal("a token appears in an answer")
			}
		}
	}
	a := do(t, tn, "POST", "/v1/cluster/transfer-leadership", "", "Authorization", "Bearer "+adminTok)
	if a.status != 409 || a.body.Error != "single_node" {
		t.Fatalf("transfer: %d %s", a.status, a.raw)
	}
	a = do(t, tn, "POST", "/v1/cluster/remove", `{"id":"node-1"}`, "Authorization", "Bearer "+adminTok)
	if a.status != 409 {
		t.Fatalf("remove self: %d %s", a.status, a.raw)
	}
	a = do(t, tn, "GET", "/metrics", "")
	for _, want := range []string{"tickets_active 1", "raft_state 2", "raft_voters 1", "raft_non_voters 0", `ticket_ops_total{op="grant",result="ok"} 1`, `ticket_op_duration_seconds_bucket{op="grant"`, "raft_leader_changes_total 1"} {
		if !strings.Contains(a.raw, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	snap, err := tn.c.Snapshot(bg)
	if err != nil || snap.Index == 0 || snap.SizeBytes == 0 || snap.Tickets != 1 {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
}

// SPEC §1.4, §4.1: every secret is distinct; a token file open to others,
// too short, or equal to another secret refuses start-up naming the key.
func TestTokenFilesRefused(t *testing.T) {
	dir := t.TempDir()
	same := strings.Repeat("s", 40)
	cases := []struct {
		name string
		set  func(c *Config)
		key  string
		msg  string
	}{
		{"client equals admin", func(c *Config) {
			c.API.TokenFile = writeFile(t, dir, "t1", same, 0o600)
			c.API.AdminTokenFile = writeFile(t, dir, "t2", same, 0o600)
		}, "api.admin_token_file", "same secret as api.token_file"},
		{"admin equals clock secret", func(c *Config) {
			c.API.AdminTokenFile = writeFile(t, dir, "t3", same, 0o600)
			c.Clock.SecretFile = writeFile(t, dir, "clock", same, 0o600)
		}, "clock.secret_file", "same secret as api.admin_token_file"},
		{"group readable", func(c *Config) { c.API.TokenFile = writeFile(t, dir, "t4", same, 0o640) }, "api.token_file", "mode 0640"},
		{"too short", func(c *Config) { c.API.TokenFile = writeFile(t, dir, "t5", "short", 0o600) }, "api.token_file", "at least 32"},
		{"missing", func(c *Config) { c.API.TokenFile = dir + "/nope" }, "api.token_file", "no such file"},
		{"same path", func(c *Config) { c.API.TokenFile = dir + "/x"; c.API.AdminTokenFile = dir + "/x" }, "api.admin_token_file", "same file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			c.set(&cfg)
			err := RunWith(bg, cfg, Deps{Logger: testLogger(t)})
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path != c.key || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want a config error at %s containing %q", err, c.key, c.msg)
			}
			if strings.Contains(err.Error(), same) {
				t.Fatal("the secret appears in the error")
			}
		})
	}
}

// SPEC §4.1: optional TLS with an optional client CA.
func TestAPITLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := makeCert(t, nil, nil, "test CA", true)
	srv, srvKey := makeCert(t, ca, caKey, "127.0.0.1", false)
	cli, cliKey := makeCert(t, ca, caKey, "client", false)
	cfg := testConfig(t, dir+"/data")
	cfg.API.TLS = APITLSConfig{Enabled: true,
		CertFile:     writeFile(t, dir, "srv.pem", pemCert(srv), 0o600),
		KeyFile:      writeFile(t, dir, "srv.key", pemKey(t, srvKey), 0o600),
		ClientCAFile: writeFile(t, dir, "ca.pem", pemCert(ca), 0o600),
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cc := tls.Certificate{Certificate: [][]byte{cli.Raw}, PrivateKey: cliKey}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cc}}}
	t.Cleanup(tr.CloseIdleConnections)
	tn := startNode(t, cfg, Deps{}, client.WithHTTPClient(&http.Client{Transport: tr}))
	if _, err := tn.c.Grant(bg, "tls", "h", 30); err != nil {
		t.Fatal(err)
	}
	// No client certificate: the handshake fails.
	tr2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr2.CloseIdleConnections)
	c2, _ := client.New(tn.url, client.WithHTTPClient(&http.Client{Transport: tr2}))
	if _, err := c2.Get(bg, "tls"); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	// Plain HTTP to the TLS port is refused.
	resp, err := (&http.Client{Transport: tn.tr}).Get("http://" + strings.TrimPrefix(tn.url, "https://") + "/livez")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plaintext served on the TLS port")
		}
	}
}

func TestAPITLSConfigRefused(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.API.TLS = APITLSConfig{Enabled: true, CertFile: "/nope.pem", KeyFile: "/nope.key"}
	err := RunWith(bg, cfg, Deps{Logger: testLogger(t)})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Path != "api.tls.cert_file" {
		t.Fatalf("got %v", err)
	}
}

func makeCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey))
	return must(x509.ParseCertificate(der)), key
}

func pemCert(c *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
}

func pemKey(t *testing.T, k *ecdsa.PrivateKey) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: must(x509.MarshalECPrivateKey(k))}))
}

// SPEC §4: a holder is 1..=128 printable ASCII, the space included: holders
// with spaces (inside, leading, trailing, only spaces) grant, read back
// byte for byte, renew and release, also after a restart (entry and
// snapshot codecs).
func TestHolderWithSpaces(t *testing.T) {
	dir := t.TempDir()
	clk := newManualClock()
	cfg := testConfig(t, dir)
	admin := strings.Repeat("a", 40)
	cfg.API.AdminTokenFile = writeFile(t, t.TempDir(), "admin.token", admin, 0o600)
	tn := startNode(t, cfg, Deps{Wall: clk}, client.WithAdminToken(admin))
	holders := []string{"alice smith", " lead", "trail ", "   ", strings.Repeat(" ", 128)}
	tokens := map[string]uint64{}
	for i, h := range holders {
		name := fmt.Sprintf("job.%d", i)
		g, err := tn.c.Grant(bg, name, h, 30)
		if err != nil || g.Holder != h {
			t.Fatalf("grant to %q: %+v %v", h, g, err)
		}
		tokens[name] = g.Token
		if _, err := tn.c.Grant(bg, name, strings.TrimSpace(h)+"x", 30); !errors.Is(err, client.ErrHeld) {
			t.Fatalf("grant of %s by another holder: %v", name, err)
		}
	}
	if _, err := tn.c.Snapshot(bg); err != nil {
		t.Fatal(err)
	}
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	tn = startNode(t, cfg, Deps{Wall: clk})
	for i, h := range holders {
		name := fmt.Sprintf("job.%d", i)
		got, err := tn.c.Get(bg, name)
		if err != nil || got.Holder != h || got.Token != tokens[name] {
			t.Fatalf("%s after restart: %+v %v; want holder %q", name, got, err, h)
		}
		if _, err := tn.c.Renew(bg, name, h, tokens[name], 60); err != nil {
			t.Fatalf("renew by %q: %v", h, err)
		}
		if _, err := tn.c.Release(bg, name, h, tokens[name]); err != nil {
			t.Fatalf("release by %q: %v", h, err)
		}
	}
}
