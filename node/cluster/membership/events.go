package membership

import "sync"

// EventType says what happened to a member.
type EventType int

// Event types.
const (
	EventJoin   EventType = iota + 1 // first seen alive, or alive again after dead/left (possibly at a new address)
	EventUpdate                      // its metadata changed
	EventLeave                       // it left gracefully (Leave)
	EventFailed                      // it was declared dead by failure detection
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFailed:
		return "failed"
	}
	return "unknown"
}

// Event is one membership change, with the member as it is after it.
type Event struct {
	Type   EventType
	Member Member
}

// eventQueue is a bounded channel that drops its oldest event instead of
// blocking memberlist's goroutines. push holds mu so that the drain-then-send
// of one producer is not interleaved with another's; the consumer only
// receives, so after a drain there is room.
type eventQueue struct {
	mu      sync.Mutex
	ch      chan Event
	closed  bool
	dropped uint64
	onDrop  func()
}

func newEventQueue(n int, onDrop func()) *eventQueue {
	return &eventQueue{ch: make(chan Event, n), onDrop: onDrop}
}

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	for {
		select {
		case q.ch <- e:
			return
		default:
		}
		select {
		case <-q.ch:
			q.dropped++
			q.onDrop()
		default:
		}
	}
}

func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
}

func (q *eventQueue) droppedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}
