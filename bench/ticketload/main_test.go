package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/bench/internal/load"
	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc's resolver and balancer goroutines end a moment after Close.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
	)
}

func startTicketd(t *testing.T) string {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.Cluster.Raft.DataDir = filepath.Join(t.TempDir(), "data")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.RunWith(ctx, cfg, node.Deps{Listener: ln}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"-ticketd", "http://x", "-clients", "0"}, {"-ticketd", "http://x", "extra"}, {"-nope"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d", args, code)
		}
	}
}

// The fill mode grants exactly N distinct tickets: the server's own list
// (not the tool's count) holds fill-00000000 … fill-00000299, each held by
// "filler" with lease 250 and a distinct token.
func TestFill(t *testing.T) {
	url := startTicketd(t)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"-ticketd", url, "-fill", "300", "-clients", "8", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r struct{ Granted, Errors int }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Granted != 300 || r.Errors != 0 {
		t.Fatalf("%s %v", out.String(), err)
	}
	l := listTickets(t, url, "")
	if len(l.Tickets) != 300 || l.Truncated {
		t.Fatalf("the server holds %d tickets (truncated %v), want the 300 the tool reports", len(l.Tickets), l.Truncated)
	}
	tokens := map[uint64]bool{}
	for i, tk := range l.Tickets { // sorted by name
		if want := fmt.Sprintf("fill-%08d", i); tk.Name != want || tk.Holder != "filler" || tk.LeaseS != 250 || tokens[tk.Token] {
			t.Fatalf("ticket %d is %+v; want %s held by filler, lease 250, a token of its own", i, tk, want)
		}
		tokens[tk.Token] = true
	}
}

// listTickets asks the server itself what it holds.
func listTickets(t *testing.T, url, prefix string) *wire.TicketList {
	t.Helper()
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.List(context.Background(), prefix, 10000) // the server's MaxListLimit
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return l
}

