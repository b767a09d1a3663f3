package ticket

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/tckclk/tckclk/protocol"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strings"
)

// Snapshot format (all integers big-endian):
//
//	"TCKTSNAP"  magic, 8 bytes
//	u16         version (SnapshotVersion)
//	u64         Δ ms
//	u64         last applied command index
//	u64         ticket count
//	per ticket, names strictly increasing:
//	  u8 len, name; u8 len, holder; u64 token; u8 lease_s;
//	  u64 valid_before_ms; u64 expiry_ms
//	version 2 only (SPEC §3.4):
//	u64         retired NodeId count (≥ 1)
//	per NodeId, strictly increasing: u8 len, NodeId
//	u32         CRC-32C of every byte before it
//
// Nothing may follow the checksum. A snapshot is written in version 1 when
// no NodeId is retired (a node of the previous release can install it),
// else in version 2; ReadSnapshot reads both and refuses a version 2 with
// no retired NodeId (not what WriteTo writes: every accepted snapshot
// re-encodes to the same bytes).
const (
	SnapshotMagic   = "TCKTSNAP"
	SnapshotVersion = 2
)

// Snapshot is a point-in-time copy of the state, safe to write while the
// FSM keeps applying.
type Snapshot struct {
	DeltaMs uint64
	Index   uint64
	Tickets []Ticket // any order; sorted by name once decoded
	Retired []string // retired NodeIds, sorted
}

// Snapshot copies the state. It refuses once the FSM has stopped, so a
// state that skipped a bad entry can never be persisted.
func (f *FSM) Snapshot() (*Snapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fatal != nil {
		return nil, fmt.Errorf("ticket: no snapshot: %w: %v", ErrStopped, f.fatal)
	}
	if f.delta == 0 {
		return nil, errors.New("ticket: no snapshot before Δ is recorded (the Init entry)")
	}
	s := &Snapshot{DeltaMs: f.delta, Index: f.index, Tickets: make([]Ticket, 0, len(f.tickets))}
	for _, it := range f.tickets {
		s.Tickets = append(s.Tickets, it.Ticket)
	}
	for id := range f.retired {
		s.Retired = append(s.Retired, id)
	}
	slices.Sort(s.Retired)
	return s, nil
}

// WriteTo writes the snapshot in the versioned, checksummed format, the
// tickets in name order (s.Tickets itself is left in its order).
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	order := nameOrder(s.Tickets)
	cw := &crcWriter{w: bufio.NewWriterSize(w, 1<<16), h: crc32.New(castagnoli)}
	buf := make([]byte, 0, 2*MaxNameLen+64)
	buf = append(buf, SnapshotMagic...)
	if !slices.IsSorted(s.Retired) {
		slices.Sort(s.Retired)
	}
	version := uint16(1)
	if len(s.Retired) > 0 {
		version = 2
	}
	buf = binary.BigEndian.AppendUint16(buf, version)
	buf = binary.BigEndian.AppendUint64(buf, s.DeltaMs)
	buf = binary.BigEndian.AppendUint64(buf, s.Index)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(s.Tickets)))
	if err := cw.write(buf); err != nil {
		return cw.n, err
	}
	for _, k := range order {
		t := &s.Tickets[k.i]
		buf = appendStr(buf[:0], t.Name)
		buf = appendStr(buf, t.Holder)
		buf = binary.BigEndian.AppendUint64(buf, t.Token)
		buf = append(buf, t.LeaseS)
		buf = binary.BigEndian.AppendUint64(buf, t.ValidBeforeMs)
		buf = binary.BigEndian.AppendUint64(buf, t.ExpiryMs)
		if err := cw.write(buf); err != nil {
			return cw.n, err
		}
	}
	if version == 2 {
		buf = binary.BigEndian.AppendUint64(buf[:0], uint64(len(s.Retired)))
		for _, id := range s.Retired {
			buf = appendStr(buf, id)
		}
		if err := cw.write(buf); err != nil {
			return cw.n, err
		}
	}
	sum := binary.BigEndian.AppendUint32(nil, cw.h.Sum32())
	if _, err := cw.w.Write(sum); err != nil {
		return cw.n, err
	}
	cw.n += int64(len(sum))
	return cw.n, cw.w.Flush()
}

