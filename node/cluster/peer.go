package cluster

// The peer-status query over mesh streams of class bootstrap (SPEC §5
// Bootstrap, §3.4 replacement): a node asks a peer whether it holds Raft state
// (Consul's maybeBootstrap asks every peer before bootstrapping) and how
// far its log reaches (the leader's reconciler promotes a non-voter only
// once it has caught up: RunnerConfig.Progress). Frames: package
// peerstatus.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
	"github.com/tckclk/tckclk/node/cluster/peerstatus"
)

const peerQueryTimeout = time.Second

// localPeerStatus is this node's answer.
func (cl *Node) localPeerStatus() peerstatus.Status {
	leader, _ := cl.Leader()
	c, r := cl.host.Consensus(), cl.raft()
	if c == nil || r == nil {
		return peerstatus.Status{Leader: leader} // a gossip-only client, or Raft not open yet
	}
	servers, err := c.Servers()
	// Unknown is answered as having state: a peer then does not bootstrap.
	return peerstatus.Status{HasState: err != nil || len(servers) > 0, LastIndex: r.LastIndex(), Leader: leader}
}

// servePeerStatus answers peer-status queries on the mesh's bootstrap
// class until the listener closes; the returned func closes it and waits.
func (cl *Node) servePeerStatus(wg *sync.WaitGroup) func() {
	ln := cl.mesh.Listener(mesh.ClassBootstrap)
	var conns sync.WaitGroup
	wg.Go(func() {
		defer conns.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { cl.answerPeer(c) })
		}
	})
	return func() { _ = ln.Close() }
}

func (cl *Node) answerPeer(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(peerQueryTimeout)) // socket deadline: real time
	var op [1]byte
	if _, err := io.ReadFull(c, op[:]); err != nil {
		return
	}
	if op[0] == peerstatus.OpRetiredGeneration {
		// The asker is the stream's authenticated mesh peer (its NodeId,
		// whose name the mesh checked against the trust map).
		if ps, ok := c.(interface{ PeerID() string }); ok {
			_, _ = c.Write(peerstatus.EncodeGeneration(uint32(cl.retiredGeneration(identity.TrustName(ps.PeerID())))))
		}
		return
	}
	if op[0] != peerstatus.Op {
		cl.log.Warn("peer status: unknown request", "op", op[0])
		return
	}
	b, err := peerstatus.Encode(cl.localPeerStatus())
	if err != nil {
		cl.log.Warn("peer status", "err", err)
		return
	}
	_, _ = c.Write(b)
}

// queryPeer asks the peer id (a NodeId) at its mesh address for its
// status.
func (cl *Node) queryPeer(ctx context.Context, id, addr string) (peerstatus.Status, error) {
	b, err := cl.askPeer(ctx, id, addr, peerstatus.Op, peerstatus.MaxLen)
	if err != nil {
		return peerstatus.Status{}, err
	}
	st, err := peerstatus.Decode(b)
	if err != nil {
		return peerstatus.Status{}, fmt.Errorf("node: peer status of %s: %w", id, err)
	}
	return st, nil
}

// queryRetiredGeneration asks the peer id (a NodeId) for the highest
// generation of this node's name its replicated state holds retired.
func (cl *Node) queryRetiredGeneration(ctx context.Context, id, addr string) (int, error) {
	b, err := cl.askPeer(ctx, id, addr, peerstatus.OpRetiredGeneration, peerstatus.GenLen)
	if err != nil {
		return 0, err
	}
	g, err := peerstatus.DecodeGeneration(b)
	if err != nil {
		return 0, fmt.Errorf("node: retired generation from %s: %w", id, err)
	}
	return int(min(g, identity.MaxGeneration)), nil
}

// askPeer sends the one-byte request op to the peer id on a bootstrap
// stream and returns its answer (at most maxLen bytes are accepted; a
// longer answer comes back maxLen+1 bytes long, which every decoder
// refuses), within peerQueryTimeout.
func (cl *Node) askPeer(ctx context.Context, id, addr string, op byte, maxLen int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, peerQueryTimeout)
	defer cancel()
	s, err := cl.mesh.Dial(ctx, addr, id, mesh.ClassBootstrap) // exactly that NodeId, generation included
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if _, err := s.Write([]byte{op}); err != nil {
		return nil, fmt.Errorf("node: peer query %d to %s: %w", op, id, err)
	}
	b := make([]byte, maxLen+1)
	nr, err := io.ReadFull(s, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("node: peer query %d to %s: %w", op, id, err)
	}
	return b[:nr], nil
}

// progress is RunnerConfig.Progress: a member's last log index, asked
// over the mesh (hashicorp/raft does not expose it on the leader).
func (cl *Node) progress(ctx context.Context) func(id string) (uint64, bool) {
	return func(id string) (uint64, bool) {
		for _, m := range cl.mem.Members() {
			if m.ID == id && m.State == membership.StateAlive {
				st, err := cl.queryPeer(ctx, id, m.Meta.MeshAddr)
				if err != nil {
					cl.log.Debug("progress of a non-voter", "peer", id, "err", err)
					return 0, false
				}
				return st.LastIndex, true
			}
		}
		return 0, false
	}
}

// leader is the leader this node knows: Raft's, or for a gossip-only
// client the one its voters named (discoverLeader); "" for none. A
// non-voter whose Raft knows no leader asks as a client does: one the
// reconciler left out (beyond max_voters + max_standbys) hears from no
// leader, and one it removed is never told (Raft stops replicating to it).
func (cl *Node) Leader() (id, meshAddr string) {
	if r := cl.raft(); r != nil {
		addr, lid := r.LeaderWithID()
		if lid != "" || cl.role() == membership.RoleVoter {
			return string(lid), string(addr)
		}
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.clientLeader, cl.clientLeaderAddr
}

// discoverLeader is a gossip-only client's way to the leader: it asks the
// alive voters in gossip (by NodeId) until one names a leader that gossip
// knows, and keeps it until the next round.
func (cl *Node) discoverLeader(ctx context.Context) {
	members := cl.mem.Members()
	addrOf := map[string]string{}
	for _, m := range members {
		if m.State == membership.StateAlive {
			addrOf[m.ID] = m.Meta.MeshAddr
		}
	}
	var id, addr string
	for _, m := range members {
		if m.State != membership.StateAlive || m.Meta.Role != membership.RoleVoter {
			continue
		}
		st, err := cl.queryPeer(ctx, m.ID, m.Meta.MeshAddr)
		if err != nil || st.Leader == "" || addrOf[st.Leader] == "" {
			continue
		}
		id, addr = st.Leader, addrOf[st.Leader]
		break
	}
	cl.mu.Lock()
	changed := id != cl.clientLeader
	cl.clientLeader, cl.clientLeaderAddr = id, addr
	cl.mu.Unlock()
	if changed {
		cl.log.Info("gossip-only client: leader", "leader", id)
	}
}
