package consensus

import (
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// hashicorp/raft v1.7.3 leaves a follower's log out of step with its own
// record of it around a snapshot install, in two ways that a restart under
// load hits (hashicorp/raft#697), and our log store makes up for both:
//
//  1. A snapshot from the leader can end inside this node's log: the node
//     stored entries whose acknowledgements the leader never read (it
//     stopped with a batch in flight, or the answers timed out), so the
//     leader's idea of where the node's log ends is behind, and once that
//     point is compacted away it sends its snapshot. Raft restores it and,
//     the WAL being a raft.MonotonicLogStore, deletes the whole log
//     (removeOldLogs) while keeping its own record of the log's last entry
//     (installSnapshot never updates it). The next leader's AppendEntries
//     matches that stale last entry, and its commit index sends processLogs
//     to read the entries after the snapshot, now gone: `panic: log not
//     found`, the node down (TestInstallSnapshotInsideTheLog). So the
//     clean-up after an install that ends inside the log deletes only the
//     entries before the snapshot's last one (checkedStore.DeleteRange; the
//     Raft paper, §7, for a snapshot describing a prefix of the log), and
//     every entry Raft believes it has stays readable.
//
//  2. A follower whose log begins right after its snapshot cannot match an
//     AppendEntries that follows the snapshot's last entry: Raft's follower
//     looks that entry up in the log (its leader side uses the snapshot's
//     term), finds nothing and refuses. That is every follower right after
//     an install once the answer to the leader's first AppendEntries is
//     lost: the leader walks back, sends the same snapshot again, and again
//     (TestInstallSnapshotInsideTheLogRealLeaders). So checkedStore.GetLog
//     answers for the newest snapshot's last index, when the log no longer
//     holds it, with a no-op entry of the snapshot's term — the snapshot
//     standing for its last entry, as the paper has it. Raft never sends
//     or applies it: a leader takes the term for that index from its
//     snapshot and sends entries only after it, and applying starts after
//     the snapshot.
//
// A snapshot that ends before the log begins (this node's own state is
// newer; nothing would lead from the snapshot to the log) is refused
// before anything is written or restored (refuseBehindLog, from the
// snapshot store's Create). The leader tries again with its next snapshot;
// a newer one is accepted.
type installFence struct {
	// raft is the instance, once NewRaft returned (its AppliedIndex is the
	// installed snapshot's last index when the clean-up runs).
	raft atomic.Pointer[raft.Raft]
	// restored: an install's state-machine restore succeeded and the log
	// clean-up that follows it has not run yet. Any write to the log ends
	// it.
	restored atomic.Bool
	// snap is the newest snapshot this node holds (restored at start,
	// taken or installed since): the index and term of its last entry.
	snap atomic.Pointer[snapEnd]
}

type snapEnd struct{ index, term uint64 }

// noteSnapshot records a snapshot finalised or restored, ending at index
// of term; the newest one is kept.
func (f *installFence) noteSnapshot(index, term uint64) {
	if f == nil {
		return
	}
	n := &snapEnd{index, term}
	for {
		old := f.snap.Load()
		if old != nil && old.index >= index {
			return
		}
		if f.snap.CompareAndSwap(old, n) {
			return
		}
	}
}

// snapshotEntry is what GetLog answers for index, which the log no longer
// holds: the newest snapshot's last entry as a no-op of its term.
func (f *installFence) snapshotEntry(index uint64, l *raft.Log) bool {
	if f == nil {
		return false
	}
	s := f.snap.Load()
	if s == nil || s.index != index {
		return false
	}
	*l = raft.Log{Index: s.index, Term: s.term, Type: raft.LogNoop}
	return true
}

// deleteRange is checkedStore.DeleteRange: Raft's removeOldLogs after an
// install asks to delete the whole log (min ≤ first, max ≥ last); when the
// installed snapshot ends before the log's last entry, only the entries
// before the snapshot's last one go.
func (f *installFence) deleteRange(s logStore, min, max uint64) error {
	if f == nil || !f.restored.Swap(false) {
		return s.DeleteRange(min, max)
	}
	r := f.raft.Load()
	if r == nil {
		return s.DeleteRange(min, max)
	}
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.LastIndex()
	if err != nil {
		return err
	}
	snap := r.AppliedIndex() // installSnapshot set it to the snapshot's last index
	if min > first || max < last || snap >= last {
		return s.DeleteRange(min, max)
	}
	if snap <= min {
		return nil // the log starts right after the snapshot, or at its last entry
	}
	return s.DeleteRange(min, snap-1)
}

// logWritten ends the window between a restore and its log clean-up.
func (f *installFence) logWritten() {
	if f != nil && f.restored.Load() {
		f.restored.Store(false)
	}
}

// restoreDone records a successful state-machine restore.
func (f *installFence) restoreDone() {
	if f != nil {
		f.restored.Store(true)
	}
}

// refuseBehindLog refuses a snapshot ending at index when log (non-empty)
// begins after index+1 and ends after index: this node's own state is
// newer than the snapshot and the entries from the snapshot to its log are
// gone. A snapshot this node takes of itself never ends there (it is at
// least its last snapshot, and the log begins at most one after that).
func refuseBehindLog(log raft.LogStore, index uint64) error {
	if log == nil {
		return nil
	}
	first, err := log.FirstIndex()
	if err != nil {
		return err
	}
	last, err := log.LastIndex()
	if err != nil {
		return err
	}
	if last > index && first > index+1 {
		return fmt.Errorf("consensus: refusing a snapshot ending at index %d: this node's log holds %d..%d and its own state is newer; installing it would leave entries %d..%d missing between the snapshot and the log (the leader sends a newer snapshot later)",
			index, first, last, index+1, first-1)
	}
	return nil
}
