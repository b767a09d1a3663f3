package ticket

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strings"

	"github.com/google/btree"
	"github.com/tckclk/tckclk/protocol"
)

// Snapshot format (all integers big-endian):
//
//	"TCKTSNAP"  magic, 8 bytes
//	u16         version (1..=SnapshotVersion)
//	u64         Δ ms
//	u64         last applied command index
//	versions 3 and 4 — the Raft position (Position): what Raft's
//	metadata of the snapshot (its meta.json, an InstallSnapshot request)
//	claims:
//	  u64       Raft index of the last entry the state includes
//	  u64       that entry's Raft term
//	  u64       taken at (unix ms)
//	  u64       configuration index
//	  u16       server count (≥ 1)
//	  per server, in Raft's order: u8 suffrage (0 voter, 1 nonvoter,
//	  2 staging); u16 len, ID; u16 len, address
//	version 4 only:
//	  u64       token epoch (0..=MaxTokenEpoch, token.go)
//	  u64       highest token issued (≤ the epoch's token at the
//	            command index; every ticket's token is ≤ it)
//	u64         ticket count
//	per ticket, names strictly increasing:
//	  u8 len, name; u8 len, holder; u64 token; u8 lease_s;
//	  u64 valid_before_ms; u64 expiry_ms
//	  version 4 only: u8 flags (bit 0: revoked; the others 0)
//	versions 2, 3 and 4 (SPEC §3.4):
//	u64         retired NodeId count (version 2: ≥ 1; versions 3, 4: any)
//	per NodeId, strictly increasing: u8 len, NodeId
//	u32         CRC-32C of every byte before it
//
// Nothing may follow the checksum. Every snapshot a node persists carries
// its Raft position and is written in version 4: node/consensus checks
// every field of Raft's metadata against it before Raft opens, and an
// installed snapshot's against the leader's request. A Snapshot without a
// position (Raft nil) is written in the versions before it, 1 when no
// NodeId is retired, else 2, which ReadSnapshot still reads (a node
// upgraded with such a snapshot; the golden files) — only while it holds
// nothing they cannot carry (a token epoch, a revoked ticket); it refuses
// a version 2 with no retired NodeId (not what WriteTo writes: every
// accepted snapshot re-encodes to the same bytes). Versions 1 to 3 do not
// carry the highest token: read, it is the bound of their command index.
const (
	SnapshotMagic   = "TCKTSNAP"
	SnapshotVersion = 4
)

// Position is where in the Raft log a snapshot was taken and under which
// configuration (versions 3 and 4). Raft's own metadata of the snapshot must
// claim exactly this; the snapshot's checksum covers it with the state.
type Position struct {
	Index, Term uint64 // the last Raft entry the state includes
	// TakenMs is when the snapshot was taken (unix ms), for an operator
	// reading a snapshot file. No metadata has to match it (a snapshot
	// installed from the leader keeps the leader's).
	TakenMs            uint64
	ConfigurationIndex uint64   // the Raft index of the configuration
	Servers            []Server // the committed configuration, in Raft's order
}

// Server is one member of a Position's configuration.
type Server struct {
	Suffrage uint8 // SuffrageVoter, SuffrageNonvoter or SuffrageStaging
	ID       string
	Address  string
}

// Suffrages, numbered as hashicorp/raft's ServerSuffrage.
const (
	SuffrageVoter uint8 = iota
	SuffrageNonvoter
	SuffrageStaging
)

// maxServerField bounds a server's ID and address (the u16 length).
const maxServerField = 1<<16 - 1

// Snapshot is a point-in-time copy of the state, safe to write while the
// FSM keeps applying.
type Snapshot struct {
	DeltaMs uint64
	Index   uint64 // last applied command index: no Grant after it
	// Raft is where the snapshot was taken (versions 3 and 4); nil in the
	// versions before. The FSM does not know it (Snapshot leaves it nil):
	// the Raft adapter sets it from the snapshot's metadata.
	Raft *Position
	// Epoch is the token epoch and MaxToken the highest token issued
	// (HighestToken); both need version 4.
	Epoch, MaxToken uint64
	// Tickets: any order; sorted by name once decoded. An FSM's Snapshot
	// leaves it nil and holds its tickets in frozen instead: Len and Each
	// read whichever is set.
	Tickets []Ticket
	Retired []string // retired NodeIds, sorted
	// frozen is the FSM's ticket tree as it was at Snapshot: a
	// copy-on-write clone, in name order, that the FSM leaves as it was
	// until pin is released.
	frozen *btree.BTreeG[*item]
	pin    *pin
}

