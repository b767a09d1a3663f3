package cluster

// A data dir lost entirely (SPEC §3.4: a NodeId is never reused, "the
// cluster's replicated retired list"): a node that has never joined — its
// Raft configuration is empty — asks a peer holding Raft state for the
// highest retired generation of its own name (peerstatus
// OpRetiredGeneration; the peer reads the asker's name from the mesh
// session), and once more when a configuration reaches it (a retired
// voter's slot, still in the configuration, is replicated to whoever
// speaks for that NodeId now). If its NodeId is among the retired, it
// marks its data dir retired with that generation as the floor and exits
// 1: its supervisor starts it again, and node/generation.go moves the dir
// aside and comes back above the floor. With auto_replace off it does nothing here (the
// leader's reconciler refuses the reused NodeId and logs it).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/stage"
)

// reusedCheckInterval is how often a node that has not joined asks.
const reusedCheckInterval = time.Second

// ErrNodeIDRetired is what a node returns (exit status 1) when it learns
// from the cluster that its NodeId is retired: restarted, it comes back as
// the next generation.
var ErrNodeIDRetired = errors.New("node: this NodeId is retired in the cluster's replicated state")

// retiredGeneration is the highest generation of name this node's
// replicated state holds retired (0: none).
func (cl *Node) retiredGeneration(name string) int {
	top := 0
	for _, id := range cl.opts.FSM.Retired() {
		if nm, g, ok := identity.SplitGeneration(id); ok && nm == name {
			top = max(top, g)
		}
	}
	return top
}

// watchReusedID asks, every reusedCheckInterval until this node has
// joined (or ctx ends) and once more when it has, whether its NodeId is
// retired in the cluster; if so it marks the data dir and closes
// cl.life.reused.
func (cl *Node) watchReusedID(ctx context.Context, cons *consensus.Raft, newTicker clockhealth.TickerFunc) {
	if !cl.cfg.AutoReplace || !cl.Eligible() {
		return
	}
	name, gen, _ := identity.SplitGeneration(cl.cfg.Name)
	tk := newTicker("reused", reusedCheckInterval)
	defer tk.Stop()
	for {
		if s, err := cons.Servers(); err == nil && len(s) > 0 {
			// Joined, but not necessarily added: a retired voter keeps its
			// slot in the configuration (until a replacement takes it or
			// raft.dead_voter_grace passes), and the leader replicates to
			// the slot's NodeId wherever gossip places it now — this node,
			// possibly before any peer answered here (the first ask at
			// start finds no peer's state in gossip yet). Ask once more.
			if top, from := cl.askRetiredGeneration(ctx, name); top >= gen {
				cl.markReused(top, from)
			}
			return
		}
		if top, from := cl.askRetiredGeneration(ctx, name); top >= gen {
			cl.markReused(top, from)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		}
	}
}

// askRetiredGeneration asks the alive peers that hold Raft state, one
// after another until one answers, for the highest retired generation of
// name; it returns 0 when none answered.
func (cl *Node) askRetiredGeneration(ctx context.Context, name string) (int, string) {
	for _, m := range cl.mem.Members() {
		if m.Name == cl.cfg.GossipName() || m.State != membership.StateAlive ||
			(m.Meta.Bootstrap != membership.BootstrapHasState && m.Meta.Bootstrap != membership.BootstrapDone) {
			continue
		}
		g, err := cl.queryRetiredGeneration(ctx, m.ID, m.Meta.MeshAddr)
		if err != nil {
			cl.log.Debug("asking for the retired generations of this name", "peer", m.ID, "err", err)
			continue
		}
		return g, m.ID
	}
	return 0, ""
}

// markReused records that this NodeId is retired in the cluster (the
// marker's floor is the highest retired generation) and tells the run
// loop to exit.
func (cl *Node) markReused(top int, from string) {
	reason := fmt.Sprintf("nodeid_retired: the cluster (asked %s) holds generation %d of %s retired", from, top, cl.cfg.GossipName())
	if err := cl.opts.Dir.WriteRetirement(datadir.Retirement{Reason: reason, NodeID: cl.cfg.Name, Floor: top}); err != nil {
		cl.log.Error("this NodeId is retired in the cluster but the retired marker could not be written: it stays out of the cluster (the reconciler refuses it); bring a new NodeId",
			"node_id", cl.cfg.Name, "err", err)
		return
	}
	cl.log.Error("this NodeId is retired in the cluster (a lost data dir?): marked retired; the process exits and a restart comes back as the next generation",
		"node_id", cl.cfg.Name, "retired_generation", top, "asked", from)
	close(cl.life.reused)
}

// Reused is closed once the cluster holds this NodeId retired (a node
// that never joined asks its peers: watchReusedID); the run loop then
// returns ReusedExit.
func (cl *Node) Reused() <-chan struct{} { return cl.life.reused }

// ReusedExit moves the stage to removed and is what the run loop returns
// once markReused closed cl.life.reused.
func (cl *Node) ReusedExit() error {
	cl.opts.Stage.Set(stage.Removed, reasonRemoved)
	return fmt.Errorf("%w: %s; restart to come back as the next generation", ErrNodeIDRetired, cl.cfg.Name)
}
