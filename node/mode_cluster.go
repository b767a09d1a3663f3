package node

import (
	"context"
	"errors"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// clusterMode is cluster mode (SPEC §5) as the node's mode: the cluster
// half, *cluster.Node (package node/cluster), behind the mode interface.
// The cluster reaches the node only through clusterHost.
type clusterMode struct {
	n  *server
	cl *cluster.Node
}

// newClusterMode builds the cluster half from the node's config: its
// identity, trust map and gossip secret are loaded here, so a
// misconfiguration refuses the start (a *config.Error naming the key).
func newClusterMode(n *server, tuning *cluster.Tuning) (clusterMode, error) {
	var failed <-chan struct{}
	if f, ok := n.guard.(interface{ Failed() <-chan struct{} }); ok {
		failed = f.Failed()
	}
	cl, err := cluster.New(cluster.Options{
		Config: n.cfg.Cluster, DeltaMs: n.cfg.Clock.DeltaMs, StalenessMs: n.cfg.Clock.StalenessMs,
		ProbeInterval: time.Duration(n.cfg.Clock.ProbeIntervalMs) * time.Millisecond,
		ForwardWaits:  n.cfg.API.MaxWaiters + n.cfg.API.MaxWatchers,
		Dir:           n.dir, FSM: n.fsm, Notify: n.notify, Stage: n.stage, Wall: n.wall, ClockFailed: failed,
		Started: n.started, Logger: n.log, Registerer: n.reg, Host: clusterHost{n},
		ProposeWait: proposeWait, Tuning: tuning,
	})
	if err != nil {
		return clusterMode{}, err
	}
	return clusterMode{n: n, cl: cl}, nil
}

func (clusterMode) name() string { return "cluster" }

// open is cluster start-up after clock_check: the mesh, Raft over it and
// gossip.
func (m clusterMode) open() (*consensus.Raft, error) { return m.cl.Open() }

// close ends the gossip (without a leave message for a voter that keeps
// its vote) and closes the mesh.
func (m clusterMode) close() { m.cl.Close() }

// run serves forwarded requests and peer-status queries and drives
// bootstrap until ctx ends.
func (m clusterMode) run(ctx context.Context, cons *consensus.Raft) { m.cl.Run(ctx, cons) }

func (m clusterMode) noteStop() { m.cl.NoteStop() }

// handOff transfers a leader's leadership to another voter, then lets the
// proposals it caught in flight learn their entries' fates (shutdown.go).
func (m clusterMode) handOff() {
	m.cl.HandOff()
	m.n.settleProposals()
}

// lead runs the reconciler and the retire watch (SPEC §3.4) while this
// node leads.
func (m clusterMode) lead(ctx context.Context) { m.cl.Lead(ctx) }

// clockFailed retires this NodeId, hands leadership over and shuts Raft
// down (node/cluster/failed.go); the run loop then returns the clock
// error.
func (m clusterMode) clockFailed(reason string, _ *clockhealth.Error) error {
	m.cl.ClockFailed(reason)
	return m.n.failedExit()
}

func (clusterMode) refuseClock(err error) *api.Error { return refuseClusterClock(err) }
func (m clusterMode) reused() <-chan struct{}        { return m.cl.Reused() }
func (m clusterMode) reusedExit() error              { return m.cl.ReusedExit() }
func (m clusterMode) removed() *api.Error            { return m.cl.Removed() }

// readiness: from raft on, uniform and then a known leader decide
// (node/cluster/ready.go).
func (m clusterMode) readiness(cur stage.Stage, reason string) (stage.Stage, string, string, bool) {
	switch cur {
	case stage.Raft, stage.Replay, stage.Uniform, stage.Ready, stage.HoldOff:
		s, r, detail := m.cl.Readiness(reason)
		return s, r, detail, true
	}
	return cur, reason, "", false
}

func (m clusterMode) liveness() (string, string) { return m.cl.Liveness() }

func (m clusterMode) leader() string {
	id, _ := m.cl.Leader()
	return id
}

func (m clusterMode) gossipOnly() bool               { return !m.cl.Eligible() }
func (m clusterMode) route() (cluster.Tickets, bool) { return m.cl.Route() }
func (m clusterMode) forwardsTo() string             { return m.cl.ForwardsTo() }
func (m clusterMode) aliveNodes() int                { return m.cl.AliveNodes() }
func (m clusterMode) keepAliveEntries() bool         { return m.cl.KeepAliveEntries() }
func (m clusterMode) members() (wire.Members, error) { return m.cl.Members() }

func (m clusterMode) health(ctx context.Context) (wire.ClusterHealth, error) {
	return m.cl.Health(ctx)
}

func (m clusterMode) transfer(ctx context.Context, to string) error { return m.cl.Transfer(ctx, to) }
func (m clusterMode) remove(ctx context.Context, id string) error   { return m.cl.Remove(ctx, id) }

func (m clusterMode) replace(ctx context.Context, old, repl string) (wire.Replaced, error) {
	return m.cl.Replace(ctx, old, repl)
}

func (m clusterMode) notLeader(what string) error { return m.cl.AdminNotLeader(what) }
func (m clusterMode) reload(cfg Config)           { m.cl.Reload(cfg.Cluster) }

// refuseClusterClock is clockRefusal in cluster mode: a FAILED clock retires the
// NodeId (no restart hold-off applies), and the 503 says so.
func refuseClusterClock(err error) *api.Error {
	var ce *clockhealth.Error
	if !errors.As(err, &ce) {
		return clockRefusal(err)
	}
	return api.Unavailable(string(stage.Failed), string(ce.Reason),
		"clock health FAILED (%s): %v; this NodeId is retired and will not serve again: bring a new node with a new NodeId", ce.Reason, err)
}

// clusterHost is the node as the cluster half's cluster.Host: the few
// things it asks of the node, and nothing else of *server.
type clusterHost struct{ n *server }

func (h clusterHost) Consensus() *consensus.Raft { return h.n.cons.Load() }

func (h clusterHost) Propose(ctx context.Context, data []byte) (ticket.Result, error) {
	return h.n.propose(ctx, data)
}

func (h clusterHost) Serving() error               { return h.n.serving() }
func (h clusterHost) CheckClock() error            { return h.n.guard.Check() }
func (h clusterHost) ClockErr() *clockhealth.Error { return h.n.clockErr() }

func (h clusterHost) ClockSample() (uint64, int64) {
	if h.n.mon == nil {
		return 0, h.n.wall.Now().UnixMilli() // an injected guard: as fresh as its answer
	}
	st := h.n.mon.Status()
	var at int64
	if st.LastSample != nil && st.LastSample.AtUnixMs > 0 {
		at = st.LastSample.AtUnixMs
	}
	return st.BoundMs, at
}

func (h clusterHost) Local() cluster.Tickets { return localOps{s: h.n} }

func (h clusterHost) ReserveWait(watch bool, caller string) (func(), error) {
	return h.n.waits.reserve(watch, caller)
}

func (h clusterHost) BindWait(ctx context.Context) (context.Context, context.CancelFunc) {
	return h.n.waits.bind(ctx)
}

// localOps are this node's own ticket operations, as the leader: what a
// forwarded request runs.
type localOps struct{ s *server }

func (l localOps) Write(ctx context.Context, w api.Write) (api.Written, error) {
	return l.s.writeLocal(ctx, w)
}

func (l localOps) Get(ctx context.Context, name string) (ticket.Ticket, bool, error) {
	return l.s.getLocal(ctx, name)
}

func (l localOps) Watch(ctx context.Context, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error) {
	return l.s.watchLocal(ctx, name, index, wait)
}

func (l localOps) List(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	return l.s.listLocal(ctx, prefix, limit)
}
