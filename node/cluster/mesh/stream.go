package mesh

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/hashicorp/yamux"
)

// Class is the first byte of every mesh stream; it says which subsystem
// the stream belongs to.
type Class byte

// Assigned classes. Other values are unassigned: an inbound stream naming
// one is closed and counted.
const (
	ClassRaft      Class = 1
	ClassForward   Class = 2
	ClassBootstrap Class = 3
)

// Valid reports whether c is an assigned class.
func (c Class) Valid() bool { return c >= ClassRaft && c <= ClassBootstrap }

func (c Class) String() string {
	switch c {
	case ClassRaft:
		return "raft"
	case ClassForward:
		return "forward"
	case ClassBootstrap:
		return "bootstrap"
	}
	return fmt.Sprintf("class(%d)", byte(c))
}

// ErrClass is returned for an unassigned Class.
var ErrClass = errors.New("mesh: unassigned stream class")

// Stream is one multiplexed stream to an authenticated peer.
type Stream struct {
	*yamux.Stream
	peer  string
	class Class
}

// PeerID is the authenticated NodeId of the other end.
func (s *Stream) PeerID() string { return s.peer }

// Class is the stream's class.
func (s *Stream) Class() Class { return s.class }

// meshAddr is the advertised mesh address as a net.Addr.
type meshAddr string

func (meshAddr) Network() string  { return "tcp" }
func (a meshAddr) String() string { return string(a) }

// classListener hands out the inbound streams of one class.
type classListener struct {
	m     *Mesh
	class Class
	ch    chan *Stream
	done  chan struct{}
	once  sync.Once
}

// Accept returns the next inbound stream of the class, a *Stream.
func (l *classListener) Accept() (net.Conn, error) {
	select {
	case s := <-l.ch:
		return s, nil
	case <-l.done:
		return nil, fmt.Errorf("mesh: %s listener: %w", l.class, net.ErrClosed)
	}
}

// Close stops the listener; streams waiting in it are closed. The mesh
// stays up, and Mesh.Listener hands out a fresh listener for the class.
func (l *classListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.m.mu.Lock()
		if l.m.listeners[l.class] == l {
			delete(l.m.listeners, l.class)
		}
		l.m.mu.Unlock()
		l.drain()
	})
	return nil
}

// drain closes the streams queued in a closed listener.
func (l *classListener) drain() {
	for {
		select {
		case s := <-l.ch:
			s.Close()
			l.m.met.refused[refusedClosed].Inc()
		default:
			return
		}
	}
}

// Addr is the mesh's advertised address (Raft's transport uses it as its
// own server address).
func (l *classListener) Addr() net.Addr { return meshAddr(l.m.addr) }

// deliver queues s for Accept, or closes it when the listener or the mesh
// closes first.
func (l *classListener) deliver(s *Stream) {
	select {
	case l.ch <- s:
		select {
		case <-l.done: // closed while we queued: Close's drain may have run already
			l.drain()
		default:
		}
	case <-l.done:
		s.Close()
		l.m.met.refused[refusedClosed].Inc()
	case <-l.m.closing:
		s.Close()
	}
}
