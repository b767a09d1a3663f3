package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node"
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

// The fill mode grants exactly N distinct tickets.
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
}

// The compare mode against a real single-member etcd (Debian's
// etcd-server) started here on loopback: both targets complete cycles and
// the ratios are printed.
func TestCompareWithEtcd(t *testing.T) {
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
}
