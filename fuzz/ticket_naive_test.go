package fuzz

import (
	"encoding/binary"
	"hash/crc32"
	"regexp"

	"github.com/tckclk/tckclk/node/ticket"
)

// The naive ticket decoders: written from the format comments and SPEC §4
// (names, holders, leases, Δ), with regular expressions and plain slicing
// instead of the ticket package's reader. The fuzz targets require the real
// decoders to agree with them on acceptance, on the kind of refusal and on
// every decoded field.

var (
	naiveName      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	naiveHolder    = regexp.MustCompile(`^[\x20-\x7e]{1,128}$`) // SPEC §4: printable ASCII, space included
	naiveCRC       = crc32.MakeTable(crc32.Castagnoli)
	naiveRetiredID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`) // cluster.name
)

// naiveKind is "" (accepted), "version", "checksum", "format" or "delta".
type naiveKind string

// cut takes n bytes from *b, or reports false.
func cut(b *[]byte, n int) ([]byte, bool) {
	if len(*b) < n {
		return nil, false
	}
	v := (*b)[:n]
	*b = (*b)[n:]
	return v, true
}

func cutStr(b *[]byte) (string, bool) {
	n, ok := cut(b, 1)
	if !ok {
		return "", false
	}
	s, ok := cut(b, int(n[0]))
	return string(s), ok
}

func cutU64(b *[]byte) (uint64, bool) {
	v, ok := cut(b, 8)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

func naiveEntry(data []byte) (ticket.Entry, naiveKind) {
	var e ticket.Entry
	if len(data) == 0 {
		return e, "format"
	}
	if data[0] < 1 || data[0] > 4 { // 2 added Retire (op 6), 3 Revoke (op 7), 4 KeepAlive (op 8), each its version's only op
		return e, "version"
	}
	if len(data) < 14 {
		return e, "format"
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, naiveCRC) != binary.BigEndian.Uint32(data[len(data)-4:]) {
		return e, "checksum"
	}
	e.Op = ticket.Op(body[1])
	e.NowMs = binary.BigEndian.Uint64(body[2:10])
	rest := body[10:]
	ok := true
	get := func(f func() bool) {
		if ok {
			ok = f()
		}
	}
	str := func(p *string) func() bool { return func() (r bool) { *p, r = cutStr(&rest); return } }
	u64 := func(p *uint64) func() bool { return func() (r bool) { *p, r = cutU64(&rest); return } }
	u8 := func(p *uint8) func() bool {
		return func() bool {
			v, r := cut(&rest, 1)
			if r {
				*p = v[0]
			}
			return r
		}
	}
	switch e.Op {
	case 1:
		get(u64(&e.DeltaMs))
	case 2:
		get(str(&e.Name))
		get(str(&e.Holder))
		get(u8(&e.LeaseS))
		get(u64(&e.RecvMs))
		get(u64(&e.ExpiryMs))
	case 3:
		get(str(&e.Name))
		get(str(&e.Holder))
		get(u64(&e.Token))
		get(u8(&e.LeaseS))
		get(u64(&e.RecvMs))
		get(u64(&e.ExpiryMs))
	case 4:
		get(str(&e.Name))
		get(str(&e.Holder))
		get(u64(&e.Token))
	case 5:
		get(str(&e.Name))
		get(u64(&e.Token))
	case 6:
		get(str(&e.NodeID))
	case 7:
		get(str(&e.Name))
		get(u64(&e.Token))
	case 8:
		get(u64(&e.RecvMs))
		var count uint64
		get(func() (r bool) {
			var v []byte
			v, r = cut(&rest, 2)
			if r {
				count = uint64(binary.BigEndian.Uint16(v))
			}
			return
		})
		if ok && (count < 1 || count > 1024) {
			return ticket.Entry{}, "format"
		}
		for i := uint64(0); ok && i < count; i++ {
			var it ticket.RenewItem
			get(str(&it.Name))
			get(str(&it.Holder))
			get(u64(&it.Token))
			get(u8(&it.LeaseS))
			get(u64(&it.ExpiryMs))
			e.Items = append(e.Items, it)
		}
	default:
		return ticket.Entry{}, "format"
	}
	version := byte(1)
	switch e.Op {
	case 6:
		version = 2
	case 7:
		version = 3
	case 8:
		version = 4
	}
	if !ok || len(rest) != 0 || body[0] != version {
		return ticket.Entry{}, "format"
	}
	if e.Op == 8 { // each item as a Renew with the entry's now and receive time
		if e.RecvMs > e.NowMs {
			return ticket.Entry{}, "format"
		}
		for _, it := range e.Items {
			if !naiveName.MatchString(it.Name) || !naiveHolder.MatchString(it.Holder) || it.Token == 0 || !naiveLeaseExpiry(e.NowMs, it.LeaseS, it.ExpiryMs) {
				return ticket.Entry{}, "format"
			}
		}
		return e, ""
	}
	if e.Op == 7 { // any token: 0 revokes whoever holds it
		if !naiveName.MatchString(e.Name) {
			return ticket.Entry{}, "format"
		}
		return e, ""
	}
	if e.Op == 6 {
		if !naiveRetiredID.MatchString(e.NodeID) {
			return ticket.Entry{}, "format"
		}
		return e, ""
	}
	if e.Op == 1 {
		if e.DeltaMs < 2 || e.DeltaMs > 60000 {
			return ticket.Entry{}, "format"
		}
		return e, ""
	}
	if !naiveName.MatchString(e.Name) || e.Op != 5 && !naiveHolder.MatchString(e.Holder) || e.Op != 2 && e.Token == 0 {
		return ticket.Entry{}, "format"
	}
	if (e.Op == 2 || e.Op == 3) && (e.RecvMs > e.NowMs || !naiveLeaseExpiry(e.NowMs, e.LeaseS, e.ExpiryMs)) {
		return ticket.Entry{}, "format"
	}
	return e, ""
}

// naiveLeaseExpiry: lease in 1..=250 and expiry = now + lease×1000 + Δ
// for some Δ in 2..=60000, without overflow (checked on the difference).
func naiveLeaseExpiry(now uint64, lease uint8, expiry uint64) bool {
	base := uint64(lease) * 1000
	return lease >= 1 && lease <= 250 && now <= ^uint64(0)-base-60000 && expiry >= now+base+2 && expiry <= now+base+60000
}

type naiveSnap struct {
	version         uint16
	delta, index    uint64
	raft            *ticket.Position // versions 3 and 4
	epoch, maxToken uint64           // version 4 (earlier: 0 and the index)
	tickets         []ticket.Ticket
	retired         []string
}

// naivePosition reads the Raft position of versions 3 and 4 and applies its rules
// (from the format comment and hashicorp/raft's checkConfiguration).
func naivePosition(b *[]byte, cmdIndex uint64) (*ticket.Position, bool) {
	var p ticket.Position
	var ok [4]bool
	p.Index, ok[0] = cutU64(b)
	p.Term, ok[1] = cutU64(b)
	p.TakenMs, ok[2] = cutU64(b)
	p.ConfigurationIndex, ok[3] = cutU64(b)
	n, ok4 := cut(b, 2)
	if !ok[0] || !ok[1] || !ok[2] || !ok[3] || !ok4 {
		return nil, false
	}
	str16 := func() (string, bool) {
		l, ok := cut(b, 2)
		if !ok {
			return "", false
		}
		v, ok := cut(b, int(binary.BigEndian.Uint16(l)))
		return string(v), ok
	}
	for range int(binary.BigEndian.Uint16(n)) {
		suff, ok := cut(b, 1)
		if !ok {
			return nil, false
		}
		id, ok1 := str16()
		if !ok1 {
			return nil, false
		}
		addr, ok2 := str16()
		if !ok2 {
			return nil, false
		}
		p.Servers = append(p.Servers, ticket.Server{Suffrage: suff[0], ID: id, Address: addr})
	}
	if p.Term == 0 || p.Index < cmdIndex || p.ConfigurationIndex < 1 || p.ConfigurationIndex > p.Index || len(p.Servers) == 0 {
		return nil, false
	}
	voter := false
	for i, s := range p.Servers {
		if s.Suffrage > 2 || s.ID == "" || s.Address == "" {
			return nil, false
		}
		for _, o := range p.Servers[:i] {
			if o.ID == s.ID || o.Address == s.Address {
				return nil, false
			}
		}
		voter = voter || s.Suffrage == 0
	}
	return &p, voter
}

func naiveSnapshot(data []byte) (naiveSnap, naiveKind) {
	var s naiveSnap
	b := data
	magic, ok := cut(&b, 8)
	if !ok {
		return s, "format"
	}
	if string(magic) != "TCKTSNAP" {
		return s, "format"
	}
	ver, ok := cut(&b, 2)
	if !ok {
		return s, "format"
	}
	version := binary.BigEndian.Uint16(ver)
	s.version = version
	if version < 1 || version > 4 { // 2 added the retired NodeIds, 3 the Raft position, 4 the token epoch and flags
		return s, "version"
	}
	hdr, ok := cut(&b, 16)
	if !ok {
		return s, "format"
	}
	s.delta = binary.BigEndian.Uint64(hdr[0:8])
	s.index = binary.BigEndian.Uint64(hdr[8:16])
	if s.delta < 2 || s.delta > 60000 {
		return s, "delta"
	}
	if version >= 3 {
		if s.raft, ok = naivePosition(&b, s.index); !ok {
			return s, "format"
		}
	}
	s.maxToken = min(s.index, 1<<48-1)
	if version == 4 {
		var ok1, ok2 bool
		s.epoch, ok1 = cutU64(&b)
		s.maxToken, ok2 = cutU64(&b)
		// token = epoch<<48 | index: the highest one is at most the
		// epoch's token at the command index (capped at 2^48 − 1).
		if !ok1 || !ok2 || s.epoch > 0xffff || s.maxToken > s.epoch<<48|min(s.index, 1<<48-1) {
			return s, "format"
		}
	}
	count, ok := cutU64(&b)
	if !ok {
		return s, "format"
	}
	for i := uint64(0); i < count; i++ {
		var t ticket.Ticket
		var ok1, ok2 bool
		t.Name, ok1 = cutStr(&b)
		if !ok1 {
			return s, "format"
		}
		if !naiveName.MatchString(t.Name) || len(s.tickets) > 0 && s.tickets[len(s.tickets)-1].Name >= t.Name {
			return s, "format"
		}
		t.Holder, ok2 = cutStr(&b)
		recLen := 25
		if version == 4 {
			recLen = 26
		}
		rec, ok3 := cut(&b, recLen)
		if !ok2 {
			return s, "format"
		}
		if !ok3 {
			return s, "format"
		}
		t.Token = binary.BigEndian.Uint64(rec[0:8])
		t.LeaseS = rec[8]
		t.ValidBeforeMs = binary.BigEndian.Uint64(rec[9:17])
		t.ExpiryMs = binary.BigEndian.Uint64(rec[17:25])
		if version == 4 {
			if rec[25] > 1 {
				return s, "format"
			}
			t.Revoked = rec[25] == 1
		}
		if !naiveHolder.MatchString(t.Holder) || t.Token == 0 || t.Token > s.maxToken || t.LeaseS < 1 || t.LeaseS > 250 ||
			t.ValidBeforeMs > ^uint64(0)-s.delta || t.ExpiryMs < t.ValidBeforeMs+s.delta {
			return s, "format"
		}
		s.tickets = append(s.tickets, t)
	}
	if version >= 2 {
		n, ok := cutU64(&b)
		if !ok || n == 0 && version == 2 {
			return s, "format"
		}
		for i := uint64(0); i < n; i++ {
			id, ok := cutStr(&b)
			if !ok || !naiveRetiredID.MatchString(id) || len(s.retired) > 0 && s.retired[len(s.retired)-1] >= id {
				return s, "format"
			}
			s.retired = append(s.retired, id)
		}
	}
	consumed := len(data) - len(b)
	sum, ok := cut(&b, 4)
	if !ok {
		return s, "format"
	}
	if crc32.Checksum(data[:consumed], naiveCRC) != binary.BigEndian.Uint32(sum) {
		return s, "checksum"
	}
	if len(b) != 0 {
		return s, "format"
	}
	return s, ""
}
