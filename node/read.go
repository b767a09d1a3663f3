package node

import (
	"context"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/stage"
	"github.com/tckclk/tckclk/node/ticket"
)

// readable is the linearizable-read rule of SPEC §4: this node leads, its
// Barrier committed in the current term, and VerifyLeader succeeds now.
func (n *server) readable(ctx context.Context) error {
	if err := n.serving(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.cons.Load().VerifyLeader(ctx); err != nil {
		return api.NotLeader(string(stage.Raft), "leadership not verified: %v", err)
	}
	return nil
}

// Get is a linearizable read of one ticket (api.Backend); a cluster
// follower forwards it to the leader.
func (n *server) Get(ctx context.Context, name string) (ticket.Ticket, bool, error) {
	if leader, ok := n.mode.route(); ok {
		return leader.Get(ctx, name)
	}
	return n.getLocal(ctx, name)
}

// Watch is the blocking read of SPEC §4.2 (api.Watcher); a cluster
// follower forwards it to the leader.
func (n *server) Watch(ctx context.Context, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error) {
	if leader, ok := n.mode.route(); ok {
		return leader.Watch(ctx, name, index, wait)
	}
	return n.watchLocal(ctx, name, index, wait)
}

func (n *server) getLocal(ctx context.Context, name string) (ticket.Ticket, bool, error) {
	if err := n.readable(ctx); err != nil {
		return ticket.Ticket{}, false, err
	}
	t, ok := n.fsm.Get(name)
	return t, ok, nil
}

// List is a linearizable read of tickets by prefix (api.Backend); a
// cluster follower forwards it to the leader.
func (n *server) List(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	if leader, ok := n.mode.route(); ok {
		return leader.List(ctx, prefix, limit)
	}
	return n.listLocal(ctx, prefix, limit)
}

func (n *server) listLocal(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error) {
	if err := n.readable(ctx); err != nil {
		return nil, false, err
	}
	ts, more := n.fsm.List(prefix, limit)
	n.waits.queued(ts)
	return ts, more, nil
}

// ForwardsTo (api.LeaderHinter): in cluster mode on a node that forwards
// ticket ops, the leader's NodeId; the API names it in wire.LeaderHeader
// so that a client with several addresses can go to the leader itself.
func (n *server) ForwardsTo() string { return n.mode.forwardsTo() }
