package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// -failover-kinds name the fresh-cluster targets (clock runs elsewhere),
// and the section's targets are judged at their boundaries: kill -9,
// ticketd's median ≤ 0.25× etcd's and its max ≤ 1 s; machine lost,
// ticketd's median ≤ etcd's.
func TestFailoverTargetsAndVerdicts(t *testing.T) {
	it := itemOptions{sections: []string{"failover"}, failoverKinds: []string{"clock", "ticketd", "etcd-lost"}}
	if got := failoverTargets(it); !slices.Equal(got, []foTarget{{"ticketd", false}, {"etcd", true}}) {
		t.Fatalf("targets %+v", got)
	}
	if got := failoverTargets(itemOptions{sections: []string{"load"}, failoverKinds: allFailoverKinds}); len(got) != 0 {
		t.Fatalf("targets without the failover section: %+v", got)
	}
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	verdict := func(tk, ek, tl, el []time.Duration) string {
		fos := []failoverResult{
			{Target: "ticketd ×3", Kind: kindKill, Trials: tk}, {Target: "etcd ×3", Kind: kindKill, Trials: ek},
			{Target: "ticketd ×3", Kind: kindLost, Trials: tl}, {Target: "etcd ×3", Kind: kindLost, Trials: el},
		}
		return strings.Join(failoverTargetsMet(fos), "\n")
	}
	got := verdict(ms(200, 250, 1000), ms(900, 1000, 1100), ms(800, 1000), ms(1000, 1000))
	for _, want := range []string{"median 0.25× etcd's (250ms vs 1s; target ≤ 0.25×) met, its max 1s (target ≤ 1s) met", "machine lost: ticketd's median 1.00× etcd's (1s vs 1s; target ≤ 1.00×) met"} {
		if !strings.Contains(got, want) {
			t.Errorf("at the boundaries: %q lacks %q", got, want)
		}
	}
	got = verdict(ms(200, 251, 1001), ms(900, 1000, 1100), ms(1001), ms(1000))
	if strings.Count(got, "**missed**") != 3 {
		t.Errorf("just past every boundary: %q", got)
	}
	if got := verdict(ms(100), nil, nil, ms(1000)); got != "" {
		t.Errorf("verdicts without both systems: %q", got)
	}
	if l := (failoverResult{Target: "etcd ×3"}).label(); l != "etcd ×3 kill -9" {
		t.Errorf("an older report's row: %q", l)
	}
}

// A trial's timeline takes the survivors' lines between the failure and
// the success: the end of the session to the failed leader (and how it
// ended), the crash failover's and Raft's election lines with their
// numbers; other lines, other peers' sessions and later lines are left.
func TestTrialTimeline(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 2, 15, 28, 12, 42_400_000, time.UTC) // the failure: 12.0424
	lines := map[string]string{
		"node-1": `time=2026-12-02T15:28:12.041Z level=INFO msg="mesh: session closed" component=mesh mesh_node=node-1 peer_id=node-2 session=1 peer_gone=true
time=2026-12-02T15:28:12.044Z level=INFO msg="mesh: session closed" component=mesh mesh_node=node-1 peer_id=node-2 session=2 peer_gone=true
time=2026-12-02T15:28:12.044Z level=INFO msg="mesh: session closed" component=mesh mesh_node=node-1 peer_id=node-3 session=3 peer_gone=true
time=2026-12-02T15:28:12.183Z level=INFO msg="crash failover: the mesh session to the leader ended and it stayed silent: heartbeat timeout shortened to raft.crash_detect_ms" component=cluster leader=node-2 silent_ms=150 crash_detect_ms=100 rank=0 turn=first
time=2026-12-02T15:28:12.186Z level=WARN msg="heartbeat timeout reached, starting election: last-leader-addr=127.0.0.1:7951 last-leader-id=node-2" component=raft
time=2026-12-02T15:28:12.186Z level=INFO msg="entering candidate state: node=\"Node at 127.0.0.1:7950 [Candidate]\" term=3" component=raft
time=2026-12-02T15:28:12.186Z level=ERROR msg="failed to make requestVote RPC: target=\"{Voter node-2 127.0.0.1:7951}\" error=\"refused\" term=3" component=raft
time=2026-12-02T15:28:12.192Z level=INFO msg="pre-vote campaign failed, waiting for election timeout: term=2 tally=1 refused=2 votesNeeded=2" component=raft
time=2026-12-02T15:28:13.400Z level=INFO msg="leader ready" term=4`,
		"node-3": `time=2026-12-02T15:28:12.043Z level=INFO msg="mesh: session closed" component=mesh mesh_node=node-3 peer_id=node-2 session=2 peer_gone=false
time=2026-12-02T15:28:12.192Z level=WARN msg="rejecting pre-vote request since we have a leader: from=127.0.0.1:7950 leader=127.0.0.1:7951 leader-id=node-2" component=raft
time=2026-12-02T15:28:13.219Z level=INFO msg="election won: term=3 tally=2" component=raft
time=2026-12-02T15:28:13.232Z level=INFO msg="leader ready" term=3 applied_index=8 tickets=0 delta_ms=12000 replay=12ms`,
	}
	var procs []*proc
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		p := &proc{name: "fo1-ticketd-ticketd3-" + n, log: filepath.Join(dir, n+".log")}
		if err := os.WriteFile(p.log, []byte(lines[n]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	ps := probeStats{Started: 120, Winner: 118, WinnerAt: 1180 * time.Millisecond, GrantedAt: 1240 * time.Millisecond, Via: "node-1", Errors: map[string]probeErr{"no leader": {3, 1150 * time.Millisecond}}}
	tl := trialTimeline(1, procs, 1, at, 1265*time.Millisecond, ps)
	want := "trial 1 (node-2 failed, 1.265s): +1 node-3 mesh session to the leader ended (peer_gone=false); +2 node-1 mesh session to the leader ended (peer_gone=true);" +
		" +141 node-1 timeouts shortened (silent 150 ms, rank 0, turn first); +144 node-1 heartbeat timeout; +144 node-1 candidate (term 3);" +
		" +150 node-1 pre-vote lost (2 refused); +150 node-3 refused a pre-vote: still follows the old leader;" +
		" +1177 node-3 elected (term 3); +1190 node-3 leader ready; probe 118 of 120 (started +1180 via node-1, granted +1240) succeeded first; 3 failed (the last +1150): no leader"
	if got := tl.line(); got != want {
		t.Errorf("timeline\n got %s\nwant %s", got, want)
	}
	if briefProbeErr(errors.New("grant failover-probe-17: no leader")) != "grant failover-probe-N: no leader" {
		t.Error("a probe's name stays in its error")
	}
}
