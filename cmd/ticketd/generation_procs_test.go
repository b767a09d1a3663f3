package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node/api/wire"
)

// waitRun waits (up to d) for a run of s after the first skip runs to have
// exited, and returns it.
func (s *supervised) waitRun(skip int, d time.Duration) (*procRun, error) {
	deadline := time.Now().Add(d)
	for {
		if h := s.history(); len(h) > skip {
			select {
			case <-h[skip].exited:
				return h[skip], nil
			default:
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: run %d did not exit within %v (exit statuses %v)", s.name, skip+1, d, s.exitCodes())
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a condition with a deadline
	}
}

// SPEC §3.4 "Replacement by a new generation", through real processes
// under a supervisor that restarts a node exiting 1 and leaves one
// exiting 2 (systemd's Restart=on-failure, RestartPreventExitStatus=2):
// each node reaches the real dev agent through its own TCP proxy.
//   - node-2's proxy holds every answer 200 ms (past max_rtt_ms 125, a
//     whole burst): FAILED (rtt); the process exits 1 by itself, its
//     supervisor starts it again once the proxy is fair, and it comes back
//     as node-2~2 — its retired dir kept aside — a voter of a healthy
//     cluster of three, at node-2's mesh address: every node has a fixed
//     mesh port, as in deploy/demo.sh, compose and k8s, so node-2's
//     address in the Raft configuration is node-2~2's (node-2 removed
//     first: Raft refuses a duplicate address), and Raft RPCs for node-2
//     are never answered by node-2~2.
//   - then the proxy flips a MAC character (a lying agent): FAILED (mac),
//     exit 1, and the restart refuses with exit 2 naming the reason and
//     the next step, leaving its data dir where it is.
func TestSupervisedFailedNodeComesBackAsNextGeneration(t *testing.T) {
	if os.Getenv(binDirEnv) != "" && !hasConfigKey(t, procBinary(t, "ticketd"), "auto_replace") {
		t.Skip("this ticketd has no cluster.auto_replace (SPEC §3.4)")
	}
	proxies := map[string]*agentProxy{}
	meshPorts := clustertest.Ports(t, len(clusterNames))
	sc := startSuperClusterWith(t, nil, func(name, agent string) []string {
		p := startAgentProxy(t, agent, 200*time.Millisecond)
		proxies[name] = p
		return []string{"--clock.agent_addr", p.addr(), "--cluster.internode.bind_port", strconv.Itoa(meshPorts[slices.Index(clusterNames, name)])}
	})
	const victim = "node-2"
	s := sc.nodes[victim]
	runs := len(s.history())
	meshAddr := memberAddress(sc.members(), victim)
	if want := "127.0.0.1:" + strconv.Itoa(meshPorts[slices.Index(clusterNames, victim)]); meshAddr != want {
		t.Fatalf("%s's Raft address %q, want its fixed mesh address %s", victim, meshAddr, want)
	}

	// A slow exchange on every try of a burst: FAILED (rtt), exit 1.
	proxies[victim].every.Store(1)
	r, err := s.waitRun(runs-1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	proxies[victim].every.Store(0)
	if r.code != 1 || r.failed != "rtt" {
		t.Fatalf("%s exited %d after FAILED %q, want 1 after FAILED rtt; last lines:\n%s", victim, r.code, r.failed, lastLines(r.p, 10))
	}
	t.Logf("%s FAILED (rtt) and exited 1 after %v", victim, r.at.Sub(r.started).Round(time.Millisecond))
	back := time.Now()
	var last clusterState
	if err := sc.waitHealthy(90*time.Second, func(st clusterState) { last = st }); err != nil {
		t.Fatal(err)
	}
	if id := last.ids[victim]; id != victim+"~2" {
		t.Fatalf("%s came back as %q, want %s~2 (ids %v)", victim, id, victim, last.ids)
	}
	if !slices.Contains(last.voters, victim+"~2") || slices.Contains(last.voters, victim) {
		t.Fatalf("voters %v: want %s~2 in %s's place", last.voters, victim, victim)
	}
	t.Logf("healthy with %s~2 a voter %v after the exit (voters %v)", victim, time.Since(back).Round(time.Millisecond), last.voters)
	aside, err := filepath.Glob(filepath.Join(sc.dir, victim, "retired-"+victim+"-*"))
	if err != nil || len(aside) != 1 {
		t.Fatalf("retired dirs kept aside: %v, %v", aside, err)
	}
	ms := sc.members()
	var listed bool
	for _, m := range ms {
		if m.ID == victim+"~2" {
			listed = m.Name == victim && m.Generation == 2 && m.Suffrage == "voter"
		}
	}
	if !listed {
		t.Fatalf("/v1/cluster/members does not list %s~2 as generation 2 of %s, a voter: %+v", victim, victim, ms)
	}
	if got := memberAddress(ms, victim+"~2"); got != meshAddr {
		t.Fatalf("%s~2's Raft address %q, want %s's %s (the same fixed mesh port)", victim, got, victim, meshAddr)
	}

	// A lying agent: FAILED (mac), exit 1, and the restart refuses (2).
	runs = len(s.history())
	proxies[victim].flipMAC.Store(true)
	r, err = s.waitRun(runs-1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 1 || r.failed != "mac" {
		t.Fatalf("%s exited %d after FAILED %q, want 1 after FAILED mac", victim, r.code, r.failed)
	}
	r, err = s.waitRun(runs, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	log := r.p.logText()
	if r.code != 2 || !strings.Contains(log, "mac") || !strings.Contains(log, "lied or is misconfigured") || !strings.Contains(log, "next:") {
		t.Fatalf("the restart after FAILED mac exited %d; want 2 naming the reason and the next step; log:\n%s", r.code, lastLines(r.p, 10))
	}
	if !s.isHeld() {
		t.Fatalf("%s's supervisor restarts it after exit 2", victim)
	}
	if again, _ := filepath.Glob(filepath.Join(sc.dir, victim, "retired-*")); len(again) != 1 {
		t.Fatalf("the refused restart moved something aside: %v", again)
	}
	if _, err := os.Stat(filepath.Join(sc.dir, victim, "data", "retired")); err != nil {
		t.Fatalf("the refused restart lost the retired marker: %v", err)
	}
	t.Logf("%s: exit statuses %v", victim, s.exitCodes())
}

// memberAddress is the Raft (mesh) address of the member id in ms, or "".
func memberAddress(ms []wire.Member, id string) string {
	for _, m := range ms {
		if m.ID == id {
			return m.Address
		}
	}
	return ""
}
