package consensus

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// retainSnaps is how many snapshots the store keeps.
const retainSnaps = 2

// Timing are Raft's timeouts.
type Timing struct {
	Heartbeat   time.Duration
	Election    time.Duration
	LeaderLease time.Duration
	Commit      time.Duration
}

// SingleNodeTiming elects at once: one voter, no network.
func SingleNodeTiming() Timing {
	return Timing{Heartbeat: 200 * time.Millisecond, Election: 200 * time.Millisecond,
		LeaderLease: 100 * time.Millisecond, Commit: 5 * time.Millisecond}
}

// ClusterTiming suits voters on one private network (loopback tests to a
// LAN): hashicorp/raft's defaults scaled to a LAN's latency.
func ClusterTiming() Timing {
	return Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond,
		LeaderLease: 250 * time.Millisecond, Commit: 5 * time.Millisecond}
}

// Options open a Raft.
type Options struct {
	Dir     *datadir.Dir
	FSM     *ticket.FSM
	LocalID string
	// Transport carries Raft's RPCs; nil: an in-memory transport (a single
	// node that talks to nobody).
	Transport raft.Transport
	// Bootstrap, when set, is the configuration to bootstrap with if the
	// data dir holds no Raft state. Nil: never bootstrap here (wait to be
	// added, or call BootstrapCluster later).
	Bootstrap *raft.Configuration
	// RequireVoter refuses a data dir whose configuration does not make
	// LocalID a voter (single node: the dir belongs to another NodeId).
	RequireVoter bool
	Timing       Timing // zero fields: SingleNodeTiming's
	// Snapshot settings (cluster.raft.*); zero: raft's defaults.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// Notify receives leadership changes (raft.Config.NotifyCh).
	Notify chan bool
	Logger *slog.Logger
	// LogStore is cluster.raft.log_store: LogStoreAuto (or ""), LogStoreWAL
	// or LogStoreBolt (logstore.go).
	LogStore string
	// Unblock, if set, is called once when Raft's shutdown has not finished
	// slowShutdown after Close began: it should close what Raft's
	// goroutines may be blocked on (cluster mode: the mesh sessions), so
	// a replication or heartbeat RPC stuck on a peer returns and the
	// shutdown completes instead of hanging the stop.
	Unblock func()
}

// Raft is an open Raft instance and its stores.
type Raft struct {
	r       *raft.Raft
	store   logStore
	trans   raft.Transport
	snaps   *raft.FileSnapshotStore
	logPath string // raft.db or wal/, as errors name the log
	ownsTr  bool
	dir     *datadir.Dir
	closed  atomic.Bool    // p.r stays set after Close: readers may still hold it (it answers ErrRaftShutdown)
	waiters sync.WaitGroup // future readers started by wait
	wmu     sync.Mutex     // orders waiters.Add against Close's Wait
	closing bool           // under wmu: Close started, wait refuses new readers
	// shut is closed once Raft's shutdown has ended every goroutine of
	// it: a future not answered by then never will be, and every reader
	// of one ends (endsAtShutdown).
	shut     chan struct{}
	shutOnce sync.Once
	// ends (under wmu): the in-place waits of Propose in progress
	// (waitInPlace), each ended when shut closes.
	ends    map[*waitEnd]struct{}
	unblock func()
	log     *slog.Logger

	fsm       *ticket.FSM
	transfers transferGuard // one leadership transfer per voter per term (transfer.go)
	// down is closed when Shutdown begins: a wait for an entry's fate
	// ends then (fate.go).
	down     chan struct{}
	downOnce sync.Once
	// proposing counts ProposeWithin calls in progress (Settle); fating,
	// those waiting for their entry's fate (Close lets them end first).
	proposing, fating gauge
	fateN             fateCounters
	fateBound         time.Duration // 0: fateWait (tests shorten or lengthen it)
}

// slowShutdown is how long Close waits for Raft's shutdown before it calls
// Options.Unblock.
const slowShutdown = 3 * time.Second

