package consensus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// These tests drive one real follower (Open: the WAL behind its seal, the
// snapshot store behind positionStore) with the RPCs a leader sends, in
// the order that puts a snapshot install behind the end of the follower's
// log: a follower whose log ran ahead of what its leader knew (entries it
// stored whose acknowledgements were lost when it stopped) is sent the
// leader's snapshot, which ends inside that log.
//
// hashicorp/raft v1.7.3 installs it and, the WAL being a
// raft.MonotonicLogStore, empties the whole log while keeping its own
// record of the log's last entry (installSnapshot never calls setLastLog;
// hashicorp/raft#697). The next leader's AppendEntries matches that stale
// last entry, and its commit index sends processLogs to read entries after
// the snapshot that are gone: `panic: log not found`, the node down.
//
// A panic ends the test binary, so each scenario runs in a child process
// (runInChild) and the test reads the child's verdict and output.

const childEnv = "TCKCLK_CONSENSUS_CHILD"

// runInChild runs the calling test's body in a child process (this test
// binary, -test.run the test alone) unless this is that child, in which
// case it returns true and the caller runs the scenario. The parent fails
// with the child's output unless the child passed.
func runInChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		why := "failed"
		if bytes.Contains(out, []byte("panic: log not found")) {
			why = "crashed (hashicorp/raft's `panic: log not found`)"
		}
		t.Fatalf("the follower %s: %v\n%s", why, err, tail(out, 60))
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the child did not run the scenario:\n%s", tail(out, 60))
	}
	return false
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// behindFollower is an opened follower and a transport standing in for its
// leaders.
type behindFollower struct {
	p    *Raft
	fsm  *ticket.FSM
	lead *raft.InmemTransport
}

const entryNowMs = uint64(1_700_000_000_001)

// leaderLog is the entry at index i of the leaders' log: index 1 the
// configuration (the follower a non-voter: it never campaigns, it only
// answers), index 2 initialises Δ, every later one grants ticket "t<i>".
func leaderLog(t *testing.T, i, term uint64) *raft.Log {
	t.Helper()
	if i == 1 {
		return &raft.Log{Index: 1, Term: term, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(leadersConf)}
	}
	e := ticket.Entry{Op: ticket.OpInit, DeltaMs: 500}
	if i > 2 {
		e = ticket.Entry{Op: ticket.OpGrant, NowMs: entryNowMs, RecvMs: entryNowMs - 1, Name: fmt.Sprintf("t%d", i), Holder: "h", LeaseS: 200, ExpiryMs: entryNowMs + 200_000 + 500}
	}
	b, err := ticket.EncodeEntry(&e)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: b}
}

var leadersConf = raft.Configuration{Servers: []raft.Server{
	{Suffrage: raft.Voter, ID: "lead", Address: "lead"},
	{Suffrage: raft.Nonvoter, ID: "f", Address: "f"},
}}

func openBehindFollower(t *testing.T, trailing uint64) *behindFollower {
	t.Helper()
	dir, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	_, ft := raft.NewInmemTransportWithTimeout("f", time.Minute)
	_, lt := raft.NewInmemTransportWithTimeout("lead", time.Minute)
	lt.Connect("f", ft)
	fsm := ticket.New(500)
	p, err := Open(Options{Dir: dir, FSM: fsm, LocalID: "f", Transport: ft, Timing: ClusterTiming(), TrailingLogs: trailing, LogStore: LogStoreWAL, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
		lt.Close()
		ft.Close()
	})
	return &behindFollower{p: p, fsm: fsm, lead: lt}
}

func leaderHeader() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("lead"), Addr: []byte("lead")}
}

// appendEntries sends entries from..to (commands, of term entryTerm)
// after prev (of term prevTerm) under leader term term, committing commit.
func (b *behindFollower) appendEntries(t *testing.T, term, prev, prevTerm, from, to, entryTerm, commit uint64) *raft.AppendEntriesResponse {
	t.Helper()
	req := &raft.AppendEntriesRequest{RPCHeader: leaderHeader(), Term: term, PrevLogEntry: prev, PrevLogTerm: prevTerm, LeaderCommitIndex: commit}
	for i := from; i <= to; i++ {
		req.Entries = append(req.Entries, leaderLog(t, i, entryTerm))
	}
	var resp raft.AppendEntriesResponse
	if err := b.lead.AppendEntries("f", "f", req, &resp); err != nil {
		t.Fatalf("AppendEntries after %d: %v", prev, err)
	}
	return &resp
}

