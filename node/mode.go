package node

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
)

// mode is what a single node and a cluster node (SPEC §5) do differently.
// The node asks its mode, never which mode it runs in: singleMode
// (below) is one durable Raft voter on an in-memory transport, clusterMode
// (mode_cluster.go) the cluster half.
type mode interface {
	name() string // /v1/status's mode

	// open opens Raft after clock_check; close ends what open started,
	// after Raft closed (it runs even when open failed).
	open() (*consensus.Raft, error)
	close()
	// run runs beside Raft until ctx ends (the cluster's bootstrap,
	// forward server and watches); it returns once they ended.
	run(ctx context.Context, cons *consensus.Raft)
	// noteStop runs at a stop before Raft closes; handOff at a graceful
	// stop, before in-flight requests finish.
	noteStop()
	handOff()
	// lead runs while this node leads, beside the expiry loop, until ctx
	// ends with the term.
	lead(ctx context.Context)

	// clockFailed is the reaction to a FAILED clock after clock_check
	// (the stage is already failed): nil keeps the node serving 503s
	// until it is stopped; an error is what the run loop returns.
	clockFailed(reason string, ce *clockhealth.Error) error
	// refuseClock is a ClockGuard refusal as the API's 503.
	refuseClock(err error) *api.Error
	// reused is closed once the cluster holds this NodeId retired;
	// reusedExit is then what the run loop returns.
	reused() <-chan struct{}
	reusedExit() error
	// removed is the 503 of a node whose NodeId was retired while it ran,
	// or nil.
	removed() *api.Error

	// readiness is the mode's part of /readyz at stage cur: the stage,
	// reason and detail, and whether they already account for
	// leadership (a cluster follower is ready while a leader is known).
	readiness(cur stage.Stage, reason string) (stage.Stage, string, string, bool)
	// liveness is why /livez fails beyond the clock ("" when live).
	liveness() (reason, detail string)
	leader() string   // the leader this node knows, "" for none
	gossipOnly() bool // a gossip-only client: no Raft, no log

	// route is the leader's ticket operations when this node forwards
	// to it; forwardsTo names that leader ("" when it serves them itself).
	route() (cluster.Tickets, bool)
	forwardsTo() string
	// aliveNodes counts the cluster's alive members, this node included.
	aliveNodes() int
	// keepAliveEntries: this leader may propose KeepAlive entries (entry
	// version 4) — every server of its configuration reads them.
	keepAliveEntries() bool

	// The admin API (SPEC §5): the members, health, leadership
	// transfer, removal and replacement, and the refusal of an admin
	// command on a follower (nil: the mode has no other node to name).
	members() (wire.Members, error)
	health(ctx context.Context) (wire.ClusterHealth, error)
	transfer(ctx context.Context, to string) error
	remove(ctx context.Context, id string) error
	replace(ctx context.Context, old, repl string) (wire.Replaced, error)
	notLeader(what string) error

	// reload applies what may change while running (SIGHUP).
	reload(cfg Config)
}

// singleMode is one durable Raft voter without gossip (cluster.enabled
// false): it forwards nothing, has no other voter and holds off after a
// FAILED clock (SPEC §4).
type singleMode struct {
	n  *server
	tr raft.Transport // Deps.Transport; nil: in-memory
}

func (singleMode) name() string { return "single-node" }

// open opens Raft on the data dir: a single voter that bootstraps itself
// when the dir holds no state.
func (s singleMode) open() (*consensus.Raft, error) {
	n := s.n
	id := n.cfg.Cluster.Name
	addr := raft.ServerAddress(id)
	if s.tr != nil {
		addr = s.tr.LocalAddr()
	}
	return consensus.Open(consensus.Options{
		Dir: n.dir, FSM: n.fsm, LocalID: id, Transport: s.tr, RequireVoter: true,
		Bootstrap:         &raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: addr}}},
		Timing:            consensus.SingleNodeTiming(),
		SnapshotThreshold: n.cfg.Cluster.Raft.SnapshotThreshold, SnapshotInterval: n.cfg.Cluster.Raft.SnapshotInterval,
		TrailingLogs: n.cfg.Cluster.Raft.TrailingLogs, LogStore: n.cfg.Cluster.Raft.LogStore, Notify: n.notify, Logger: n.log,
	})
}

func (singleMode) close()                               {}
func (singleMode) run(context.Context, *consensus.Raft) {}
func (singleMode) noteStop()                            {}
func (singleMode) handOff()                             {}
func (singleMode) lead(context.Context)                 {}

