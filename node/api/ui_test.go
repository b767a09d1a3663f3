package api

import (
	"crypto/sha256"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
)

// The status page (/ui/, issue 15): served as HTML with a CSP that lets run
// exactly its own inline script and style (their hashes), nothing from
// elsewhere; it holds no data, so it needs no token, while the data it
// reads stays behind the API's tokens; read-only (GET/HEAD only).
func TestStatusPageServedWithStrictCSP(t *testing.T) {
	h := NewHandler(Options{Backend: &fakeBackend{}, ClientToken: []byte("client-token-0123456789abcdef0123"), AdminToken: []byte("admin-token-0123456789abcdef012345")})
	for _, path := range []string{"/ui/", "/ui"} {
		rec, _ := serve(h, "GET", path, "")
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %q", path, rec.Code, rec.Header().Get("Content-Type"))
		}
		body := rec.Body.String()
		csp := rec.Header().Get("Content-Security-Policy")
		for tag, src := range map[string]string{"script": "script-src", "style": "style-src"} {
			i, j := strings.Index(body, "<"+tag+">"), strings.Index(body, "</"+tag+">")
			if i < 0 || j < i {
				t.Fatalf("no inline <%s>", tag)
			}
			sum := sha256.Sum256([]byte(body[i+len(tag)+2 : j]))
			want := src + " 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
			if !strings.Contains(csp, want) {
				t.Errorf("CSP %q lacks %q", csp, want)
			}
		}
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("CSP %q", csp)
		}
		// No external fetch: no src/href attribute, no URL but the SVG
		// namespace name, and data goes in as text only.
		if regexp.MustCompile(`(?i)\b(src|href)\s*=`).MatchString(body) {
			t.Error("the page loads something by src/href")
		}
		if urls := regexp.MustCompile(`https?://[^"' ]+`).FindAllString(body, -1); len(urls) != 1 || urls[0] != "http://www.w3.org/2000/svg" {
			t.Errorf("URLs in the page: %v", urls)
		}
		if strings.Contains(body, "innerHTML") || strings.Contains(body, "insertAdjacentHTML") || strings.Contains(body, "document.write") {
			t.Error("the page inserts HTML")
		}
	}
	if rec, _ := serve(h, "HEAD", "/ui/", ""); rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("HEAD /ui/: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	if rec, _ := serve(h, "POST", "/ui/", "x"); rec.Code != 405 {
		t.Errorf("POST /ui/: %d", rec.Code)
	}
	// The data stays behind the tokens.
	if rec, _ := serve(h, "GET", "/v1/status", ""); rec.Code != 401 {
		t.Errorf("/v1/status without a token: %d", rec.Code)
	}
}
