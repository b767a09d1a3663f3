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
	if data[0] != 1 && data[0] != 2 { // 2 added Retire (op 6), its only version-2 op
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
	default:
		return ticket.Entry{}, "format"
	}
	if !ok || len(rest) != 0 || (e.Op == 6) != (body[0] == 2) {
		return ticket.Entry{}, "format"
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
	if e.Op == 2 || e.Op == 3 {
		if e.LeaseS < 1 || e.LeaseS > 250 || e.RecvMs > e.NowMs {
			return ticket.Entry{}, "format"
		}
		// now + lease×1000 + Δ for some Δ in 2..=60000, without overflow,
		// computed in float-free big steps: check the difference.
		base := uint64(e.LeaseS) * 1000
		if e.NowMs > ^uint64(0)-base-60000 || e.ExpiryMs < e.NowMs+base+2 || e.ExpiryMs > e.NowMs+base+60000 {
			return ticket.Entry{}, "format"
		}
	}
	return e, ""
}

type naiveSnap struct {
	delta, index uint64
	tickets      []ticket.Ticket
	retired      []string
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
	if version != 1 && version != 2 { // 2 added the retired NodeIds
		return s, "version"
	}
	hdr, ok := cut(&b, 24)
	if !ok {
		return s, "format"
	}
	s.delta = binary.BigEndian.Uint64(hdr[0:8])
	s.index = binary.BigEndian.Uint64(hdr[8:16])
	count := binary.BigEndian.Uint64(hdr[16:24])
	if s.delta < 2 || s.delta > 60000 {
		return s, "delta"
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
		rec, ok3 := cut(&b, 25)
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
		if !naiveHolder.MatchString(t.Holder) || t.Token == 0 || t.Token > s.index || t.LeaseS < 1 || t.LeaseS > 250 ||
			t.ValidBeforeMs > ^uint64(0)-s.delta || t.ExpiryMs < t.ValidBeforeMs+s.delta {
			return s, "format"
		}
		s.tickets = append(s.tickets, t)
	}
	if version == 2 {
		n, ok := cutU64(&b)
		if !ok || n == 0 {
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