// Open verifies and restores the newest snapshot, opens the log, bootstraps
// when told to and there is no state, and starts Raft.
func Open(o Options) (_ *Raft, err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	raftLog := &hclogWriter{log: log.With("component", "raft")}
	p := &Raft{dir: o.Dir, unblock: o.Unblock, log: log, shut: make(chan struct{}), fsm: o.FSM, down: make(chan struct{})}
	// A data dir that has run before has its log (raft.db or wal/) and
	// snapshots/ (the snapshot store creates it on the first open): the log
	// missing beside it was deleted, and starting would forget every
	// acknowledged write.
	held, err := heldStore(o.Dir)
	if err != nil {
		return nil, err
	}
	if o.Dir.Exists(datadir.SnapshotsDir) && held == "" {
		return nil, &datadir.Error{File: o.Dir.Path(), Err: fmt.Errorf("the Raft log (%s or %s/) is missing but snapshots/ exists (this data dir has run before): "+
			"refusing to start (it would forget acknowledged writes and reuse fencing tokens); see docs/data-dir.md", datadir.RaftDBFile, datadir.WALDir)}
	}
	kind, err := chooseStore(o.Dir, held, o.LogStore)
	if err != nil {
		return nil, err
	}
	p.logPath = storePath(o.Dir, kind)
	hwm, err := readHighWater(o.Dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	p.snaps, err = raft.NewFileSnapshotStore(o.Dir.Path(), retainSnaps, raftLog)
	if err != nil {
		return nil, &datadir.Error{File: o.Dir.Snapshots(), Err: err}
	}
	restoreStart := time.Now()
	snap, positioned, err := restoreNewestSnapshot(o.Dir, p.snaps, o.FSM)
	if err != nil {
		return nil, err
	}
	if snap != nil {
		log.Info("restored snapshot", "id", snap.ID, "index", snap.Index, "tickets", o.FSM.Len(), "delta_ms", o.FSM.Delta(),
			"size_bytes", snap.Size, "took_ms", time.Since(restoreStart).Milliseconds())
		if !positioned {
			log.Warn("the newest snapshot was written before snapshot format 3: its meta.json could be checked only against itself, state.bin's size and checksum and (single node) the log, not against a position in state.bin; the next snapshot carries it",
				"id", snap.ID)
		}
	}
	var emptyTail string
	var tailSize int64
	if kind == LogStoreWAL && o.Dir.Exists(datadir.WALDir) {
		if emptyTail, tailSize, err = emptyWALTail(o.Dir.WAL()); err != nil {
			return nil, err
		}
	}
	fence := &installFence{}
	p.store, err = openStore(o.Dir, kind, hclog.New(&hclog.LoggerOptions{Name: "wal", Output: raftLog, Level: hclog.Info}), fence)
	if err != nil {
		return nil, err
	}
	if err := checkLog(p.logPath, p.store, snap, hwm, o.RequireVoter); err != nil {
		return nil, err
	}
	if o.RequireVoter && snap != nil {
		if err := checkSnapshotInLog(o.Dir, p.store, snap); err != nil {
			return nil, err
		}
	}
	if snap != nil {
		fence.noteSnapshot(snap.Index, snap.Term) // after the checks above, which read the log as stored
	}
	if emptyTail != "" {
		if err := preallocate(emptyTail, tailSize); err != nil {
			return nil, err
		}
		log.Warn("the WAL's tail segment was empty (a crash between its creation and its preallocation; nothing was acknowledged in it): preallocated it", "file", emptyTail)
	}
	p.trans = o.Transport
	if p.trans == nil {
		_, p.trans = raft.NewInmemTransport(raft.ServerAddress(o.LocalID))
		p.ownsTr = true
	}
	rc := raftConfig(&o, raftLog)
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("consensus: raft config: %w", err)
	}
	existing, err := raft.HasExistingState(p.store, p.store, p.snaps)
	if err != nil {
		return nil, &datadir.Error{File: p.logPath, Err: err}
	}
	if !existing && o.Bootstrap != nil {
		if err := raft.BootstrapCluster(rc, p.store, p.store, p.snaps, p.trans, *o.Bootstrap); err != nil {
			return nil, &datadir.Error{File: p.logPath, Err: fmt.Errorf("bootstrap: %w", err)}
		}
		log.Info("bootstrapped", "node_id", o.LocalID, "voters", len(o.Bootstrap.Servers), "data_dir", o.Dir.Path())
	}
	cache, err := raft.NewLogCache(1024, p.store)
	if err != nil {
		return nil, err
	}
	p.r, err = raft.NewRaft(rc, &raftFSM{t: o.FSM, fence: fence}, cache, p.store, &positionStore{SnapshotStore: p.snaps, fsm: o.FSM, log: p.store, fence: fence}, p.trans)
	if err != nil {
		return nil, &datadir.Error{File: p.logPath, Err: err}
	}
	fence.raft.Store(p.r)
	if !o.RequireVoter {
		return p, nil
	}
	servers, err := p.Servers()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range servers {
		if s.ID == rc.LocalID && s.Suffrage == raft.Voter {
			return p, nil
		}
		ids = append(ids, string(s.ID))
	}
	return nil, &IdentityError{DataDir: o.Dir.Path(), Name: o.LocalID, Members: ids}
}