// installSnapshot sends, under leader term term, the leaders' state after
// the entries 1..index as a snapshot ending at index (of term lastTerm).
func (b *behindFollower) installSnapshot(t *testing.T, term, index, lastTerm uint64) (*raft.InstallSnapshotResponse, error) {
	t.Helper()
	model := ticket.New(500)
	for i := uint64(2); i <= index; i++ {
		if r := model.Apply(i, leaderLog(t, i, lastTerm).Data); r.Code != ticket.CodeOK {
			t.Fatalf("model apply %d: %+v", i, r)
		}
	}
	snap, err := model.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Raft = &ticket.Position{Index: index, Term: lastTerm, TakenMs: entryNowMs, ConfigurationIndex: 1, Servers: servers(leadersConf)}
	var payload bytes.Buffer
	if _, err := snap.WriteTo(&payload); err != nil {
		t.Fatal(err)
	}
	req := &raft.InstallSnapshotRequest{
		RPCHeader: leaderHeader(), SnapshotVersion: 1, Term: term, Leader: []byte("lead"),
		LastLogIndex: index, LastLogTerm: lastTerm,
		Configuration: raft.EncodeConfiguration(leadersConf), ConfigurationIndex: 1,
		Size: int64(payload.Len()),
	}
	var resp raft.InstallSnapshotResponse
	err = b.lead.InstallSnapshot("f", "f", req, &resp, &payload)
	return &resp, err
}

// waitApplied waits until the follower's state machine has applied the
// command at index (and so holds the tickets t3..t<index>).
func (b *behindFollower) waitApplied(t *testing.T, index uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the follower applying index %d", index), 20*time.Second, func() bool { return b.fsm.Index() == index })
	if n := b.fsm.Len(); n != int(index-2) {
		t.Fatalf("the follower holds %d tickets after applying index %d, want %d", n, index, index-2)
	}
}

// logCovers checks Raft's invariant: every entry after the last applied one,
// up to the last index Raft believes it has, is in the log store.
func (b *behindFollower) logCovers(t *testing.T) {
	t.Helper()
	applied, last := b.p.r.AppliedIndex(), b.p.r.LastIndex()
	for i := applied + 1; i <= last; i++ {
		var l raft.Log
		if err := b.p.store.GetLog(i, &l); err != nil {
			first, _ := b.p.store.FirstIndex()
			storeLast, _ := b.p.store.LastIndex()
			t.Fatalf("Raft has applied %d and believes its log ends at %d, but entry %d is not in the store (which holds %d..%d): %v",
				applied, last, i, first, storeLast, err)
		}
	}
}

// Raft §7's rule: a snapshot that ends inside the follower's log, at an
// entry of its term, replaces the log up to there and keeps the entries
// after it. The follower applies on from the snapshot, and the next
// leader's entries (after the follower's last one) commit and apply.
func TestInstallSnapshotInsideTheLog(t *testing.T) {
	if !runInChild(t) {
		return
	}
	b := openBehindFollower(t, 0)
	// Term 1: entries 1..20 stored, 1..10 committed.
	if r := b.appendEntries(t, 1, 0, 0, 1, 20, 1, 10); !r.Success {
		t.Fatalf("first AppendEntries refused: %+v", r)
	}
	b.waitApplied(t, 10)
	// Term 2: the leader knew the follower only up to 10 and had compacted
	// past it: it sends its snapshot, which ends at 15.
	if r, err := b.installSnapshot(t, 2, 15, 1); err != nil || !r.Success {
		t.Fatalf("InstallSnapshot at 15: %+v %v", r, err)
	}
	b.waitApplied(t, 15)
	// Term 3: a new leader finds the follower's log ending at 20 (the
	// follower says so) and goes on after it, committing 22.
	if r := b.appendEntries(t, 3, 20, 1, 21, 22, 3, 22); !r.Success {
		t.Fatalf("AppendEntries after 20 refused: %+v", r)
	}
	b.waitApplied(t, 22)
	b.logCovers(t)
	if first, _ := b.p.store.FirstIndex(); first != 15 {
		t.Fatalf("after the install the log starts at %d, want 15 (the snapshot's last entry, kept so a leader can match it)", first)
	}
}

