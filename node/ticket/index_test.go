package ticket

import (
	"bytes"
	"slices"
	"testing"
)

// SPEC §4.2 (watch): the modify index of a ticket is the entry that last
// changed it; a free ticket reports the last Release/Expire; a refused
// entry changes nothing and notifies nobody; a Restore reports the
// snapshot's index everywhere and notifies "" (everything).
func TestModifyIndexAndOnChange(t *testing.T) {
	h := newHarness(t)
	var got []string
	h.f.OnChange(func(name string) { got = append(got, name) })
	g := h.grant("a", "h1", 10, 1000)
	if _, ok, idx := h.f.GetIndexed("a"); !ok || idx != g.Ticket.Token {
		t.Fatalf("after grant: index %d, want %d", idx, g.Ticket.Token)
	}
	if r := h.grant("a", "h2", 10, 1001); r.Code != CodeHeld {
		t.Fatalf("second grant: %v", r.Code)
	}
	r := h.renew("a", "h1", g.Ticket.Token, 10, 1002)
	if r.Code != CodeOK {
		t.Fatal(r.Code)
	}
	if _, _, idx := h.f.GetIndexed("a"); idx != h.idx {
		t.Fatalf("after renew: index %d, want %d", idx, h.idx)
	}
	if _, ok, idx := h.f.GetIndexed("free"); ok || idx != 0 {
		t.Fatalf("never held: %v %d", ok, idx)
	}
	h.release("a", "h1", g.Ticket.Token, 1003)
	rel := h.idx
	if _, ok, idx := h.f.GetIndexed("a"); ok || idx != rel {
		t.Fatalf("after release: %v %d, want %d", ok, idx, rel)
	}
	if want := []string{"a", "a", "a"}; !slices.Equal(got, want) {
		t.Fatalf("notified %q, want %q (the refused grant notifies nobody)", got, want)
	}
	g2 := h.grant("b", "h1", 1, 2000)
	h.expire("b", g2.Ticket.Token, 1999) // not due: a no-op
	if _, ok, _ := h.f.GetIndexed("b"); !ok {
		t.Fatal("expired early")
	}
	h.expire("b", g2.Ticket.Token, g2.Ticket.ExpiryMs)
	if _, ok, idx := h.f.GetIndexed("b"); ok || idx != h.idx {
		t.Fatalf("after expire: %v %d, want %d", ok, idx, h.idx)
	}
	h.grant("c", "h1", 10, 3000)
	snap := snapBytes(t, h.f)
	f2 := New(testDelta)
	var restored []string
	f2.OnChange(func(name string) { restored = append(restored, name) })
	if err := f2.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if _, ok, idx := f2.GetIndexed("c"); !ok || idx != h.idx {
		t.Fatalf("restored c: %v %d, want %d", ok, idx, h.idx)
	}
	if _, _, idx := f2.GetIndexed("a"); idx != h.idx {
		t.Fatalf("restored free ticket: %d, want the snapshot index %d", idx, h.idx)
	}
	if !slices.Equal(restored, []string{""}) {
		t.Fatalf("restore notified %q", restored)
	}
}