// pin is an FSM's snapshot until Release.
type pin struct {
	f        *FSM
	released bool // under f.mu
}

// ErrReleased: a snapshot's tickets were read after its Release.
var ErrReleased = errors.New("ticket: snapshot already released")

// Release tells the FSM that s is written and will not be read again:
// while an FSM's snapshot is pinned, every ticket the FSM changes is
// copied first (its tree clone may be reading it). Releasing twice, or a
// snapshot that is not an FSM's, does nothing; writing s after Release
// is refused (ErrReleased). A snapshot never released costs the FSM a
// copy per change, never a wrong state.
func (s *Snapshot) Release() {
	p := s.pin
	if p == nil {
		return
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if !p.released {
		p.released = true
		p.f.pinned--
	}
}

func (s *Snapshot) isReleased() bool {
	if s.pin == nil {
		return false
	}
	s.pin.f.mu.RLock()
	defer s.pin.f.mu.RUnlock()
	return s.pin.released
}

// Len returns the number of tickets in s.
func (s *Snapshot) Len() int {
	if s.frozen != nil {
		return s.frozen.Len()
	}
	return len(s.Tickets)
}

// Each calls fn with every ticket of s in name order until fn returns
// false. fn must not change the ticket.
func (s *Snapshot) Each(fn func(t *Ticket) bool) {
	if s.frozen != nil {
		s.frozen.Ascend(func(it *item) bool { return fn(&it.Ticket) })
		return
	}
	for _, k := range nameOrder(s.Tickets) {
		if !fn(&s.Tickets[k.i]) {
			return
		}
	}
}

// Snapshot captures the state without copying it: the tickets are a
// copy-on-write clone of the FSM's tree, O(1) under the lock, which the
// FSM's later entries leave as it was until Release. It refuses once the
// FSM has stopped, so a state that skipped a bad entry can never be
// persisted.
func (f *FSM) Snapshot() (*Snapshot, error) {
	f.mu.Lock() // Clone gives the live tree a new copy-on-write context: a write
	defer f.mu.Unlock()
	if f.fatal != nil {
		return nil, fmt.Errorf("ticket: no snapshot: %w: %v", ErrStopped, f.fatal)
	}
	if f.delta == 0 {
		return nil, errors.New("ticket: no snapshot before Δ is recorded (the Init entry)")
	}
	s := &Snapshot{DeltaMs: f.delta, Index: f.index, Epoch: f.epoch, MaxToken: f.maxToken, frozen: f.tickets.Clone(), pin: &pin{f: f}}
	f.pinned++
	for id := range f.retired {
		s.Retired = append(s.Retired, id)
	}
	slices.Sort(s.Retired)
	return s, nil
}

// WriteTo writes the snapshot in the versioned, checksummed format, the
// tickets in name order (s.Tickets itself is left in its order): version 4
// with its Raft position, else version 1 or 2 (see the format). A position
// or token epoch ReadSnapshot would refuse is not written, nor without a
// position a state the versions before 4 cannot carry.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	if s.isReleased() {
		return 0, ErrReleased
	}
	if s.Raft != nil {
		if err := s.Raft.check(s.Index); err != nil {
			return 0, err
		}
		if err := checkTokens(s); err != nil {
			return 0, err
		}
	} else if err := s.fitsOld(); err != nil {
		return 0, err
	}
	cw := &crcWriter{w: bufio.NewWriterSize(w, 1<<16), h: crc32.New(castagnoli)}
	buf := make([]byte, 0, 2*MaxNameLen+64)
	buf = append(buf, SnapshotMagic...)
	if !slices.IsSorted(s.Retired) {
		slices.Sort(s.Retired)
	}
	version := uint16(1)
	switch {
	case s.Raft != nil:
		version = 4
	case len(s.Retired) > 0:
		version = 2
	}
	buf = binary.BigEndian.AppendUint16(buf, version)
	buf = binary.BigEndian.AppendUint64(buf, s.DeltaMs)
	buf = binary.BigEndian.AppendUint64(buf, s.Index)
	if version == 4 {
		buf = s.Raft.append(buf)
		buf = binary.BigEndian.AppendUint64(buf, s.Epoch)
		buf = binary.BigEndian.AppendUint64(buf, s.MaxToken)
	}
	buf = binary.BigEndian.AppendUint64(buf, uint64(s.Len()))
	if err := cw.write(buf); err != nil {
		return cw.n, err
	}
	var err error
	s.Each(func(t *Ticket) bool {
		buf = appendStr(buf[:0], t.Name)
		buf = appendStr(buf, t.Holder)
		buf = binary.BigEndian.AppendUint64(buf, t.Token)
		buf = append(buf, t.LeaseS)
		buf = binary.BigEndian.AppendUint64(buf, t.ValidBeforeMs)
		buf = binary.BigEndian.AppendUint64(buf, t.ExpiryMs)
		if version == 4 {
			buf = append(buf, t.flags())
		}
		err = cw.write(buf)
		return err == nil
	})
	if err != nil {
		return cw.n, err
	}
	if version >= 2 {
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

// Ticket flags (version 4).
const (
	flagRevoked = 1 << 0
	knownFlags  = flagRevoked
)

func (t *Ticket) flags() byte {
	if t.Revoked {
		return flagRevoked
	}
	return 0
}

// fitsOld refuses a state the versions before 4 cannot carry.
func (s *Snapshot) fitsOld() error {
	if s.Epoch != 0 {
		return snapErr(ErrFormat, "token epoch %d needs version 4, which carries a Raft position (none given)", s.Epoch)
	}
	var err error
	s.Each(func(t *Ticket) bool {
		if t.Revoked {
			err = snapErr(ErrFormat, "revoked ticket %q needs version 4, which carries a Raft position (none given)", t.Name)
		}
		return err == nil
	})
	return err
}

// checkTokens checks version 4's token epoch and highest token against
// the command index.
func checkTokens(s *Snapshot) error {
	switch {
	case s.Epoch > MaxTokenEpoch:
		return snapErr(ErrFormat, "token epoch %d is above %d", s.Epoch, MaxTokenEpoch)
	case s.MaxToken > tokenBound(s.Epoch, s.Index):
		return snapErr(ErrFormat, "highest token %d is above %d, the highest token of epoch %d at command index %d", s.MaxToken, tokenBound(s.Epoch, s.Index), s.Epoch, s.Index)
	}
	return nil
}

// append encodes p (the Raft position of versions 3 and 4).
func (p *Position) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, p.Index)
	b = binary.BigEndian.AppendUint64(b, p.Term)
	b = binary.BigEndian.AppendUint64(b, p.TakenMs)
	b = binary.BigEndian.AppendUint64(b, p.ConfigurationIndex)
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.Servers)))
	for _, sv := range p.Servers {
		b = append(b, sv.Suffrage)
		b = binary.BigEndian.AppendUint16(b, uint16(len(sv.ID)))
		b = append(b, sv.ID...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(sv.Address)))
		b = append(b, sv.Address...)
	}
	return b
}

