package api

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
)

// uiPage is the read-only status page served at /ui/: one file, no
// framework, no external fetch. It holds no data: it reads /v1/status,
// /v1/cluster/health (SPEC §3.5), /v1/tickets and, with the admin token
// the operator gives it, /v1/cluster/members, through the API and its
// usual bearer tokens (docs/operations.md, "The status page").
//
//go:embed ui/index.html
var uiPage []byte

// uiCSP allows exactly the page's own inline script and style (by hash)
// and fetches to this origin: nothing else loads or runs.
var uiCSP = "default-src 'none'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'" +
	"; script-src " + inlineHash(uiPage, "<script>", "</script>") +
	"; style-src " + inlineHash(uiPage, "<style>", "</style>")

// inlineHash is the CSP source ('sha256-…') of the first element between
// open and close in page.
func inlineHash(page []byte, open, close string) string {
	i := bytes.Index(page, []byte(open))
	j := bytes.Index(page, []byte(close))
	if i < 0 || j < i {
		return "'none'"
	}
	sum := sha256.Sum256(page[i+len(open) : j])
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

func serveUI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(uiPage) // the client went away: nothing to do
	}
}
