package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// --debug.pprof refuses a non-loopback address (exit 2, naming the flag)
// before the node starts.
func TestPprofLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":6060", "192.0.2.1:6060", "example.com:6060", "nonsense"} {
		code, _, errs := runCmd(t, "--data-dir", t.TempDir(), "--http", "127.0.0.1:0", "--debug.pprof", addr)
		if code != 2 || !strings.Contains(errs, "--debug.pprof") {
			t.Errorf("--debug.pprof %q: exit %d, stderr %q; want 2 naming the flag", addr, code, errs)
		}
	}
}

// The listener serves the profiles while on, turns block profiling on,
// and stop ends it (no goroutine left: goleak in TestMain).
func TestPprofServesAndStops(t *testing.T) {
	addr, stop, err := startPprof("127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get("http://" + addr + "/debug/pprof/block?debug=1")
	if err != nil {
		stop()
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "contention") {
		t.Errorf("block profile: %d %q", resp.StatusCode, body)
	}
	tr.CloseIdleConnections()
	stop()
	if _, err := hc.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Error("pprof still answers after stop")
	}
}