// serverCount reads one sample of the server's /metrics.
func serverCount(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// The compare mode against a real single-member etcd (Debian's
// etcd-server) started here on loopback: both targets complete cycles and
// the ratios are printed.
// startEtcd starts a single-member etcd on loopback and returns its
// client URL (the test skips without the binary).
func startEtcd(t *testing.T) string {
	t.Helper()
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd not installed (apt-get install etcd-server)")
	}
	dir := t.TempDir()
	cp, pp := freePort(t), freePort(t)
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	cmd := exec.Command(etcd, "--name", "t", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "t="+peer, "--logger", "zap", "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return client
}

// Hand-off mode (issue 14 item 7): every client contends for one lock on
// both targets; both complete hand-offs without errors, ticketd's server
// granted as many as it released (all through blocking grants), and the
// ticket is free after the run.
func TestHandoffWithEtcd(t *testing.T) {
	client := startEtcd(t)
	url := startTicketd(t)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, []string{"-ticketd", url, "-etcd", strings.TrimPrefix(client, "http://"), "-clients", "8", "-handoff",
		"-duration", "700ms", "-warmup", "100ms", "-rounds", "1", "-json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatal(err)
	}
	if sum["etcd_cycles_per_s"].(float64) <= 0 || sum["ticketd_cycles_per_s"].(float64) <= 0 || sum["errors"].(float64) != 0 ||
		!strings.HasPrefix(sum["mode"].(string), "hand-off") {
		t.Fatalf("summary %v", sum)
	}
	grants := serverCount(t, url, `ticket_ops_total{op="grant",result="ok"}`)
	releases := serverCount(t, url, `ticket_ops_total{op="release",result="ok"}`)
	if grants < 1 || releases != grants {
		t.Fatalf("the server counts %v grants and %v releases", grants, releases)
	}
	if l := listTickets(t, url, load.HandoffName); len(l.Tickets) != 0 {
		t.Fatalf("the contended ticket is still held after the run: %+v", l.Tickets[0])
	}
}

func TestCompareWithEtcd(t *testing.T) {
	client := startEtcd(t)
	url := startTicketd(t)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, []string{"-ticketd", url, "-etcd", strings.TrimPrefix(client, "http://"), "-clients", "4",
		"-duration", "700ms", "-warmup", "100ms", "-rounds", "1", "-json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatal(err)
	}
	if sum["etcd_cycles_per_s"].(float64) <= 0 || sum["ticketd_cycles_per_s"].(float64) <= 0 || sum["throughput_ratio"] == nil || sum["errors"].(float64) != 0 {
		t.Fatalf("summary %v", sum)
	}
	// The server's side: it granted and released at least the cycles the
	// tool measured (warm-up cycles come on top), as many releases as
	// grants (no cycle is cut off mid-way), and holds no bench ticket.
	measured := 0.0
	for _, l := range lines[:len(lines)-1] {
		var r struct {
			Target string
			Cycles float64
		}
		if err := json.Unmarshal([]byte(l), &r); err == nil && r.Target == "ticketd" {
			measured += r.Cycles
		}
	}
	grants := serverCount(t, url, `ticket_ops_total{op="grant",result="ok"}`)
	releases := serverCount(t, url, `ticket_ops_total{op="release",result="ok"}`)
	if measured < 1 || grants < measured || releases != grants {
		t.Fatalf("the tool measured %v ticketd cycles; the server counts %v grants and %v releases", measured, grants, releases)
	}
	if l := listTickets(t, url, "bench-"); len(l.Tickets) != 0 {
		t.Fatalf("the server still holds %d bench tickets after the run, e.g. %+v", len(l.Tickets), l.Tickets[0])
	}
}

// Issue 13 item 5: check mode against a live (single) node: the workload
// runs, every op is checked, no violation; bad usage exits 2.
func TestCheckMode(t *testing.T) {
	url := startTicketd(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"check", "--addrs", url, "--duration", "3s", "--tickets", "4", "--prefix", "chk-", "--lease", "1", "--seed", "7"}, &out, &errb)
	t.Log(out.String(), errb.String())
	if code != 0 || !strings.Contains(out.String(), "violations 0") {
		t.Fatalf("check exited %d:\n%s%s", code, out.String(), errb.String())
	}
	var ops int
	if _, err := fmt.Sscanf(out.String()[strings.Index(out.String(), "ops checked"):], "ops checked %d", &ops); err != nil || ops < 20 {
		t.Fatalf("ops checked %d (%v): the workload did not run", ops, err)
	}
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range list.Tickets {
		if !strings.HasPrefix(tk.Name, "chk-") {
			t.Fatalf("check touched %q, outside its prefix", tk.Name)
		}
	}
	for _, args := range [][]string{{"check"}, {"check", "--addrs", url, "--prefix", "/bad"}, {"check", "--addrs", url, "--lease", "251"}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v exited %d, want 2", args, code)
		}
	}
}

// A server that grants every ticket to everyone: check mode finds the
// double holders, exits 1 and writes the HTML and the history JSON.
func TestCheckModeCatchesDoubleGrant(t *testing.T) {
	var mu sync.Mutex
	var tok uint64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/status":
			fmt.Fprint(w, `{"delta_ms":500}`)
		case strings.HasSuffix(r.URL.Path, "/grant"), strings.HasSuffix(r.URL.Path, "/renew"):
			mu.Lock()
			tok++
			n := tok
			mu.Unlock()
			fmt.Fprintf(w, `{"name":"x","holder":"h","token":%d,"lease_s":1,"remaining_ms":1000}`, n)
		case strings.HasSuffix(r.URL.Path, "/release"):
			fmt.Fprint(w, `{"released":true}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":"not_found","message":"no"}`)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	var out bytes.Buffer
	code := run(context.Background(), []string{"check", "--addrs", srv.URL, "--duration", "1s", "--tickets", "2", "--lease", "1", "--out", dir}, &out, io.Discard)
	t.Log(out.String())
	if code != 1 || !strings.Contains(out.String(), "violation: overlap") {
		t.Fatalf("check of a double-granting server exited %d:\n%s", code, out.String())
	}
	for _, f := range []string{"history.json", "ticket-*.html"} {
		if m, _ := filepath.Glob(filepath.Join(dir, f)); len(m) == 0 {
			t.Errorf("%s not written in %s", f, dir)
		}
	}
}
