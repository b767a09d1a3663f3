package cluster

// The clock-failure lifecycle of a cluster node (SPEC §3.4). A node whose
// clock goes FAILED after clock_check:
//
//  1. has already stopped proposing (every Grant, Renew and Expire checks
//     the guard first) and answers 503 with the reason (stage failed);
//  2. writes the `retired` marker (with its NodeId) into its data dir: a
//     restart there comes back as the next generation or refuses
//     (node/generation.go); the single-node FAILED marker is not used in
//     cluster mode;
//  3. if it leads: records its own NodeId retired in the replicated state
//     (OpRetire, which does not depend on the clock), transfers leadership
//     to a voter whose gossip shows a healthy clock, bounded by
//     transferTimeout; then (leader or not) shuts Raft down;
//  4. advertises Retired and its FAILED clock in gossip, and exits 1 (the
//     run loop returns the clock error; it leaves the gossip pool).
//
// Any leader also records as retired every member whose gossip shows a
// FAILED clock or the Retired flag (a follower that failed): metadata that
// member's own identity key signed (membership admits nothing else, SPEC
// §5 "Identity"), never another node's claim about it. The
// reconciler treats every NodeId the replicated state holds retired as
// retired: it is never added or promoted and is removed from the
// configuration. A retired NodeId that comes back (a new data dir under an
// old name) is refused at the reconciler, which never adds it, and logged.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// Bounds of the failure path: each step ends by itself, so a FAILED node
// always reaches Raft shutdown.
const (
	retireProposeTimeout = time.Second     // the failing leader's own OpRetire
	transferTimeout      = 2 * time.Second // LeadershipTransferToServer
	advertiseTimeout     = time.Second     // gossip UpdateMeta after FAILED
)

// lifecycle is a cluster node's clock-failure state (Node.life).
type lifecycle struct {
	retired atomic.Bool   // this node's clock FAILED after clock_check
	nudge   chan struct{} // membership changed: the leader's retire watch looks again
	reused  chan struct{} // closed: the cluster holds this NodeId retired (generation.go)

	mu     sync.Mutex
	logged map[string]bool // retired NodeIds seen trying to rejoin (logged once each)
}

// poke wakes the leader's retire watch (never blocks).
func (l *lifecycle) poke() {
	if l.nudge == nil {
		return
	}
	select {
	case l.nudge <- struct{}{}:
	default:
	}
}

// initLifecycle prepares cl.life; loadCluster's caller runs it once.
func (cl *Node) initLifecycle() {
	cl.life.nudge = make(chan struct{}, 1)
	cl.life.reused = make(chan struct{})
	cl.life.logged = map[string]bool{}
}

// clockFailed is cluster mode's reaction to a FAILED clock, on the run
// loop's goroutine (the stage is already failed). It returns once Raft is
// shut down and the FAILED clock advertised; the run loop then ends and
// the process exits 1 (SPEC §3.4: its supervisor starts it again).
func (cl *Node) ClockFailed(reason string) {
	cl.life.retired.Store(true)
	if err := cl.opts.Dir.WriteRetirement(datadir.Retirement{Reason: reason, NodeID: cl.cfg.Name}); err != nil {
		cl.log.Error("clock FAILED but the retired marker could not be written: never start this node on this data dir again; bring a new NodeId",
			"dir", cl.opts.Dir.Path(), "err", err)
	} else if cl.cfg.AutoReplace {
		cl.log.Error("clock FAILED: this NodeId is retired; the process exits once Raft is shut down, and a restart comes back as the next generation (cluster.auto_replace)",
			"marker", datadir.RetiredFile, "node_id", cl.cfg.Name, "reason", reason)
	} else {
		cl.log.Error("clock FAILED: this NodeId is retired; a restart on this data dir is refused (cluster.auto_replace is off: bring a new NodeId)",
			"marker", datadir.RetiredFile, "node_id", cl.cfg.Name, "reason", reason)
	}
	if rr := cl.raft(); rr != nil {
		if rr.State() == raft.Leader {
			cl.retireSelf()
			cl.handOffToHealthy(cl.host.Consensus(), rr)
		}
		// consensus' Shutdown: bounded against an RPC stuck on a peer.
		if err := cl.host.Consensus().Shutdown(); err != nil {
			cl.log.Warn("raft shutdown after FAILED", "err", err)
		} else {
			cl.log.Info("raft shut down after FAILED")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), advertiseTimeout)
	defer cancel()
	if cl.mem != nil {
		if err := cl.mem.UpdateMeta(ctx); err != nil {
			cl.log.Warn("advertising the FAILED clock", "err", err)
		}
	}
}

// retireSelf records this leader's NodeId as retired before it hands
// leadership over. The entry carries no time, so a FAILED clock does not
// taint it; if it fails the next leader records it from gossip.
func (cl *Node) retireSelf() {
	id := cl.cfg.Name
	ctx, cancel := context.WithTimeout(context.Background(), retireProposeTimeout)
	defer cancel()
	if err := cl.proposeRetire(ctx, id); err != nil {
		cl.log.Warn("recording this NodeId retired failed; the next leader records it from gossip", "node_id", id, "err", err)
	}
}

// proposeRetire appends OpRetire{id}.
func (cl *Node) proposeRetire(ctx context.Context, id string) error {
	data, err := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpRetire, NodeID: id})
	if err != nil {
		return err
	}
	res, err := cl.host.Propose(ctx, data)
	if err != nil {
		return err
	}
	switch res.Code {
	case ticket.CodeOK:
		cl.log.Warn("NodeId recorded retired in the replicated state", "node_id", id)
	case ticket.CodeExisting:
	default:
		return res.Err
	}
	return nil
}

