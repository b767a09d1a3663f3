package cluster

import (
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/cluster/membership"
)

// Clock-bound history (the status page's chart, GET /v1/cluster/health's
// clock_bound_history_ms): every boundEvery this node records the running
// bound each alive member advertises in gossip, its own included, and
// keeps the last boundKeep of each (5 minutes). A member that is not alive
// gets no sample (a gap, never a made-up value); one not seen for a whole
// window is forgotten. Memory: boundKeep × 4 bytes per member.
const (
	boundEvery = 5 * time.Second
	boundKeep  = 60
)

// boundHistory is the zero-value-ready record of members' bounds.
type boundHistory struct {
	mu     sync.Mutex
	last   time.Time            // the last sample taken
	series map[string][]uint32  // NodeId -> bounds in ms, oldest first
	seen   map[string]time.Time // NodeId -> its last sample
}

// record takes one sample of bounds (NodeId -> ms) at now, unless the last
// one is less than boundEvery old.
func (h *boundHistory) record(now time.Time, bounds map[string]uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.last.IsZero() && now.Sub(h.last) < boundEvery {
		return
	}
	h.last = now
	if h.series == nil {
		h.series, h.seen = map[string][]uint32{}, map[string]time.Time{}
	}
	for id, b := range bounds {
		s := append(h.series[id], b)
		if len(s) > boundKeep {
			s = append(s[:0], s[len(s)-boundKeep:]...)
		}
		h.series[id], h.seen[id] = s, now
	}
	for id, at := range h.seen {
		if now.Sub(at) > boundEvery*boundKeep {
			delete(h.series, id)
			delete(h.seen, id)
		}
	}
}

// get returns a copy of id's bounds, oldest first (nil when none).
func (h *boundHistory) get(id string) []uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.series[id]) == 0 {
		return nil
	}
	return append([]uint32(nil), h.series[id]...)
}

// sampleBounds records the bounds alive members advertise now (this
// node's from its own metadata view).
func (cl *Node) sampleBounds(now time.Time) {
	bounds := map[string]uint32{}
	for _, m := range cl.mem.Members() {
		if m.State == membership.StateAlive || m.ID == cl.cfg.Name {
			bounds[m.ID] = m.Meta.ClockBoundMs
		}
	}
	cl.bounds.record(now, bounds)
}
