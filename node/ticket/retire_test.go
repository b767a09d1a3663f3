package ticket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// SPEC §3.4: a Retire entry records a NodeId in the replicated state; a
// second one for the same NodeId changes nothing; it needs no Δ.
func TestRetireApplies(t *testing.T) {
	f := New(500)
	b, err := EncodeEntry(&Entry{Op: OpRetire, NodeID: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 2 {
		t.Fatalf("retire written as version %d, want 2", b[0])
	}
	if r := f.Apply(1, b); r.Code != CodeOK {
		t.Fatalf("retire before Init: %v", r.Code)
	}
	b2, _ := EncodeEntry(&Entry{Op: OpRetire, NodeID: "n2"})
	if r := f.Apply(2, b2); r.Code != CodeExisting {
		t.Fatalf("second retire: %v, want existing", r.Code)
	}
	b3, _ := EncodeEntry(&Entry{Op: OpRetire, NodeID: "a.1"})
	f.Apply(3, b3)
	if !f.IsRetired("n2") || f.IsRetired("n1") || !slices.Equal(f.Retired(), []string{"a.1", "n2"}) {
		t.Fatalf("retired = %v", f.Retired())
	}
}

// SPEC §3.4, §4-8: the Retire entry round-trips in version 2; a Retire in
// version 1 (which has no such op) and a bad NodeId are refused.
func TestRetireEntryFormat(t *testing.T) {
	e := Entry{Op: OpRetire, NowMs: 77, NodeID: strings.Repeat("x", MaxNodeIDLen)}
	b, err := EncodeEntry(&e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEntry(b)
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	v1 := append([]byte(nil), b...)
	v1[0] = 1
	if _, err := DecodeEntry(reseal(v1)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "version-2 entry") {
		t.Fatalf("retire as version 1: %v", err)
	}
	for _, id := range []string{"", strings.Repeat("x", MaxNodeIDLen+1), "a b", "n:1"} {
		if _, err := EncodeEntry(&Entry{Op: OpRetire, NodeID: id}); err == nil {
			t.Fatalf("encode retire %q accepted", id)
		}
		raw := reseal(append(appendEntry(nil, &Entry{Op: OpRetire, NodeID: id})[:0:0], appendEntry(nil, &Entry{Op: OpRetire, NodeID: id})...))
		if _, err := DecodeEntry(raw); !errors.Is(err, ErrFormat) {
			t.Fatalf("decode retire %q: %v", id, err)
		}
	}
}

// SPEC §3.4, issue 12 item 6: retired NodeIds travel in the snapshot
// (version 2) and survive a restore; without any the snapshot stays
// version 1, which this node still reads; a version 2 with none is refused.
func TestRetireSnapshot(t *testing.T) {
	h := filled(t)
	v1 := snapBytes(t, h.f)
	if binary.BigEndian.Uint16(v1[8:10]) != 1 {
		t.Fatalf("snapshot without retired NodeIds is version %d, want 1", binary.BigEndian.Uint16(v1[8:10]))
	}
	for i, id := range []string{"n3", "n1"} {
		b, _ := EncodeEntry(&Entry{Op: OpRetire, NodeID: id})
		if r := h.f.Apply(1000+uint64(i), b); r.Code != CodeOK {
			t.Fatal(r.Code)
		}
	}
	v2 := snapBytes(t, h.f)
	if binary.BigEndian.Uint16(v2[8:10]) != 2 {
		t.Fatalf("snapshot with retired NodeIds is version %d, want 2", binary.BigEndian.Uint16(v2[8:10]))
	}
	s, err := ReadSnapshot(bytes.NewReader(v2))
	if err != nil || !slices.Equal(s.Retired, []string{"n1", "n3"}) || len(s.Tickets) != 4 {
		t.Fatalf("read v2: %+v, %v", s, err)
	}
	g := New(500)
	if err := g.Restore(bytes.NewReader(v2)); err != nil {
		t.Fatal(err)
	}
	if !g.IsRetired("n1") || !g.IsRetired("n3") || !bytes.Equal(snapBytes(t, g), v2) {
		t.Fatalf("restored v2: retired %v", g.Retired())
	}
	// The previous version restores too, and replaces the retired set.
	if err := g.Restore(bytes.NewReader(v1)); err != nil {
		t.Fatalf("restore v1: %v", err)
	}
	if len(g.Retired()) != 0 || g.Len() != 4 || !bytes.Equal(snapBytes(t, g), v1) {
		t.Fatalf("restored v1: retired %v, %d tickets", g.Retired(), g.Len())
	}

	// Version 2 bodies that WriteTo never writes are refused.
	body := func(ids ...string) []byte {
		b := append([]byte(nil), v1[:len(v1)-4]...)
		binary.BigEndian.PutUint16(b[8:10], 2)
		b = binary.BigEndian.AppendUint64(b, uint64(len(ids)))
		for _, id := range ids {
			b = appendStr(b, id)
		}
		return resealSnap(append(b, 0, 0, 0, 0))
	}
	for name, c := range map[string]struct {
		in  []byte
		msg string
	}{
		"none":      {body(), "no retired NodeId"},
		"unsorted":  {body("n3", "n1"), "not strictly increasing"},
		"duplicate": {body("n1", "n1"), "not strictly increasing"},
		"bad id":    {body("n 1"), "retired NodeId 0"},
		"truncated": {func() []byte { b := body("n1"); return b[:len(b)-5] }(), "truncated"},
	} {
		if _, err := ReadSnapshot(bytes.NewReader(c.in)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: %v, want %q", name, err, c.msg)
		}
	}
	if _, err := ReadSnapshot(bytes.NewReader(body("n1", "n3"))); err != nil {
		t.Fatalf("hand-built v2: %v", err)
	}
}