// transferTarget picks the voter to hand leadership to: another voter of
// the configuration, alive in gossip with a healthy clock and not retired;
// the highest raft.priority wins, then the lowest NodeId.
func (cl *Node) transferTarget(rr *raft.Raft) (raft.Server, bool) {
	f := rr.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	members := map[string]membership.Member{}
	for _, m := range cl.mem.Members() {
		members[m.ID] = m
	}
	var best raft.Server
	bestPrio, found := int32(0), false
	for _, s := range f.Configuration().Servers {
		m, ok := members[string(s.ID)]
		if s.Suffrage != raft.Voter || string(s.ID) == cl.cfg.Name || !ok || !healthyPeer(m) || cl.opts.FSM.IsRetired(m.ID) {
			continue
		}
		p := m.Meta.RaftPriority
		if !found || p > bestPrio || p == bestPrio && s.ID < best.ID {
			best, bestPrio, found = s, p, true
		}
	}
	return best, found
}

// healthyPeer: alive, clock healthy, not advertising retired.
func healthyPeer(m membership.Member) bool {
	return m.State == membership.StateAlive && m.Meta.ClockState == membership.ClockHealthy && !m.Meta.Retired
}

// handOffToHealthy hands leadership to a healthy voter, waiting at most
// transferTimeout; the caller shuts Raft down whatever the outcome (which
// also ends a transfer still running).
func (cl *Node) handOffToHealthy(c *consensus.Raft, rr *raft.Raft) {
	target, ok := cl.transferTarget(rr)
	if !ok {
		cl.log.Error("clock FAILED on the leader and no voter advertises a healthy clock: shutting Raft down without a transfer")
		return
	}
	took, err := transferLeadership(c, target, transferTimeout)
	switch {
	case errors.Is(err, errTransferTimeout):
		cl.log.Error("leadership transfer timed out; shutting Raft down anyway", "to", target.ID, "timeout", transferTimeout)
	case err != nil:
		cl.log.Error("leadership transfer failed; shutting Raft down anyway", "to", target.ID, "err", err)
	default:
		cl.log.Warn("leadership transferred away from the FAILED clock", "to", target.ID, "took", took.Round(time.Millisecond))
	}
}

// withRetired marks the members the replicated state holds retired (the
// reconciler then never adds or promotes them, and removes them), and logs
// once each a retired NodeId that is back in gossip without saying so.
func (cl *Node) withRetired(ms []reconcile.Member) []reconcile.Member {
	for i := range ms {
		if !cl.opts.FSM.IsRetired(ms[i].ID) {
			continue
		}
		if !ms[i].Retired && ms[i].Alive {
			cl.refuseRejoin(ms[i].ID)
		}
		ms[i].Retired = true
	}
	return ms
}

func (cl *Node) refuseRejoin(id string) {
	cl.life.mu.Lock()
	first := !cl.life.logged[id]
	cl.life.logged[id] = true
	cl.life.mu.Unlock()
	if first {
		cl.log.Warn("refusing a retired NodeId that tries to join again: it is never added to Raft; bring a new NodeId", "node_id", id)
	}
}

// retireWatch runs while this node leads: on start and on every membership
// change it records as retired each member whose signed gossip metadata
// shows a FAILED clock or the Retired flag.
func (cl *Node) retireWatch(ctx context.Context) {
	for {
		for _, m := range cl.mem.Members() {
			if m.ID == cl.cfg.Name || cl.opts.FSM.IsRetired(m.ID) {
				continue
			}
			if m.Meta.ClockState != membership.ClockFailed && !m.Meta.Retired {
				continue
			}
			if err := cl.proposeRetire(ctx, m.ID); err != nil {
				cl.log.Warn("recording a FAILED member retired", "node_id", m.ID, "err", err)
			} else if r := cl.runner(); r != nil {
				r.Trigger()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-cl.life.nudge:
		}
	}
}

// checkRemoved latches stage.Removed once the replicated state holds this
// running node's NodeId retired without its own clock having FAILED (`ticketctl
// cluster replace` retired it, or the leader believed a FAILED claim of its
// own key): it serves nothing again, so it does not forward either. It
// reports whether the node is removed.
func (cl *Node) checkRemoved() bool {
	if cur, _ := cl.opts.Stage.Get(); cur == stage.Removed {
		return true
	}
	if cl.life.retired.Load() || !cl.opts.FSM.IsRetired(cl.cfg.Name) {
		return false
	}
	cl.opts.Stage.Set(stage.Removed, reasonRemoved)
	if cur, _ := cl.opts.Stage.Get(); cur != stage.Removed {
		return false // FAILED or stopping meanwhile
	}
	cl.log.Error("this NodeId was retired by the cluster (ticketctl cluster replace): it serves no client again; stop this node — the node that replaced it serves",
		"node_id", cl.cfg.Name)
	return true
}

// Removed is the 503 of a node whose NodeId was retired while it ran
// (latched: checkRemoved), or nil.
func (cl *Node) Removed() *api.Error {
	if cl.checkRemoved() {
		return cl.removedError()
	}
	return nil
}

// removedError is the 503 of a removed node (stage.Removed).
func (cl *Node) removedError() *api.Error {
	return api.Unavailable(string(stage.Removed), reasonRemoved,
		"this node's NodeId %s was retired and removed from the cluster (ticketctl cluster replace): it serves nothing, forwards nothing; stop it (another node took its place)", cl.cfg.Name)
}
