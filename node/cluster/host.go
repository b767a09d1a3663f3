package cluster

import (
	"context"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/ticket"
)

// Host is what the cluster half needs of the node it runs in, beyond what
// it is given when it is built: Raft once it is open, the node's own write
// path and ticket operations, its clock guard and its waits. The node
// implements it with a small adapter; the cluster never sees the node
// itself (as Nomad's raft shims or Consul's autopilot delegate).
type Host interface {
	// Consensus is the node's Raft once it is open and stored, nil before:
	// until then the mesh, Raft and gossip are still being set up.
	Consensus() *consensus.Raft
	// Propose applies an entry through Raft and waits for the FSM's
	// answer; refusals are the API's errors (not leader, shutdown,
	// unknown outcome).
	Propose(ctx context.Context, data []byte) (ticket.Result, error)
	// Serving is nil when this node may take a client request itself (it
	// leads and its barrier committed in this term), else why not.
	Serving() error

	// CheckClock is the clock guard's answer now (SPEC §3.2); ClockErr
	// the latched FAILED error, or nil.
	CheckClock() error
	ClockErr() *clockhealth.Error
	// ClockSample is the running bound and the wall time (Unix ms) of the
	// last sample (0: none yet); an injected guard answers 0 and now.
	ClockSample() (boundMs uint64, atUnixMs int64)

	// Local is this node's own ticket operations: a forwarded request is
	// served with them, so the leader stamps now with its own clock and
	// runs its own clock check (SPEC §4.1).
	Local() Tickets
	// ReserveWait counts a wait this node forwards to the leader (a
	// blocking grant, or with watch a blocking read) against its own cap
	// and its caller's share; release gives it back. BindWait returns ctx
	// ended also when the node stops.
	ReserveWait(watch bool, caller string) (release func(), err error)
	BindWait(ctx context.Context) (context.Context, context.CancelFunc)
}

// Tickets are the ticket operations of SPEC §4.1 and §4.2: the API's
// ticket role with its blocking read.
type Tickets interface {
	api.Tickets
	api.Watcher
}
