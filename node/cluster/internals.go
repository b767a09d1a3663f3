package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
	"github.com/tckclk/tckclk/node/cluster/peerstatus"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
	"github.com/tckclk/tckclk/node/consensus"
)

// Internals is a view into a running cluster half for the node's tests,
// which exercise the assembled node (package node) and look inside it:
// the mesh, gossip, the reconciler, the contact transport, the retire
// and bootstrap steps. Production code uses Node's own methods.
type Internals struct{ *Node }

// Internals returns the view for tests.
func (cl *Node) Internals() Internals { return Internals{cl} }

func (i Internals) Mesh() *mesh.Mesh                      { return i.mesh }
func (i Internals) Membership() *membership.Membership    { return i.mem }
func (i Internals) Trust() *identity.Store                { return i.trust }
func (i Internals) TLS() *tls.Config                      { return i.tls }
func (i Internals) PublicKey() ed25519.PublicKey          { return i.key.Public().(ed25519.PublicKey) }
func (i Internals) Runner() *reconcile.Runner             { return i.runner() }
func (i Internals) BootstrapRefusal() string              { return i.bootstrapRefusal() }
func (i Internals) HandedOff() bool                       { return i.handedOff.Load() }
func (i Internals) CrashOutcomes() *prometheus.CounterVec { return i.crash.outcome }

// AdvertisedKey and ServerAddr are the mesh's and Raft's view of a peer
// (advertised).
func (i Internals) AdvertisedKey(id string) (ed25519.PublicKey, bool) { return i.adv.AdvertisedKey(id) }
func (i Internals) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	return i.adv.ServerAddr(id)
}

// InContact and LastContact are the contact transport's record of a peer.
func (i Internals) InContact(id string) bool { return i.tr.inContact(id) }
func (i Internals) LastContact(id string) (time.Time, uint64, bool) {
	return i.tr.lastContact(id)
}

// RefusedRejoin reports whether this node (as leader) logged id as a
// retired NodeId trying to join again.
func (i Internals) RefusedRejoin(id string) bool {
	i.life.mu.Lock()
	defer i.life.mu.Unlock()
	return i.life.logged[id]
}

func (i Internals) ReconcileMembers(r *raft.Raft) []reconcile.Member { return i.reconcileMembers(r) }
func (i Internals) WithRetired(ms []reconcile.Member) []reconcile.Member {
	return i.withRetired(ms)
}
func (i Internals) TransferTarget(r *raft.Raft) (raft.Server, bool) { return i.transferTarget(r) }
func (i Internals) ProposeRetire(ctx context.Context, id string) error {
	return i.proposeRetire(ctx, id)
}
func (i Internals) QueryPeer(ctx context.Context, id, addr string) (peerstatus.Status, error) {
	return i.queryPeer(ctx, id, addr)
}
func (i Internals) SafeBootstrap(ctx context.Context, cons *consensus.Raft, servers []raft.Server) bool {
	return i.safeBootstrap(ctx, cons, servers)
}
