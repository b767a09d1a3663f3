package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tckclk/tckclk/node/cluster/identity"
)

// StreamLayer carries Raft's NetworkTransport over mesh streams of one
// class, and Raft opens no port of its own (SPEC §5). Every address it
// dials names the Raft server it is for (RaftAddress: NodeId@host:port),
// and the session it uses must be with exactly that NodeId: hashicorp/raft
// passes only an address to Dial, and the process now at a server's old
// address — a later generation NAME~G of the same name, with the same key
// — must never answer AppendEntries or RequestVote as the server it
// replaced (a voter that lost its log and its vote would still count in
// quorums). The transport's ServerAddressProvider makes the addresses.
type StreamLayer struct {
	net.Listener
	m     *Mesh
	class Class
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// NewStreamLayer returns a raft.StreamLayer on m's streams of class
// (normally ClassRaft). Closing it closes only its class listener.
func NewStreamLayer(m *Mesh, class Class) *StreamLayer {
	return &StreamLayer{Listener: m.Listener(class), m: m, class: class}
}

// raftAddrSep separates the NodeId from the mesh address in a RaftAddress;
// it is no NodeId byte (identity.ValidNodeID).
const raftAddrSep = "@"

// ErrRaftAddress: a Raft dial whose address names no valid server id.
var ErrRaftAddress = errors.New("mesh: a Raft address must name its server: NodeId@host:port")

// RaftAddress is the address a Raft transport dials for server id at the
// mesh address addr. It is for the transport only (its ServerAddressProvider
// returns it); Raft's configuration keeps the bare mesh address.
func RaftAddress(id raft.ServerID, addr string) raft.ServerAddress {
	return raft.ServerAddress(string(id) + raftAddrSep + addr)
}

// SplitRaftAddress splits a RaftAddress into its NodeId and mesh address.
func SplitRaftAddress(a raft.ServerAddress) (id, addr string, err error) {
	id, addr, ok := strings.Cut(string(a), raftAddrSep)
	if !ok || addr == "" {
		return "", "", fmt.Errorf("%w, got %q", ErrRaftAddress, string(a))
	}
	if err := identity.ValidNodeID(id); err != nil {
		return "", "", fmt.Errorf("%w, got %q: %w", ErrRaftAddress, string(a), err)
	}
	return id, addr, nil
}

// Dial opens a stream to the server a RaftAddress names, at its address,
// within timeout; the peer must authenticate as exactly that NodeId
// (ReasonWrongPeer otherwise). A bare address is refused: it names no
// server, and whoever listens there would answer.
func (l *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id, addr, err := SplitRaftAddress(address)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.m.Dial(ctx, addr, id, l.class)
}
