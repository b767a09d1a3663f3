package consensus

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
)

// checkedStore seals every entry it stores with a CRC-32C and refuses, on
// every read, an entry whose seal does not match. raft-wal checks a
// batch's CRC only while recovering the tail after a crash, never on a
// read (and v0.4.2 cannot reopen a segment written with a codec of one's
// own: it records the built-in codec's ID in every segment), so the seal
// travels in raft.Log.Extensions, the field hashicorp/raft keeps for
// middleware like this: it is appended on the way in and removed on the
// way out, and Raft above never sees it. The full scan at start-up
// (scanLog) therefore refuses a damaged entry of any type — command,
// configuration, no-op — naming its index.
//
// The seal covers the index, term, type, data and the caller's own
// extensions (not AppendedAt, which only feeds Raft's metrics).
type checkedStore struct {
	logStore
	fence *installFence // nil: an offline store (recover, restore)
}

// sealMagic starts the seal, so an entry written without one (or with a
// foreign extension) is told apart from a damaged seal.
var sealMagic = [2]byte{'t', 'k'}

const sealLen = len(sealMagic) + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrLogSeal is the kind of every error OpenLogSeal returns.
var ErrLogSeal = errors.New("damaged Raft log entry")

func sealSum(l *raft.Log, ext []byte) uint32 {
	var h [17]byte
	binary.BigEndian.PutUint64(h[0:], l.Index)
	binary.BigEndian.PutUint64(h[8:], l.Term)
	h[16] = byte(l.Type)
	sum := crc32.Update(0, castagnoli, h[:])
	var n [8]byte
	binary.BigEndian.PutUint32(n[0:], uint32(len(l.Data)))
	binary.BigEndian.PutUint32(n[4:], uint32(len(ext)))
	sum = crc32.Update(sum, castagnoli, n[:])
	sum = crc32.Update(sum, castagnoli, l.Data)
	return crc32.Update(sum, castagnoli, ext)
}

// SealLog returns a copy of l whose Extensions end with its seal (l itself
// is not changed: Raft's log cache holds it).
func SealLog(l *raft.Log) *raft.Log {
	c := *l
	ext := make([]byte, 0, len(l.Extensions)+sealLen)
	ext = append(ext, l.Extensions...)
	ext = append(ext, sealMagic[:]...)
	c.Extensions = binary.BigEndian.AppendUint32(ext, sealSum(l, l.Extensions))
	return &c
}

// OpenLogSeal checks l's seal and removes it; an error names what is wrong.
func OpenLogSeal(l *raft.Log) error {
	ext := l.Extensions
	if len(ext) < sealLen || !bytes.Equal(ext[len(ext)-sealLen:len(ext)-4], sealMagic[:]) {
		return fmt.Errorf("%w %d: no checksum seal (%d extension bytes)", ErrLogSeal, l.Index, len(ext))
	}
	own := ext[:len(ext)-sealLen]
	stored := binary.BigEndian.Uint32(ext[len(ext)-4:])
	if got := sealSum(l, own); got != stored {
		return fmt.Errorf("%w %d: bad checksum (stored %08x, computed %08x)", ErrLogSeal, l.Index, stored, got)
	}
	if len(own) == 0 {
		own = nil
	}
	l.Extensions = own
	return nil
}

func (s checkedStore) StoreLog(l *raft.Log) error {
	s.fence.logWritten()
	return s.logStore.StoreLog(SealLog(l))
}

func (s checkedStore) StoreLogs(logs []*raft.Log) error {
	s.fence.logWritten()
	sealed := make([]*raft.Log, len(logs))
	for i, l := range logs {
		sealed[i] = SealLog(l)
	}
	return s.logStore.StoreLogs(sealed)
}

// GetLog also keeps raft.LogStore's contract that raft-wal v0.4.2 does
// not: after a head truncation (the log compacted behind a snapshot) an
// index before FirstIndex is gone. raft-wal still returns such entries
// while their segment is on disk, so a leader would replay the compacted
// log to a newcomer instead of sending it the snapshot.
func (s checkedStore) GetLog(index uint64, l *raft.Log) error {
	first, err := s.logStore.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		if first > 0 && s.fence.snapshotEntry(index, l) {
			return nil // the snapshot stands for its last entry (installFence)
		}
		return raft.ErrLogNotFound
	}
	if err := s.logStore.GetLog(index, l); err != nil {
		return err
	}
	return OpenLogSeal(l)
}

// DeleteRange keeps the entries from an installed snapshot's last one on
// when the snapshot ends inside the log (installFence).
func (s checkedStore) DeleteRange(min, max uint64) error {
	return s.fence.deleteRange(s.logStore, min, max)
}

// IsMonotonic forwards raft.MonotonicLogStore: Raft treats a monotonic
// store differently after a snapshot install (it drops the whole log).
func (s checkedStore) IsMonotonic() bool {
	m, ok := s.logStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
