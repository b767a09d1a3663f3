package ticket

import (
	"slices"
	"sort"
)

// The fates of recent entries: a proposer whose leadership was lost with
// its entry in flight (node/consensus) learns afterwards what this FSM
// applied at the entry's index. An entry is identified by its Raft index
// and term (Raft's log matching property: one entry per index and term),
// so the ring keeps, for the last fateRingLen commands applied, their
// index, term and result. It is not state: never in a snapshot, empty
// after New and after a Restore.

// fateRingLen bounds the ring: a proposer looks its entry up within
// milliseconds of this node applying it (it is woken by the apply), so
// a few thousand entries cover any delay of its goroutine at the
// cluster's throughput.
const fateRingLen = 4096

// fateItemBudget bounds the KeepAlive item results the ring keeps (each
// holds a ticket): the oldest fates are forgotten until the ring holds
// at most this many, so 4,096 KeepAlives of a thousand items each never
// pin millions of results; a few seconds of renewals at any rate this
// node sustains stay known.
const fateItemBudget = 1 << 16

// FateKind is what the FSM knows of the log entry at an index.
type FateKind uint8

const (
	// FatePending: nothing at this index or after it has been applied yet.
	FatePending FateKind = iota
	// FateApplied: a command was applied at this index; Fate.Term and
	// Fate.Result are its term and result.
	FateApplied
	// FateNoCommand: entries after this index have been applied and the
	// one at it was not a command (a no-op, a barrier, a configuration):
	// no proposer's command was applied there.
	FateNoCommand
	// FateForgotten: the ring no longer covers this index (it was
	// applied long ago, before a Restore, or without its term).
	FateForgotten
)

// Fate is the answer of FateOf.
type Fate struct {
	Kind   FateKind
	Term   uint64 // FateApplied: the applied entry's Raft term
	Result Result // FateApplied: what Apply returned for it
}

type appliedEntry struct {
	index, term uint64
	res         Result
}

// fates is the ring (guarded by FSM.mu): n entries from ring[head],
// ascending by index, wrapping around. Every command applied at an index
// in [from, last] is in it; from == 0: none is known.
type fates struct {
	ring  []appliedEntry // grows up to fateRingLen
	head  int
	n     int
	items int // len(res.Items) summed over the ring
	from  uint64
	last  uint64
	wake  chan struct{} // closed and cleared at the next change; nil when nobody waits
}

// record notes the command applied at index in term with its result;
// term 0 (unknown) forgets every fate instead.
func (r *fates) record(index, term uint64, res Result) {
	if term == 0 {
		r.reset()
		return
	}
	if r.from == 0 {
		r.from = index
	}
	if r.n == len(r.ring) {
		if len(r.ring) == fateRingLen {
			r.forget() // the oldest makes room
		} else {
			if r.head != 0 { // wrapped after a forget: in order from 0 first
				r.ring, r.head = slices.Concat(r.ring[r.head:], r.ring[:r.head]), 0
			}
			r.ring = append(r.ring, appliedEntry{})
		}
	}
	*r.at(r.n) = appliedEntry{index: index, term: term, res: res}
	r.n++
	r.items += len(res.Items)
	for r.items > fateItemBudget && r.n > 1 {
		r.forget()
	}
	r.last = index
	r.woke()
}

// forget drops the oldest fate.
func (r *fates) forget() {
	old := r.at(0)
	r.from = old.index + 1
	r.items -= len(old.res.Items)
	*old = appliedEntry{} // its result's tickets are not kept alive
	r.head = (r.head + 1) % len(r.ring)
	r.n--
}

// reset forgets every fate (a Restore, an entry applied without its term).
func (r *fates) reset() {
	clear(r.ring) // the results' tickets are not kept alive
	r.ring, r.head, r.n, r.items, r.from, r.last = r.ring[:0], 0, 0, 0, 0, 0
	r.woke()
}

func (r *fates) woke() {
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

func (r *fates) at(i int) *appliedEntry {
	return &r.ring[(r.head+i)%len(r.ring)]
}

// lookup answers for index; applied is the FSM's last applied command
// index.
func (r *fates) lookup(index, applied uint64) Fate {
	n := r.n
	i := sort.Search(n, func(i int) bool { return r.at(i).index >= index })
	switch {
	case i < n && r.at(i).index == index:
		e := r.at(i)
		return Fate{Kind: FateApplied, Term: e.term, Result: e.res}
	case r.from != 0 && r.from <= index && index <= r.last:
		return Fate{Kind: FateNoCommand}
	case index > applied:
		return Fate{Kind: FatePending}
	}
	return Fate{Kind: FateForgotten}
}

// FateOf reports what this FSM applied at Raft index index (see
// FateKind). With FatePending it also returns a channel closed at the
// next change of what it knows (an entry applied, a Restore), so a
// caller can wait for it and ask again; nil otherwise.
func (f *FSM) FateOf(index uint64) (Fate, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fate := f.fates.lookup(index, f.index)
	if fate.Kind != FatePending {
		return fate, nil
	}
	if f.fates.wake == nil {
		f.fates.wake = make(chan struct{})
	}
	return fate, f.fates.wake
}