// A snapshot older than the follower's own state and log (its log starts
// after the snapshot's end: nothing in between) is refused before anything
// changes: installing it would take the state machine back to the
// snapshot, with the entries that lead from there to the log gone.
func TestInstallSnapshotBehindTheLogRefused(t *testing.T) {
	if !runInChild(t) {
		return
	}
	b := openBehindFollower(t, 2)
	if r := b.appendEntries(t, 1, 0, 0, 1, 20, 1, 20); !r.Success {
		t.Fatalf("first AppendEntries refused: %+v", r)
	}
	b.waitApplied(t, 20)
	if err := b.p.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if first, _ := b.p.store.FirstIndex(); first != 19 {
		t.Fatalf("after its own snapshot at 20 with 2 trailing entries the log starts at %d, want 19", first)
	}
	r, err := b.installSnapshot(t, 2, 15, 1)
	if err == nil || r.Success || !strings.Contains(err.Error(), "log") {
		t.Fatalf("a snapshot ending at 15, before the log (19..20): %+v %v; want it refused", r, err)
	}
	t.Logf("refused: %v", err)
	if b.fsm.Index() != 20 || b.p.r.AppliedIndex() != 20 {
		t.Fatalf("after the refusal the state machine is at %d, Raft applied %d; want 20 (unchanged)", b.fsm.Index(), b.p.r.AppliedIndex())
	}
	b.logCovers(t)
	if r := b.appendEntries(t, 3, 20, 1, 21, 22, 3, 22); !r.Success {
		t.Fatalf("AppendEntries after 20 refused: %+v", r)
	}
	b.waitApplied(t, 22)
	b.logCovers(t)
}

// A snapshot ending inside the log at an entry of another term (the
// follower's entries from there on were never committed): the log stays
// whole and true to Raft's record of it, so nothing reads a missing entry;
// the leader cannot match the follower's log after the snapshot (raft
// sends its snapshot again, hashicorp/raft#704) until a snapshot ends past
// that log, which is installed as usual.
func TestInstallSnapshotInsideTheLogOtherTerm(t *testing.T) {
	if !runInChild(t) {
		return
	}
	b := openBehindFollower(t, 0)
	if r := b.appendEntries(t, 1, 0, 0, 1, 20, 1, 10); !r.Success {
		t.Fatalf("first AppendEntries refused: %+v", r)
	}
	b.waitApplied(t, 10)
	if r, err := b.installSnapshot(t, 2, 15, 2); err != nil || !r.Success {
		t.Fatalf("InstallSnapshot at 15: %+v %v", r, err)
	}
	b.waitApplied(t, 15)
	b.logCovers(t)
	if r := b.appendEntries(t, 2, 15, 2, 16, 16, 2, 16); r.Success {
		t.Fatalf("AppendEntries after 15 (term 2) accepted over the follower's entry 15 of term 1: %+v", r)
	}
	b.logCovers(t)
	if r, err := b.installSnapshot(t, 2, 25, 2); err != nil || !r.Success {
		t.Fatalf("InstallSnapshot at 25: %+v %v", r, err)
	}
	b.waitApplied(t, 25)
	b.logCovers(t)
	if r := b.appendEntries(t, 2, 25, 2, 26, 27, 2, 27); !r.Success {
		t.Fatalf("AppendEntries after the snapshot at 25 refused: %+v", r)
	}
	b.waitApplied(t, 27)
	b.logCovers(t)
}

// ackDropper is a node's transport that, while drop names a peer, delivers
// every AppendEntries to it and reports the answer lost (as when a
// follower stops with a batch in flight): the peer stores the entries,
// its leader's idea of its log stays behind. No pipelining, so every
// append goes through AppendEntries.
type ackDropper struct {
	*raft.InmemTransport
	drop atomic.Value // raft.ServerAddress, "" for none
}

func (a *ackDropper) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := a.InmemTransport.AppendEntries(id, target, args, resp)
	if d, _ := a.drop.Load().(raft.ServerAddress); err == nil && d == target {
		return errors.New("test: the answer was lost")
	}
	return err
}

func (a *ackDropper) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// countInstalls is a slog handler counting Raft's "Installed remote
// snapshot" lines before passing every record on.
type countInstalls struct {
	slog.Handler
	n *atomic.Int32
}

func (c countInstalls) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "Installed remote snapshot" {
		c.n.Add(1)
	}
	return c.Handler.Handle(ctx, r)
}

func (c countInstalls) WithAttrs(as []slog.Attr) slog.Handler {
	return countInstalls{c.Handler.WithAttrs(as), c.n}
}

func (c countInstalls) WithGroup(g string) slog.Handler {
	return countInstalls{c.Handler.WithGroup(g), c.n}
}

