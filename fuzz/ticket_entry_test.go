package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/tckclk/tckclk/node/ticket"
)

func kindOf(err error) naiveKind {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ticket.ErrVersion):
		return "version"
	case errors.Is(err, ticket.ErrChecksum):
		return "checksum"
	case errors.Is(err, ticket.ErrDeltaRange):
		return "delta"
	case errors.Is(err, ticket.ErrFormat):
		return "format"
	}
	return "other: " + naiveKind(err.Error())
}

func entrySeeds() [][]byte {
	now := uint64(1_700_000_000_001)
	var out [][]byte
	for _, e := range []ticket.Entry{
		{Op: ticket.OpInit, DeltaMs: 500},
		{Op: ticket.OpGrant, NowMs: now, RecvMs: now - 1, Name: "db.migrate:1", Holder: "worker-1", LeaseS: 30, ExpiryMs: now + 30000 + 500},
		{Op: ticket.OpRenew, NowMs: now, RecvMs: now, Name: "a", Holder: "h", Token: 7, LeaseS: 250, ExpiryMs: now + 250000 + 2},
		{Op: ticket.OpRelease, NowMs: now, Name: "a", Holder: "h", Token: 7},
		{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: "b", Holder: " spaced holder ", LeaseS: 1, ExpiryMs: now + 1000 + 500},
		{Op: ticket.OpExpire, NowMs: now, Name: "a", Token: 7},
		{Op: ticket.OpRetire, NowMs: now, NodeID: "node-3.dc_1"},
		{Op: ticket.OpRevoke, NowMs: now, Name: "a"},
		{Op: ticket.OpRevoke, NowMs: now, Name: "db.migrate:1", Token: 1<<48 | 7},
		{Op: ticket.OpKeepAlive, NowMs: now, RecvMs: now - 1, Items: []ticket.RenewItem{
			{Name: "a", Holder: "h", Token: 7, LeaseS: 250, ExpiryMs: now + 250000 + 2},
			{Name: "db.migrate:1", Holder: " spaced holder ", Token: 1<<48 | 9, LeaseS: 1, ExpiryMs: now + 1000 + 60000},
		}},
	} {
		b, err := ticket.EncodeEntry(&e)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzTicketEntry: DecodeEntry never panics; it agrees with the naive
// decoder on acceptance, refusal kind and fields; accepted entries
// re-encode byte-identically; applying any input to an FSM never panics
// and a refused input stops the FSM (never a skip).
func FuzzTicketEntry(f *testing.F) {
	for _, b := range entrySeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkEntry(t, data)
		// A checksum stops a fuzzer at the door: also try the input as a
		// body with a valid CRC-32C appended, so the fields get explored.
		checkEntry(t, sealed(data))
	})
}

// sealed returns b followed by its CRC-32C.
func sealed(b []byte) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), b...), crc32.Checksum(b, naiveCRC))
}

func checkEntry(t *testing.T, data []byte) {
	e, err := ticket.DecodeEntry(data)
	ne, nk := naiveEntry(data)
	if got := kindOf(err); got != nk {
		t.Fatalf("%x: ticket says %q (%v), naive says %q", data, got, err, nk)
	}
	fsm := ticket.New(500)
	init, _ := ticket.EncodeEntry(&ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
	fsm.Apply(1, init)
	r := fsm.Apply(2, data)
	if err != nil {
		var de *ticket.DecodeError
		if !errors.As(err, &de) || de.What != "log entry" {
			t.Fatalf("untyped error %T %v", err, err)
		}
		if r.Code != ticket.CodeFatal || fsm.Fatal() == nil {
			t.Fatalf("refused entry applied as %v", r.Code)
		}
		return
	}
	if !reflect.DeepEqual(e, ne) {
		t.Fatalf("fields differ:\n ticket %+v\n naive  %+v", e, ne)
	}
	again, err := ticket.EncodeEntry(&e)
	if err != nil || !bytes.Equal(again, data) {
		t.Fatalf("re-encode: %v\n got %x\nwant %x", err, again, data)
	}
	if e.Op != ticket.OpInit && r.Code == ticket.CodeFatal {
		t.Fatalf("valid entry stopped the FSM: %v", r.Err)
	}
}
