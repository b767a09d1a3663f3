package consensus

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// SPEC §5 "Crash failover": a follower's heartbeat timeout set below the
// leader lease (which raft.ReloadConfig refuses) takes effect at once — a
// follower that has heard from no leader stands for election within
// moments instead of after its 10 s heartbeat timeout — and goes back
// through ReloadConfig; a configuration invalid for another reason is
// refused and changes nothing. Fails on a hashicorp/raft upgrade that
// changes how it keeps its configuration (errRaftLayout).
func TestSetTimeoutsBelowLease(t *testing.T) {
	dir, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	_, tr := raft.NewInmemTransport("self")
	long := Timing{Heartbeat: 10 * time.Second, Election: 10 * time.Second, LeaderLease: 250 * time.Millisecond, Commit: 5 * time.Millisecond}
	r, err := Open(Options{Dir: dir, FSM: ticket.New(500), LocalID: "self", Transport: tr, Timing: long, Logger: testLogger(t),
		Bootstrap: &raft.Configuration{Servers: []raft.Server{
			{Suffrage: raft.Voter, ID: "self", Address: "self"},
			{Suffrage: raft.Voter, ID: "gone", Address: "gone"}, // never answers
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.SetTimeouts(50*time.Millisecond, 40*time.Millisecond); err == nil {
		t.Fatal("an election timeout below the heartbeat timeout was accepted")
	}
	if hb, el := r.Timeouts(); hb != long.Heartbeat || el != long.Election {
		t.Fatalf("a refused change left %v/%v", hb, el)
	}
	if st := r.Raft().State(); st != raft.Follower {
		t.Fatalf("state %v before the change, want Follower", st)
	}
	if err := r.SetTimeouts(50*time.Millisecond, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if hb, el := r.Timeouts(); hb != 50*time.Millisecond || el != 50*time.Millisecond {
		t.Fatalf("timeouts %v/%v, want 50ms/50ms", hb, el)
	}
	waitFor(t, "a candidate within moments of the shorter heartbeat timeout", 3*time.Second, func() bool {
		return r.Raft().State() == raft.Candidate
	})
	if err := r.SetTimeouts(long.Heartbeat, long.Election); err != nil {
		t.Fatal(err)
	}
	if hb, el := r.Timeouts(); hb != long.Heartbeat || el != long.Election {
		t.Fatalf("restored to %v/%v", hb, el)
	}
}