// check verifies a position of a snapshot whose last applied command is at
// cmdIndex: a term, cmdIndex ≤ Index (Raft's index counts every entry, the
// command index only commands), 1 ≤ ConfigurationIndex ≤ Index, and a
// configuration Raft itself would accept (ValidConfiguration).
func (p *Position) check(cmdIndex uint64) error {
	switch {
	case p.Term == 0:
		return snapErr(ErrFormat, "raft position: term 0")
	case p.Index < cmdIndex:
		return snapErr(ErrFormat, "raft position: index %d is before the last applied command %d", p.Index, cmdIndex)
	case p.ConfigurationIndex == 0 || p.ConfigurationIndex > p.Index:
		return snapErr(ErrFormat, "raft position: configuration index %d is outside 1..=%d (the snapshot's index)", p.ConfigurationIndex, p.Index)
	}
	if err := ValidConfiguration(p.Servers); err != nil {
		return snapErr(ErrFormat, "raft position: %v", err)
	}
	return nil
}

// ValidConfiguration checks a Raft configuration as hashicorp/raft's own
// checkConfiguration does, and what the format can hold: 1..=65535
// servers, each with a known suffrage, an ID and an address of 1..=65535
// bytes, no ID or address twice, at least one voter.
func ValidConfiguration(servers []Server) error {
	if len(servers) == 0 || len(servers) > maxServerField {
		return fmt.Errorf("%d servers; a configuration has 1..=%d", len(servers), maxServerField)
	}
	ids := make(map[string]bool, len(servers))
	addrs := make(map[string]bool, len(servers))
	voters := 0
	for i, sv := range servers {
		switch {
		case sv.Suffrage > SuffrageStaging:
			return fmt.Errorf("server %d: unknown suffrage %d", i, sv.Suffrage)
		case sv.ID == "" || len(sv.ID) > maxServerField:
			return fmt.Errorf("server %d: ID of %d bytes (1..=%d)", i, len(sv.ID), maxServerField)
		case sv.Address == "" || len(sv.Address) > maxServerField:
			return fmt.Errorf("server %d (%q): address of %d bytes (1..=%d)", i, sv.ID, len(sv.Address), maxServerField)
		case ids[sv.ID]:
			return fmt.Errorf("server %d: ID %q twice", i, sv.ID)
		case addrs[sv.Address]:
			return fmt.Errorf("server %d (%q): address %q twice", i, sv.ID, sv.Address)
		}
		ids[sv.ID], addrs[sv.Address] = true, true
		if sv.Suffrage == SuffrageVoter {
			voters++
		}
	}
	if voters == 0 {
		return errors.New("no voter")
	}
	return nil
}

