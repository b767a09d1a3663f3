package ctl

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Issue 15: `ticketctl health` is the containers' HEALTHCHECK (scratch has
// no curl): exit 0 only when /readyz answers 200, for ticketd and for the
// agent's plain-text /readyz alike.
func TestHealthProbesReadyz(t *testing.T) {
	addr, _ := startNode(t)
	if r := runCtl(t, nil, "--addr", addr, "health"); r.code != 0 || !strings.Contains(r.out, `"status":"ok"`) && !strings.Contains(r.out, `"status": "ok"`) {
		t.Fatalf("health against a ready single node: %+v", r)
	}

	var status atomic.Int32
	status.Store(http.StatusServiceUnavailable)
	var paths atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths.Store(r.Method + " " + r.URL.Path)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("health sent a token")
		}
		w.WriteHeader(int(status.Load()))
		w.Write([]byte("not ready: synced=0, no healthy source\n"))
	}))
	defer srv.Close()
	r := runCtl(t, nil, "--addr", srv.URL, "--timeout", "2s", "health")
	if r.code != 1 || !strings.Contains(r.stderr, "(503)") || !strings.Contains(r.stderr, "synced=0") {
		t.Fatalf("health against a 503: %+v", r)
	}
	if got := paths.Load(); got != "GET /readyz" {
		t.Fatalf("health asked %v; want GET /readyz", got)
	}
	status.Store(http.StatusOK)
	if r := runCtl(t, nil, "--addr", srv.URL, "health"); r.code != 0 || r.out != "not ready: synced=0, no healthy source\n" {
		t.Fatalf("health against a 200: %+v", r)
	}
	status.Store(http.StatusMovedPermanently) // not 200: never healthy
	if r := runCtl(t, nil, "--addr", srv.URL, "health"); r.code != 1 {
		t.Fatalf("health against a 301: %+v", r)
	}
	if r := runCtl(t, nil, "--addr", srv.URL, "health", "extra"); r.code != 2 || !strings.Contains(r.stderr, "takes no arguments") {
		t.Fatalf("health with an argument: %+v", r)
	}
}