func raftConfig(o *Options, out io.Writer) *raft.Config {
	t, d := o.Timing, SingleNodeTiming()
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(o.LocalID)
	rc.LogOutput, rc.LogLevel = out, "INFO"
	rc.NotifyCh = o.Notify
	rc.NoSnapshotRestoreOnStart = true // restoreNewestSnapshot did it, without fall-back
	// BatchApplyCh stays off: with a buffered applyCh a future still in the
	// buffer when Raft shuts down is never answered and its waiter hangs
	// (seen when the FSM stops during replay). Group commit works without
	// it: the leader drains every Apply blocked on the channel into one
	// StoreLogs (one fsync'd bolt transaction), up to MaxAppendEntries.
	rc.MaxAppendEntries = 512
	if o.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = o.SnapshotThreshold
	}
	if o.SnapshotInterval > 0 {
		rc.SnapshotInterval = o.SnapshotInterval
	}
	if o.TrailingLogs > 0 {
		rc.TrailingLogs = o.TrailingLogs
	}
	rc.HeartbeatTimeout = or(t.Heartbeat, d.Heartbeat)
	rc.ElectionTimeout = or(t.Election, d.Election)
	rc.LeaderLeaseTimeout = or(t.LeaderLease, d.LeaderLease)
	rc.CommitTimeout = or(t.Commit, d.Commit)
	return rc
}

func or(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

// Raft returns the underlying instance (status, configuration changes).
func (p *Raft) Raft() *raft.Raft { return p.r }

// LogPath is the log store's path, raft.db or wal/ (for error messages).
func (p *Raft) LogPath() string { return p.logPath }

// Servers returns the current configuration.
func (p *Raft) Servers() ([]raft.Server, error) {
	f := p.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, mapErr(err)
	}
	return f.Configuration().Servers, nil
}

// BootstrapCluster bootstraps a running Raft that has no state (cluster
// bootstrap_expect: the voter set is known only after Open).
func (p *Raft) BootstrapCluster(conf raft.Configuration) error {
	return mapErr(p.r.BootstrapCluster(conf).Error())
}

// Shutdown stops Raft (every goroutine of it ended when it returns) and
// leaves the stores open for Close. When the shutdown is still waiting
// after slowShutdown — a goroutine stuck in an RPC to a silent peer — it
// calls Options.Unblock once. A second call returns at once. Every future
// Raft has not answered by then is answered ErrShutdown (endsAtShutdown).
func (p *Raft) Shutdown() error {
	p.downOnce.Do(func() { close(p.down) })
	defer p.shutOnce.Do(p.closeShut)
	sf := p.r.Shutdown()
	shut := make(chan error, 1)
	go func() { shut <- sf.Error() }() // returns once every Raft goroutine ended
	var err error
	select {
	case err = <-shut:
	case <-time.After(slowShutdown):
		p.log.Warn("raft shutdown still waiting on its goroutines; closing what they may be blocked on", "after", slowShutdown)
		if p.unblock != nil {
			p.unblock()
		}
		err = <-shut
	}
	if err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		return err
	}
	return nil
}

// closeShut closes shut and ends every in-place wait in progress; a wait
// that registers later sees shut closed (waitInPlace).
func (p *Raft) closeShut() {
	close(p.shut)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for w := range p.ends {
		w.end()
	}
}

// Close shuts Raft down, records the log's high-water mark and closes the
// stores.
func (p *Raft) Close() error {
	var errs []error
	if p.r != nil && p.closed.CompareAndSwap(false, true) {
		// Proposers whose leadership was lost wait for their entries'
		// fates while Raft runs: that first, bounded (fate.go).
		p.fating.wait(p.fateBoundOr())
		p.wmu.Lock()
		p.closing = true
		p.wmu.Unlock()
		if err := p.Shutdown(); err != nil {
			errs = append(errs, err)
		}
		// Shutdown has ended every future (endsAtShutdown): their
		// readers have ended or are ending now. The bound is for a
		// future endsAtShutdown could not reach (a hashicorp/raft that
		// changed its futures; TestEveryFutureEndsAtShutdown).
		done := make(chan struct{})
		go func() { p.waiters.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			errs = append(errs, errors.New("consensus: raft futures still unanswered 5 s after shutdown"))
		}
		if p.store != nil {
			var snapIndex uint64
			if metas, err := p.snaps.List(); err == nil && len(metas) > 0 {
				snapIndex = metas[0].Index
			}
			errs = append(errs, writeHighWater(p.dir, p.store, snapIndex))
		}
	}
	if c, ok := p.trans.(io.Closer); ok && p.ownsTr {
		errs = append(errs, c.Close())
	}
	if p.store != nil {
		errs = append(errs, p.store.Close())
		p.store = nil
	}
	return errors.Join(errs...)
}
