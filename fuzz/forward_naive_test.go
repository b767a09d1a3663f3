package fuzz

import (
	"bytes"
	"encoding/binary"
	"io"

	"github.com/tckclk/tckclk/node/cluster/forward"
)

// The naive forwarding-frame decoder: encoding/binary.Read into fixed
// structs and a byte-at-a-time string reader, written from the frame layout
// in forward's doc without its decoder's code paths. ok is false for
// anything the layout does not allow.

type naiveReader struct {
	r  *bytes.Reader
	ok bool
}

func (n *naiveReader) num(v any) {
	if n.ok && binary.Read(n.r, binary.BigEndian, v) != nil {
		n.ok = false
	}
}

func (n *naiveReader) str() string {
	var l uint16
	n.num(&l)
	if !n.ok {
		return ""
	}
	var sb []byte
	for range int(l) {
		c, err := n.r.ReadByte()
		if err != nil {
			n.ok = false
			return ""
		}
		sb = append(sb, c)
	}
	return string(sb)
}

func (n *naiveReader) header(kind uint8) uint64 {
	var h struct {
		Version, Kind uint8
		ID            uint64
	}
	n.num(&h)
	if h.Version != 1 || h.Kind != kind {
		n.ok = false
	}
	return h.ID
}

func (n *naiveReader) finished() bool {
	_, err := n.r.ReadByte()
	return n.ok && err == io.EOF
}

func naiveForwardRequest(b []byte) (uint64, forward.Request, bool) {
	if len(b) > forward.MaxFrame {
		return 0, forward.Request{}, false
	}
	n := &naiveReader{r: bytes.NewReader(b), ok: true}
	id := n.header(1)
	var op uint8
	n.num(&op)
	r := forward.Request{Op: forward.Op(op)}
	switch op {
	case 1: // grant
		r.Name, r.Holder = n.str(), n.str()
		n.num(&r.LeaseS)
		n.num(&r.WaitMs)
	case 2: // renew
		r.Name, r.Holder = n.str(), n.str()
		n.num(&r.Token)
		n.num(&r.LeaseS)
	case 3: // release
		r.Name, r.Holder = n.str(), n.str()
		n.num(&r.Token)
	case 4: // get
		r.Name = n.str()
	case 5: // list
		r.Prefix = n.str()
		n.num(&r.Limit)
	case 6: // watch
		r.Name = n.str()
		n.num(&r.Index)
		n.num(&r.WaitMs)
	case 7: // revoke
		r.Name = n.str()
		n.num(&r.Token)
	default:
		return 0, forward.Request{}, false
	}
	if !n.finished() {
		return 0, forward.Request{}, false
	}
	return id, r, true
}

// ticket reads one ticket; flagged: with its flags byte (bit 0 revoked,
// bit 1 a u32 count of waiters > 0 follows).
func (n *naiveReader) ticket(flagged bool) forward.Ticket {
	t := forward.Ticket{Name: n.str(), Holder: n.str()}
	n.num(&t.Token)
	n.num(&t.LeaseS)
	n.num(&t.ConservativeValidBeforeUnixMs)
	n.num(&t.ServerExpiryUnixMs)
	n.num(&t.RemainingMs)
	if flagged {
		var f uint8
		n.num(&f)
		if f > 3 {
			n.ok = false
		}
		t.Revoked = f&1 == 1
		if f&2 == 2 {
			n.num(&t.Waiters)
			if t.Waiters == 0 {
				n.ok = false
			}
		}
	}
	return t
}

// marked: the ticket has a flag set (revoked, or waiters).
func marked(t forward.Ticket) bool { return t.Revoked || t.Waiters > 0 }

func naiveForwardResponse(b []byte) (uint64, forward.Response, bool) {
	if len(b) > forward.MaxFrame {
		return 0, forward.Response{}, false
	}
	n := &naiveReader{r: bytes.NewReader(b), ok: true}
	id := n.header(2)
	var code uint8
	n.num(&code)
	if code > 9 || code == 7 || code == 8 { // 7 and 8 retired (never sent, refused)
		return 0, forward.Response{}, false
	}
	r := forward.Response{Code: forward.Code(code), Message: n.str(), Stage: n.str(), Reason: n.str(), Holder: n.str()}
	n.num(&r.Token)
	var tag uint8
	n.num(&tag)
	// Tags 17, 18, 19 and 20 are 1 to 4 whose tickets end with a flags
	// byte; used only when a ticket is revoked or has waiters.
	flagged := tag >= 17 && tag <= 20
	if flagged {
		tag -= 16
	}
	revoked := false
	switch tag {
	case 0:
	case 1:
		t := n.ticket(flagged)
		r.Ticket = &t
		revoked = marked(t)
	case 4: // ticket, waited_ms > 0
		t := n.ticket(flagged)
		revoked = marked(t)
		r.Ticket = &t
		n.num(&r.WaitedMs)
		if r.WaitedMs == 0 {
			return 0, forward.Response{}, false
		}
	case 2:
		var count uint32
		n.num(&count)
		l := &forward.List{}
		for i := uint32(0); i < count && n.ok; i++ {
			l.Tickets = append(l.Tickets, n.ticket(flagged))
			revoked = revoked || marked(l.Tickets[i])
		}
		var tr uint8
		n.num(&tr)
		if tr > 1 {
			return 0, forward.Response{}, false
		}
		l.Truncated = tr == 1
		r.List = l
	case 3: // watch: index, held, ticket when held
		w := &forward.Watched{}
		n.num(&w.Index)
		var held uint8
		n.num(&held)
		if held > 1 {
			return 0, forward.Response{}, false
		}
		if held == 1 {
			t := n.ticket(flagged)
			w.Ticket = &t
			revoked = marked(t)
		}
		r.Watched = w
	default:
		return 0, forward.Response{}, false
	}
	if !n.finished() || flagged != revoked {
		return 0, forward.Response{}, false
	}
	return id, r, true
}