// sortKey is one ticket's place in nameOrder: k holds the 8 bytes of its
// name that follow the prefix every name shares (big-endian, zero-padded),
// i its index in Snapshot.Tickets.
type sortKey struct {
	k uint64
	i int
}

// nameOrder returns the tickets' indices in name order. Sorting the names
// themselves was most of a snapshot's cost (issue 16 item 6: ≈ 85 % of
// WriteTo at 1M tickets, cmpbody and 64-byte swaps); here the keys, 16
// bytes each, are radix-sorted on one uint64, and only equal keys compare
// names. The key compares as the
// names do: both share the common prefix, so their order is that of what
// follows it; where two keys differ, their first differing byte is the
// names' first differing byte (a name that ends pads with 0, lower than
// any byte a valid name holds, as a shorter name sorts first); equal keys
// fall back to comparing the whole names.
func nameOrder(ts []Ticket) []sortKey {
	keys := make([]sortKey, len(ts))
	if len(ts) == 0 {
		return keys
	}
	common := ts[0].Name
	for i := 1; i < len(ts) && common != ""; i++ {
		n := ts[i].Name
		j := 0
		for j < len(common) && j < len(n) && common[j] == n[j] {
			j++
		}
		common = common[:j]
	}
	for i := range ts {
		var b [8]byte
		copy(b[:], ts[i].Name[len(common):])
		keys[i] = sortKey{k: binary.BigEndian.Uint64(b[:]), i: i}
	}
	radixSort(keys)
	for lo := 0; lo < len(keys); { // runs of equal keys: by the whole names
		hi := lo + 1
		for hi < len(keys) && keys[hi].k == keys[lo].k {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(keys[lo:hi], func(a, b sortKey) int { return strings.Compare(ts[a.i].Name, ts[b.i].Name) })
		}
		lo = hi
	}
	return keys
}