// Mismatch names the first field in which q differs from p, TakenMs
// aside, with p's and q's values; field is "" when they are the same
// position.
func (p *Position) Mismatch(q *Position) (field, mine, theirs string) {
	num := func(name string, a, b uint64) bool {
		if a != b {
			field, mine, theirs = name, fmt.Sprint(a), fmt.Sprint(b)
		}
		return a != b
	}
	if num("Index", p.Index, q.Index) || num("Term", p.Term, q.Term) || num("ConfigurationIndex", p.ConfigurationIndex, q.ConfigurationIndex) {
		return
	}
	if len(p.Servers) != len(q.Servers) {
		return "Configuration", fmt.Sprintf("%d servers", len(p.Servers)), fmt.Sprintf("%d servers", len(q.Servers))
	}
	for i := range p.Servers {
		if a, b := p.Servers[i], q.Servers[i]; a != b {
			return fmt.Sprintf("Configuration server %d", i), a.String(), b.String()
		}
	}
	return "", "", ""
}

// String is how messages show a server: suffrage, ID and address.
func (sv Server) String() string {
	names := [...]string{"Voter", "Nonvoter", "Staging"}
	suff := fmt.Sprintf("suffrage(%d)", sv.Suffrage)
	if int(sv.Suffrage) < len(names) {
		suff = names[sv.Suffrage]
	}
	return fmt.Sprintf("%s %q at %q", suff, sv.ID, sv.Address)
}

// sortKey is one ticket's place in nameOrder: k holds the 8 bytes of its
// name that follow the prefix every name shares (big-endian, zero-padded),
// i its index in Snapshot.Tickets.
type sortKey struct {
	k uint64
	i int
}

// nameOrder returns the tickets' indices in name order. Sorting the names
// themselves was most of a snapshot's cost (≈ 85 % of WriteTo at 1M
// tickets, cmpbody and 64-byte swaps: BenchmarkSnapshotScale); here the
// keys, 16 bytes each, are radix-sorted on one uint64, and only equal keys
// compare names. The key compares as the names do: both share the common prefix, so their order is that of what
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
// tickets it took a third of the comparison sort's time.
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

// ReadSnapshotHeader decodes the head of a snapshot: everything before the
// tickets (magic, version, Δ, command index, from version 3 the Raft
// position, from version 4 the token epoch and highest token; each field
// as ReadSnapshot checks it) and returns it with the version. The checksum at the end is not read: what it returns is
// authentic only once ReadSnapshot or Restore accepted the whole snapshot.
func ReadSnapshotHeader(r io.Reader) (*Snapshot, uint16, error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 4096), h: crc32.New(castagnoli)}
	s, version, _, err := sr.header()
	return s, version, err
}

