package cluster

import (
	"slices"
	"testing"
	"time"
)

// The status page's clock-bound history: one sample per boundEvery (a
// closer one is skipped), the last boundKeep kept per member, a member
// without a sample for a whole window forgotten, and get hands out a copy.
func TestBoundHistory(t *testing.T) {
	var h boundHistory
	t0 := time.Unix(1_800_000_000, 0)
	h.record(t0, map[string]uint32{"a": 1, "b": 2})
	h.record(t0.Add(time.Second), map[string]uint32{"a": 99, "b": 99})
	h.record(t0.Add(boundEvery), map[string]uint32{"a": 3}) // b not alive: a gap, no value
	if a, b := h.get("a"), h.get("b"); !slices.Equal(a, []uint32{1, 3}) || !slices.Equal(b, []uint32{2}) {
		t.Fatalf("a %v, b %v; want [1 3] and [2]", a, b)
	}
	at := t0.Add(boundEvery)
	for i := range boundKeep + 10 {
		at = at.Add(boundEvery)
		h.record(at, map[string]uint32{"a": uint32(100 + i)})
	}
	a := h.get("a")
	if len(a) != boundKeep || a[0] != 100+10 || a[len(a)-1] != 100+boundKeep+9 {
		t.Fatalf("after %d more samples: %d kept, %v … %v", boundKeep+10, len(a), a[0], a[len(a)-1])
	}
	if b := h.get("b"); b != nil {
		t.Fatalf("b, silent for longer than the window, is still kept: %v", b)
	}
	a[0] = 0
	if h.get("a")[0] == 0 {
		t.Fatal("get handed out the history itself, not a copy")
	}
}