// clockFailed records the failure durably, so that a restart holds off
// (SPEC §4); the node then serves 503s until stopped.
func (s singleMode) clockFailed(reason string, ce *clockhealth.Error) error {
	n := s.n
	if ce == nil {
		return nil
	}
	if _, err := n.hold.markFailed(ce, n.wall.Now()); err != nil {
		n.log.Error("clock FAILED but the FAILED marker could not be written: a restart will NOT hold off; keep this node stopped for 250 s + Δ",
			"dir", n.dir.Path(), "err", err)
		return nil
	}
	n.log.Error("clock FAILED: recorded in the data dir; a restart refuses Grant and Expire for 250 s + Δ",
		"marker", datadir.FailedFile, "reason", reason)
	return nil
}

func (singleMode) refuseClock(err error) *api.Error { return clockRefusal(err) }
func (singleMode) reused() <-chan struct{}          { return nil }
func (singleMode) reusedExit() error                { return nil }
func (singleMode) removed() *api.Error              { return nil }

func (singleMode) readiness(cur stage.Stage, reason string) (stage.Stage, string, string, bool) {
	return cur, reason, "", false
}

func (singleMode) liveness() (string, string) { return "", "" } // a single node judges only its clock

func (s singleMode) leader() string {
	if r := s.n.raft(); r != nil {
		_, id := r.LeaderWithID()
		return string(id)
	}
	return ""
}

func (singleMode) gossipOnly() bool               { return false }
func (singleMode) route() (cluster.Tickets, bool) { return nil, false }
func (singleMode) forwardsTo() string             { return "" }
func (singleMode) aliveNodes() int                { return 1 }
func (singleMode) notLeader(what string) error    { return nil }

// keepAliveEntries: a single node has no server of another release (its
// own data dir, restarted on an earlier release, stops at the first
// KeepAlive it replays: docs/operations.md, Upgrading).
func (singleMode) keepAliveEntries() bool { return true }

// members is the Raft configuration: this node.
func (s singleMode) members() (wire.Members, error) {
	r := s.n.raft()
	if r == nil {
		return wire.Members{}, api.Unavailable(string(stage.Starting), "starting", "raft is not open yet")
	}
	byID, err := cluster.ConfigMembers(r)
	if err != nil {
		return wire.Members{}, err
	}
	return wire.Members{Members: cluster.SortMembers(byID)}, nil
}

var errSingleNode = api.Refuse(api.KindConflict, "single_node",
	"this is a single-node cluster (cluster.enabled: false): there is no other voter")

// transfer has nowhere to go.
func (singleMode) transfer(context.Context, string) error { return errSingleNode }

// remove cannot remove the only voter.
func (s singleMode) remove(_ context.Context, id string) error {
	if id != s.n.cfg.Cluster.Name {
		return api.Refuse(api.KindNotFound, "not_found", "no member %q", id)
	}
	return errSingleNode
}

func (singleMode) replace(context.Context, string, string) (wire.Replaced, error) {
	return wire.Replaced{}, errSingleNode
}

func (s singleMode) reload(Config) {
	s.n.log.Info("reload: nothing to reload in single-node mode (restart to apply other changes)")
}

// health is the single node's answer: one voter, healthy while it
// serves, which tolerates no failure.
func (m singleMode) health(context.Context) (wire.ClusterHealth, error) {
	n := m.n
	id := n.cfg.Cluster.Name
	s := wire.ServerHealth{ID: id, Suffrage: "voter", Clock: n.clockState()}
	lead := false
	if r := n.raft(); r != nil {
		lead = r.State() == raft.Leader
		idx, zero, lag, term := r.LastIndex(), int64(0), uint64(0), r.CurrentTerm()
		s.LastIndex, s.LastContactMs, s.LogLag, s.Term = &idx, &zero, &lag, &term
	}
	s.Leader = lead
	if err := n.serving(); err != nil {
		s.Why = err.Error()
	}
	s.Healthy = s.Why == ""
	h := wire.ClusterHealth{Healthy: s.Healthy, Voters: 1, ServedBy: id, LeaderView: lead, Servers: []wire.ServerHealth{s}}
	if lead {
		h.Leader = id
	}
	if s.Healthy {
		h.HealthyVoters = 1
	}
	return h, nil
}

// clockState is this node's clock as the gossip metadata would say it.
func (n *server) clockState() string {
	err := n.guard.Check()
	var ce *clockhealth.Error
	switch {
	case err == nil:
		return membership.ClockHealthy.String()
	case errors.As(err, &ce):
		return membership.ClockFailed.String()
	case errors.Is(err, clockhealth.ErrClockCheck):
		return membership.ClockCheck.String()
	}
	return "unhealthy"
}