// header reads a snapshot's head and returns it, its version and the
// (unverified) ticket count.
func (sr *snapReader) header() (*Snapshot, uint16, uint64, error) {
	var hdr [8 + 2 + 8 + 8]byte
	if err := sr.full(hdr[:8]); err != nil {
		return nil, 0, 0, err
	}
	if string(hdr[:8]) != SnapshotMagic {
		return nil, 0, 0, snapErr(ErrFormat, "magic %q is not %q", hdr[:8], SnapshotMagic)
	}
	if err := sr.full(hdr[8:10]); err != nil {
		return nil, 0, 0, err
	}
	version := binary.BigEndian.Uint16(hdr[8:10])
	if version < 1 || version > SnapshotVersion {
		return nil, version, 0, snapErr(ErrVersion, "version %d; this node reads versions 1..=%d", version, SnapshotVersion)
	}
	if err := sr.full(hdr[10:]); err != nil {
		return nil, version, 0, err
	}
	s := &Snapshot{
		DeltaMs: binary.BigEndian.Uint64(hdr[10:18]),
		Index:   binary.BigEndian.Uint64(hdr[18:26]),
	}
	if protocol.ValidateDelta(s.DeltaMs) != nil {
		return nil, version, 0, snapErr(ErrDeltaRange, "Δ %d ms is outside %d..=%d", s.DeltaMs, protocol.MinDeltaMs, protocol.MaxDeltaMs)
	}
	if version >= 3 {
		p, err := sr.position()
		if err != nil {
			return nil, version, 0, err
		}
		if err := p.check(s.Index); err != nil {
			return nil, version, 0, err
		}
		s.Raft = p
	}
	if version >= 4 {
		var b [16]byte
		if err := sr.full(b[:]); err != nil {
			return nil, version, 0, err
		}
		s.Epoch, s.MaxToken = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
		if err := checkTokens(s); err != nil {
			return nil, version, 0, err
		}
	} else {
		s.MaxToken = tokenBound(0, s.Index)
	}
	var n [8]byte
	if err := sr.full(n[:]); err != nil {
		return nil, version, 0, err
	}
	return s, version, binary.BigEndian.Uint64(n[:]), nil
}

// position reads the Raft position of versions 3 and 4 (unchecked).
func (sr *snapReader) position() (*Position, error) {
	var b [8 + 8 + 8 + 8 + 2]byte
	if err := sr.full(b[:]); err != nil {
		return nil, err
	}
	p := &Position{
		Index:              binary.BigEndian.Uint64(b[0:8]),
		Term:               binary.BigEndian.Uint64(b[8:16]),
		TakenMs:            binary.BigEndian.Uint64(b[16:24]),
		ConfigurationIndex: binary.BigEndian.Uint64(b[24:32]),
	}
	count := int(binary.BigEndian.Uint16(b[32:34]))
	p.Servers = make([]Server, 0, min(count, 16)) // count is not trusted yet
	for range count {
		var sv Server
		if err := sr.full(b[:1]); err != nil {
			return nil, err
		}
		sv.Suffrage = b[0]
		var err error
		if sv.ID, err = sr.str16(); err != nil {
			return nil, err
		}
		if sv.Address, err = sr.str16(); err != nil {
			return nil, err
		}
		p.Servers = append(p.Servers, sv)
	}
	return p, nil
}

