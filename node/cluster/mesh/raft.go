package mesh

import (
	"context"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// StreamLayer carries Raft's NetworkTransport over mesh streams of one
// class: raft.ServerAddress values are mesh addresses (Mesh.Addr), and
// Raft opens no port of its own (SPEC §5).
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

// Dial opens a stream to the peer advertising address, within timeout.
func (l *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.m.Dial(ctx, string(address), "", l.class)
}