// radixSort sorts keys by k: least significant byte first, each pass
// stable, a pass skipped where every key has the same byte. At 5M
// tickets it took a third of the comparison sort's time (issue 16 item 6).
func radixSort(keys []sortKey) {
	if len(keys) < 2 {
		return
	}
	src, dst := keys, make([]sortKey, len(keys))
	for shift := 0; shift < 64; shift += 8 {
		var count [256]int
		for _, k := range src {
			count[byte(k.k>>shift)]++
		}
		if count[byte(src[0].k>>shift)] == len(src) {
			continue
		}
		at := 0
		for b, c := range count {
			count[b] = at
			at += c
		}
		for _, k := range src {
			b := byte(k.k >> shift)
			dst[count[b]] = k
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

type crcWriter struct {
	w *bufio.Writer
	h hash.Hash32
	n int64
}

func (c *crcWriter) write(b []byte) error {
	c.h.Write(b)
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func snapErr(kind error, format string, args ...any) *DecodeError {
	return &DecodeError{What: "snapshot", Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// ReadSnapshot decodes and verifies a whole snapshot: magic, version
// (ErrVersion), Δ ∈ 2..=60000 (ErrDeltaRange), every ticket's fields and
// order (ErrFormat), the checksum (ErrChecksum) and the end of input.
func ReadSnapshot(r io.Reader) (*Snapshot, error) {
	var tickets []Ticket
	s, err := readSnapshot(r, func(t Ticket, count uint64) {
		if tickets == nil {
			// Never trust count for an allocation: a ticket takes at least 30 bytes.
			tickets = make([]Ticket, 0, min(count, 1<<16))
		}
		tickets = append(tickets, t)
	})
	if err != nil {
		return nil, err
	}
	s.Tickets = tickets
	return s, nil
}

// readSnapshot is ReadSnapshot handing each verified ticket to add (with
// the header's unverified count, for sizing) instead of collecting them:
// Restore builds its items straight from the stream. The returned
// Snapshot has no Tickets.
func readSnapshot(r io.Reader, add func(t Ticket, count uint64)) (*Snapshot, error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 1<<16), h: crc32.New(castagnoli)}
	var hdr [8 + 2 + 8 + 8 + 8]byte
	if err := sr.full(hdr[:8]); err != nil {
		return nil, err
	}
	if string(hdr[:8]) != SnapshotMagic {
		return nil, snapErr(ErrFormat, "magic %q is not %q", hdr[:8], SnapshotMagic)
	}
	if err := sr.full(hdr[8:10]); err != nil {
		return nil, err
	}
	version := binary.BigEndian.Uint16(hdr[8:10])
	if version < 1 || version > SnapshotVersion {
		return nil, snapErr(ErrVersion, "version %d; this node reads versions 1..=%d", version, SnapshotVersion)
	}
	if err := sr.full(hdr[10:]); err != nil {
		return nil, err
	}
	s := &Snapshot{
		DeltaMs: binary.BigEndian.Uint64(hdr[10:18]),
		Index:   binary.BigEndian.Uint64(hdr[18:26]),
	}
	if protocol.ValidateDelta(s.DeltaMs) != nil {
		return nil, snapErr(ErrDeltaRange, "Δ %d ms is outside %d..=%d", s.DeltaMs, protocol.MinDeltaMs, protocol.MaxDeltaMs)
	}
	count := binary.BigEndian.Uint64(hdr[26:34])
	var rec [8 + 1 + 8 + 8]byte
	var prev Ticket
	for i := uint64(0); i < count; i++ {
		name, err := sr.str("")
		if err != nil {
			return nil, err
		}
		// Holders repeat (one client holds many tickets): the previous
		// ticket's string is reused, not allocated again.
		holder, err := sr.str(prev.Holder)
		if err != nil {
			return nil, err
		}
		if err := sr.full(rec[:]); err != nil {
			return nil, err
		}
		t := Ticket{
			Name: name, Holder: holder,
			Token:         binary.BigEndian.Uint64(rec[0:8]),
			LeaseS:        rec[8],
			ValidBeforeMs: binary.BigEndian.Uint64(rec[9:17]),
			ExpiryMs:      binary.BigEndian.Uint64(rec[17:25]),
		}
		if err := checkTicket(&t, prev.Name, s, i); err != nil {
			return nil, err
		}
		add(t, count)
		prev = t
	}
	if version == 2 {
		if err := sr.retired(s); err != nil {
			return nil, err
		}
	}
	want := sr.h.Sum32()
	var sum [4]byte
	if err := sr.full(sum[:]); err != nil {
		return nil, err
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return nil, snapErr(ErrChecksum, "stored CRC-32C %08x, computed %08x", got, want)
	}
	if _, err := sr.r.ReadByte(); err == nil {
		return nil, snapErr(ErrFormat, "bytes follow the checksum")
	} else if !errors.Is(err, io.EOF) {
		return nil, snapErr(ErrFormat, "reading past the checksum: %v", err)
	}
	return s, nil
}

// checkTicket verifies ticket i, prev being the name of ticket i-1.
func checkTicket(t *Ticket, prev string, s *Snapshot, i uint64) error {
	bad := func(format string, args ...any) error {
		return snapErr(ErrFormat, "ticket %d (%q): %s", i, t.Name, fmt.Sprintf(format, args...))
	}
	if err := ValidName(t.Name); err != nil {
		return bad("%v", err)
	}
	if i > 0 && prev >= t.Name {
		return bad("names are not strictly increasing")
	}
	if err := ValidHolder(t.Holder); err != nil {
		return bad("%v", err)
	}
	if t.Token == 0 || t.Token > s.Index {
		return bad("token %d is outside 1..=%d (the snapshot's index)", t.Token, s.Index)
	}
	if err := ValidLease(int64(t.LeaseS)); err != nil {
		return bad("%v", err)
	}
	if lo, ok := protocol.AddSat(t.ValidBeforeMs, s.DeltaMs); !ok || t.ExpiryMs < lo {
		return bad("expiry %d is earlier than valid_before %d + Δ %d", t.ExpiryMs, t.ValidBeforeMs, s.DeltaMs)
	}
	return nil
}

// retired reads version 2's retired NodeIds into s.
func (sr *snapReader) retired(s *Snapshot) error {
	var n [8]byte
	if err := sr.full(n[:]); err != nil {
		return err
	}
	count := binary.BigEndian.Uint64(n[:])
	if count == 0 {
		return snapErr(ErrFormat, "version 2 with no retired NodeId (written as version 1)")
	}
	for i := uint64(0); i < count; i++ { // never allocates from count
		id, err := sr.str("")
		if err != nil {
			return err
		}
		if err := ValidNodeID(id); err != nil {
			return snapErr(ErrFormat, "retired NodeId %d: %v", i, err)
		}
		if i > 0 && s.Retired[i-1] >= id {
			return snapErr(ErrFormat, "retired NodeId %d (%q): not strictly increasing", i, id)
		}
		s.Retired = append(s.Retired, id)
	}
	return nil
}

type snapReader struct {
	r   *bufio.Reader
	h   hash.Hash32
	buf [1 + 255]byte // str's length and bytes
}

func (s *snapReader) full(b []byte) error {
	if _, err := io.ReadFull(s.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return snapErr(ErrFormat, "truncated")
		}
		return snapErr(ErrFormat, "read: %v", err)
	}
	s.h.Write(b)
	return nil
}

// str reads a u8-length-prefixed string; equal to same, it returns same
// without allocating.
func (s *snapReader) str(same string) (string, error) {
	if err := s.full(s.buf[:1]); err != nil {
		return "", err
	}
	b := s.buf[1 : 1+int(s.buf[0])] // int: 1+255 in a byte is 0
	if err := s.full(b); err != nil {
		return "", err
	}
	if string(b) == same {
		return same, nil
	}
	return string(b), nil
}

// RestoreError is a refused snapshot restore.
type RestoreError struct{ Err error }

func (e *RestoreError) Error() string { return "ticket: snapshot restore refused: " + e.Err.Error() }
func (e *RestoreError) Unwrap() error { return e.Err }

// Restore replaces the state with a snapshot read from r, after verifying
// all of it: format, checksum, Δ ∈ 2..=60000 and Δ equal to the configured
// one. Expiries are taken verbatim. A refused restore leaves the state as
// it was and stops the FSM (fail closed: the node must not go on).
func (f *FSM) Restore(r io.Reader) error {
	// The heap is built as the tickets stream in (an item each, no copy
	// of the whole state in between); the map once their number is known.
	var heap []*item
	s, err := readSnapshot(r, func(t Ticket, count uint64) {
		if heap == nil {
			heap = make([]*item, 0, min(count, 1<<16)) // count is not trusted yet
		}
		heap = append(heap, &item{Ticket: t})
	})
	if err == nil && s.DeltaMs != f.expect {
		err = fmt.Errorf("%w: the snapshot's Δ is %d ms, this node is configured with %d ms", ErrDeltaMismatch, s.DeltaMs, f.expect)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.fail(&RestoreError{Err: err})
		return &RestoreError{Err: err}
	}
	if f.fatal != nil {
		return &RestoreError{Err: fmt.Errorf("%w: %v", ErrStopped, f.fatal)}
	}
	tickets := make(map[string]*item, len(heap))
	for i, it := range heap {
		it.mod, it.hidx = s.Index, i
		tickets[it.Name] = it
	}
	retired := make(map[string]bool, len(s.Retired))
	for _, id := range s.Retired {
		retired[id] = true
	}
	f.tickets, f.heap, f.retired = tickets, heap, retired
	for i := len(f.heap)/2 - 1; i >= 0; i-- {
		f.down(i)
	}
	f.delta, f.index, f.freed = s.DeltaMs, s.Index, s.Index
	f.changed("")
	return nil
}