// readSnapshot is ReadSnapshot handing each verified ticket to add (with
// the header's unverified count, for sizing) instead of collecting them:
// Restore builds its items straight from the stream. The returned
// Snapshot has no Tickets.
func readSnapshot(r io.Reader, add func(t Ticket, count uint64)) (*Snapshot, error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 1<<16), h: crc32.New(castagnoli)}
	s, version, count, err := sr.header()
	if err != nil {
		return nil, err
	}
	var rec [8 + 1 + 8 + 8 + 1]byte
	recLen := len(rec) - 1
	if version >= 4 {
		recLen++ // the flags
	}
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
		if err := sr.full(rec[:recLen]); err != nil {
			return nil, err
		}
		t := Ticket{
			Name: name, Holder: holder,
			Token:         binary.BigEndian.Uint64(rec[0:8]),
			LeaseS:        rec[8],
			ValidBeforeMs: binary.BigEndian.Uint64(rec[9:17]),
			ExpiryMs:      binary.BigEndian.Uint64(rec[17:25]),
		}
		if recLen == len(rec) {
			if fl := rec[25]; fl&^knownFlags != 0 {
				return nil, snapErr(ErrFormat, "ticket %d (%q): unknown flags %#02x", i, t.Name, fl)
			}
			t.Revoked = rec[25]&flagRevoked != 0
		}
		if err := checkTicket(&t, prev.Name, s, i); err != nil {
			return nil, err
		}
		add(t, count)
		prev = t
	}
	if version >= 2 {
		if err := sr.retired(s, version); err != nil {
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
	if t.Token == 0 || t.Token > s.MaxToken {
		return bad("token %d is outside 1..=%d (the snapshot's highest token)", t.Token, s.MaxToken)
	}
	if err := ValidLease(int64(t.LeaseS)); err != nil {
		return bad("%v", err)
	}
	if lo, ok := protocol.AddSat(t.ValidBeforeMs, s.DeltaMs); !ok || t.ExpiryMs < lo {
		return bad("expiry %d is earlier than valid_before %d + Δ %d", t.ExpiryMs, t.ValidBeforeMs, s.DeltaMs)
	}
	return nil
}

// retired reads the retired NodeIds (versions 2 to 4) into s.
func (sr *snapReader) retired(s *Snapshot, version uint16) error {
	var n [8]byte
	if err := sr.full(n[:]); err != nil {
		return err
	}
	count := binary.BigEndian.Uint64(n[:])
	if count == 0 && version == 2 {
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

// str16 reads a u16-length-prefixed string (a Position's ID or address).
func (s *snapReader) str16() (string, error) {
	if err := s.full(s.buf[:2]); err != nil {
		return "", err
	}
	b := make([]byte, binary.BigEndian.Uint16(s.buf[:2]))
	if err := s.full(b); err != nil {
		return "", err
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
func (f *FSM) Restore(r io.Reader) error { return f.RestoreChecked(r, nil) }

// RestoreChecked is Restore with one more check: once the whole snapshot
// is verified, and before any state changes, check (when not nil) sees
// its header (Δ, command index, Raft position; no tickets) and may refuse
// it, as a refused restore.
func (f *FSM) RestoreChecked(r io.Reader, check func(*Snapshot) error) error {
	// The items are built as the tickets stream in (no copy of the whole
	// state in between) and handed in chunks to a goroutine that builds
	// the tree meanwhile; the map is built once their number is verified
	// (sized once: growing it costs more than the rest together), while
	// the tree's goroutine finishes. All before the lock is taken.
	const chunkLen = 1 << 12
	var heap []*item
	var chunk []*item
	toTree := make(chan []*item, 16)
	treeDone := make(chan *btree.BTreeG[*item], 1)
	go func() {
		tree := newTree()
		for c := range toTree {
			for _, it := range c {
				tree.ReplaceOrInsert(it)
			}
		}
		treeDone <- tree
	}()
	send := func() {
		if len(chunk) > 0 {
			toTree <- chunk
			chunk = nil
		}
	}
	holders := map[string]string{}
	s, err := readSnapshot(r, func(t Ticket, count uint64) {
		if heap == nil {
			heap = make([]*item, 0, min(count, 1<<16)) // count is not trusted yet
		}
		if h, ok := holders[t.Holder]; ok {
			t.Holder = h
		} else if len(holders) < maxHolders {
			holders[t.Holder] = t.Holder
		}
		it := &item{Ticket: t, hidx: len(heap)}
		heap = append(heap, it)
		if chunk == nil {
			chunk = make([]*item, 0, chunkLen)
		}
		if chunk = append(chunk, it); len(chunk) == chunkLen {
			send()
		}
	})
	send()
	close(toTree)
	if err == nil && s.DeltaMs != f.expect {
		err = fmt.Errorf("%w: the snapshot's Δ is %d ms, this node is configured with %d ms", ErrDeltaMismatch, s.DeltaMs, f.expect)
	}
	if err == nil && check != nil {
		err = check(s)
	}
	var byName map[string]*item
	if err == nil {
		byName = make(map[string]*item, len(heap))
		for _, it := range heap {
			it.mod = s.Index
			byName[it.Name] = it
		}
	}
	tree := <-treeDone
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.fail(&RestoreError{Err: err})
		return &RestoreError{Err: err}
	}
	if f.fatal != nil {
		return &RestoreError{Err: fmt.Errorf("%w: %v", ErrStopped, f.fatal)}
	}
	retired := make(map[string]bool, len(s.Retired))
	for _, id := range s.Retired {
		retired[id] = true
	}
	// Snapshots of the state replaced keep their items: nothing here
	// changes them, and the items below are new.
	f.byName, f.tickets, f.heap, f.retired, f.holders = byName, tree, heap, retired, holders
	for i := len(f.heap)/2 - 1; i >= 0; i-- {
		f.down(i)
	}
	f.delta, f.index, f.freed = s.DeltaMs, s.Index, s.Index
	f.epoch, f.maxToken = s.Epoch, s.MaxToken
	f.fates.reset() // the entries before it are known only by their effect
	f.changed("")
	return nil
}

// Stop stops the FSM for good with err, as a refused restore does: it
// applies nothing more and refuses to snapshot. For what the FSM cannot
// see itself (a snapshot installed from the leader whose metadata
// contradicts it).
func (f *FSM) Stop(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail(err)
}