// With real hashicorp/raft leaders: three voters; the leader's
// acknowledgements from follower F are lost while F stores every entry
// (as when answers time out under load). The leader snapshots and
// compacts past where it believes F's log ends, so it sends F its
// snapshot; F then stores the entries after it, but those answers are
// lost too, and the leader's next AppendEntries follows the snapshot's
// last entry, which F's log (beginning after it) does not hold. Before the
// fix F refused it, the leader walked back and sent the same snapshot
// again — 370 times in one run — each install emptying F's log while
// Raft still counted the entries after the snapshot; once the third voter
// took over and matched that stale last entry, F crashed with `panic: log
// not found`. Now F installs the snapshot once, matches the leader's next
// AppendEntries (the snapshot standing for its last entry) and applies
// every entry under both leaders.
func TestInstallSnapshotInsideTheLogRealLeaders(t *testing.T) {
	if !runInChild(t) {
		return
	}
	timing := Timing{Heartbeat: time.Second, Election: time.Second, LeaderLease: 500 * time.Millisecond, Commit: 5 * time.Millisecond}
	names := []string{"n1", "n2", "n3"}
	conf := raft.Configuration{}
	for _, n := range names {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n), Address: raft.ServerAddress(n)})
	}
	trans := map[string]*ackDropper{}
	for _, n := range names {
		_, tr := raft.NewInmemTransportWithTimeout(raft.ServerAddress(n), time.Minute)
		trans[n] = &ackDropper{InmemTransport: tr}
		trans[n].drop.Store(raft.ServerAddress(""))
	}
	for _, a := range names {
		for _, b := range names {
			if a != b {
				trans[a].Connect(raft.ServerAddress(b), trans[b].InmemTransport)
			}
		}
	}
	nodes, fsms, installs := map[string]*Raft{}, map[string]*ticket.FSM{}, map[string]*atomic.Int32{}
	for _, n := range names {
		dir, err := datadir.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dir.Close() })
		fsms[n], installs[n] = ticket.New(500), &atomic.Int32{}
		log := slog.New(countInstalls{testLogger(t).Handler(), installs[n]}).With("node", n)
		p, err := Open(Options{Dir: dir, FSM: fsms[n], LocalID: n, Transport: trans[n], Timing: timing, TrailingLogs: 2, SnapshotThreshold: 1 << 20,
			LogStore: LogStoreWAL, Bootstrap: &conf, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n] = p
		t.Cleanup(func() {
			if err := p.Close(); err != nil {
				t.Error(err)
			}
			trans[n].Close()
		})
	}
	var leader string
	waitFor(t, "a leader", 30*time.Second, func() bool {
		for _, n := range names {
			if nodes[n].r.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	})
	var f, m string // the follower whose answers get lost, the other voter
	for _, n := range names {
		switch {
		case n == leader:
		case f == "":
			f = n
		default:
			m = n
		}
	}
	l := nodes[leader]
	next := uint64(2) // leaderLog's entries 2.. are commands (1 is a configuration)
	apply := func(k int) {
		t.Helper()
		for range k {
			if err := l.r.Apply(leaderLog(t, next, 0).Data, 10*time.Second).Error(); err != nil {
				t.Fatalf("apply on %s: %v", leader, err)
			}
			next++
		}
	}
	caughtUp := func(who string) func() bool {
		return func() bool { return nodes[who].r.LastIndex() == l.r.LastIndex() }
	}
	apply(5)
	waitFor(t, f+" storing the first entries", 20*time.Second, caughtUp(f))
	trans[leader].drop.Store(raft.ServerAddress(f))
	apply(20)
	waitFor(t, f+" storing the entries whose answers were lost", 60*time.Second, caughtUp(f))
	if err := l.r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot on %s: %v", leader, err)
	}
	snapIndex := l.r.LastIndex()
	apply(5)
	waitFor(t, f+" storing the entries after the snapshot", 60*time.Second, caughtUp(f))
	if first, _ := l.store.FirstIndex(); first <= 6 {
		t.Fatalf("the leader's log starts at %d: not compacted past what it knows of %s", first, f)
	}
	trans[leader].drop.Store(raft.ServerAddress(""))
	waitFor(t, leader+" installing its snapshot on "+f, 60*time.Second, func() bool { return installs[f].Load() > 0 })
	t.Logf("%s installed %s's snapshot ending at %d", f, leader, snapIndex)
	apply(3)
	waitFor(t, f+" catching up after the install", 60*time.Second, caughtUp(f))
	if err := l.r.LeadershipTransferToServer(raft.ServerID(m), raft.ServerAddress(m)).Error(); err != nil {
		t.Fatalf("leadership transfer to %s: %v", m, err)
	}
	l = nodes[m]
	leader = m
	apply(3)
	waitFor(t, f+" applying every entry under "+m, 60*time.Second, func() bool {
		return nodes[f].r.AppliedIndex() == l.r.AppliedIndex() && fsms[f].Index() == fsms[m].Index() && fsms[f].Len() == fsms[m].Len()
	})
	if n := fsms[f].Len(); n != int(next-3) { // t3..t<next-1>
		t.Fatalf("%s holds %d tickets, want %d", f, n, next-3)
	}
	if n := installs[f].Load(); n != 1 {
		t.Fatalf("%s installed a snapshot %d times, want once", f, n)
	}
}
