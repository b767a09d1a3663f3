package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// agentProxy is a TCP proxy in front of a real agent that, per exchange
// (SPEC §1.1: one connection, one request line, one response line), can
// hold the agent's answer back or flip one character of its MAC.
type agentProxy struct {
	ln      net.Listener
	agent   string
	n       atomic.Int64 // answers relayed
	delayed atomic.Int64
	every   atomic.Int64 // hold back every every-th answer (0: none)
	hold    time.Duration
	flipMAC atomic.Bool
	wg      sync.WaitGroup
}

// startAgentProxy listens on a loopback port and relays to agent until
// the test ends.
func startAgentProxy(t *testing.T, agent string, hold time.Duration) *agentProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &agentProxy{ln: ln, agent: agent, hold: hold}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.relay(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *agentProxy) addr() string { return p.ln.Addr().String() }

// relay passes one exchange: the node's request line to the agent, the
// agent's response line back, held or altered as set.
func (p *agentProxy) relay(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req, err := bufio.NewReader(io.LimitReader(c, 257)).ReadBytes('\n')
	if err != nil {
		return
	}
	a, err := net.DialTimeout("tcp", p.agent, 5*time.Second)
	if err != nil {
		return
	}
	defer a.Close()
	a.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.Write(req); err != nil {
		return
	}
	resp, err := io.ReadAll(io.LimitReader(a, 512))
	if err != nil || len(resp) == 0 {
		return
	}
	if p.flipMAC.Load() {
		resp = flipMACChar(resp)
	}
	if k := p.every.Load(); k > 0 && (p.n.Load()+1)%k == 0 {
		p.delayed.Add(1)
		time.Sleep(p.hold) // the jitter under test: held after the agent read its clock
	}
	p.n.Add(1)
	c.Write(resp)
}

// flipMACChar changes the first character of a response line's MAC (its
// last field, 43 base64url characters) to another base64url character:
// the line stays well-formed, its MAC is wrong.
func flipMACChar(line []byte) []byte {
	out := bytes.Clone(line)
	i := bytes.LastIndexByte(bytes.TrimRight(out, "\n"), ' ') + 1
	if i <= 0 || i >= len(out) {
		return out
	}
	if out[i] == 'A' {
		out[i] = 'B'
	} else {
		out[i] = 'A'
	}
	return out
}

// SPEC §3.4's last rule, §4's hold-off, §3.1 (issue 24 item 6): a
// single-node ticketd at the default clock keys against the real
// `tckclk-agent --dev` through a TCP proxy. The proxy holds every 4th
// answer 200 ms (past max_rtt_ms 125) for 5 s: the burst tries each again
// and the node serves throughout (TestBlackBoxJitteryAgent is the long
// run of this rule). Then the proxy flips a character of every MAC:
// FAILED (mac) at once. A single node is never replaced by a new
// generation: stopped, it exits 1 (a supervisor restarts it); started
// again on the same data dir it holds off (stage hold_off, no Grant)
// under its own NodeId, its data dir where it was with its FAILED marker,
// nothing moved aside.
func TestSingleNodeFailedHoldsOffNoReplacement(t *testing.T) {
	t.Parallel()
	secretFile := writeSecret(t, bbSecret)
	px := startAgentProxy(t, startDevAgent(t, secretFile), 200*time.Millisecond)
	px.every.Store(4)
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	cfg := clockConfig(t, dir, px.addr(), secretFile, "  dev_reference: true\n")
	p, ok := startProc(t, "--config", cfg)
	if !ok {
		t.Fatalf("ticketd exited before listening: %v\n%s", <-p.done, p.logText())
	}
	if err := p.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	const run = 5 * time.Second
	grants := serveThroughJitter(t, p, run, func() string { return fmt.Sprintf("%d answers, %d held", px.n.Load(), px.delayed.Load()) })
	slow, incomplete := checkTriedAgain(t, p, px.delayed.Load())
	t.Logf("%v of jitter through the proxy: %d answers, %d held 200 ms; %v slow and %v incomplete exchanges tried again; %d grants served",
		run, px.n.Load(), px.delayed.Load(), slow, incomplete, grants)

	px.every.Store(0)
	start := time.Now()
	px.flipMAC.Store(true)
	awaitFailedAtOnce(t, p, start, "the proxy began to alter the MACs")

	// Stopped (or gone by itself), it exits 1: a runtime failure.
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	if code, err := p.exitCodeOf(30 * time.Second); code != 1 {
		t.Fatalf("exit %d (%v) of a FAILED single node; want 1", code, err)
	}
	px.flipMAC.Store(false)
	again, ok := startProc(t, "--config", cfg)
	if !ok {
		t.Fatalf("the restart on the same data dir exited: %v\n%s", <-again.done, again.logText())
	}
	var st *wire.Status
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		st, err = again.c.Status(context.Background())
		if err == nil && st.Stage == "hold_off" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restart did not hold off: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond) // status poll with a deadline
	}
	if st.NodeID != "node-1" || st.Ready || st.HoldOffUntilUnixMs <= uint64(time.Now().UnixMilli()) {
		t.Fatalf("the restart: NodeId %q ready %v hold-off until %d; want node-1 holding off", st.NodeID, st.Ready, st.HoldOffUntilUnixMs)
	}
	var ce *client.Error
	if _, err := again.c.Grant(context.Background(), "during", "h", 1); !errors.As(err, &ce) || ce.Reason != "hold_off" {
		t.Fatalf("grant during the hold-off: %v", err)
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "data" {
			t.Errorf("%s beside the data dir: a single node never moves its data dir aside", e.Name())
		}
	}
	if !fileExists(filepath.Join(dir, "clock-failed")) {
		t.Error("the FAILED marker is gone from the data dir")
	}
}
