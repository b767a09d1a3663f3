package ticket

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func keepAliveEntry(now uint64, items ...RenewItem) Entry {
	return Entry{Op: OpKeepAlive, NowMs: now, RecvMs: now - 1, Items: items}
}

func renewItem(name, holder string, token uint64, lease uint8, now uint64) RenewItem {
	return RenewItem{Name: name, Holder: holder, Token: token, LeaseS: lease, ExpiryMs: now + uint64(lease)*1000 + testDelta}
}

// SPEC §4 (format version and checksum): a KeepAlive is a version-4
// entry; it round-trips byte for byte, the longest names and holders and
// the most items included.
func TestKeepAliveEntryRoundTrip(t *testing.T) {
	long, most := renewItem(strings.Repeat("n", MaxNameLen), strings.Repeat("~", MaxHolderLen), 1<<62, 250, t0), make([]RenewItem, MaxKeepAliveItems)
	for i := range most {
		most[i] = renewItem(fmt.Sprintf("t-%d", i), "h", uint64(i+1), uint8(1+i%250), t0)
	}
	for _, e := range []Entry{
		keepAliveEntry(t0, renewItem("a", "h", 7, 30, t0)),
		keepAliveEntry(t0, long, renewItem("a", " spaced ", 9, 1, t0), long),
		keepAliveEntry(t0, most...),
	} {
		b, err := EncodeEntry(&e)
		if err != nil {
			t.Fatalf("%d items: %v", len(e.Items), err)
		}
		if b[0] != 4 || b[1] != byte(OpKeepAlive) {
			t.Fatalf("version %d op %d, want 4 %d", b[0], b[1], OpKeepAlive)
		}
		got, err := DecodeEntry(b)
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("%d items: decoded %v", len(e.Items), err)
		}
	}
}

// SPEC §4: a malformed KeepAlive is refused whole (and so stops the node
// that reads it from its log), with the item and field named.
func TestKeepAliveEntryRefuses(t *testing.T) {
	good := keepAliveEntry(t0, renewItem("a", "h", 7, 30, t0), renewItem("b", "h", 8, 30, t0))
	body := func(mut func(e *Entry)) []byte {
		e := good
		e.Items = append([]RenewItem(nil), good.Items...)
		mut(&e)
		return appendEntry(nil, &e)
	}
	raw := body(func(*Entry) {})
	if _, err := DecodeEntry(raw); err != nil {
		t.Fatalf("the good one: %v", err)
	}
	tooMany := make([]RenewItem, MaxKeepAliveItems+1)
	for i := range tooMany {
		tooMany[i] = renewItem("a", "h", 1, 1, t0)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), raw...)) }
	cases := []struct {
		name string
		in   []byte
		kind error
		msg  string
	}{
		{"no items", body(func(e *Entry) { e.Items = nil }), ErrFormat, "carries 0 items"},
		{"too many items", body(func(e *Entry) { e.Items = tooMany }), ErrFormat, "carries 1025 items"},
		{"count past the body", edit(func(b []byte) []byte { b[19] = 200; return reseal(b) }), ErrFormat, "truncated"},
		{"count short of the body", edit(func(b []byte) []byte { b[19] = 1; return reseal(b) }), ErrFormat, "trailing"},
		{"truncated header", reseal(append(append([]byte(nil), raw[:14]...), 0, 0, 0, 0)), ErrFormat, "truncated"},
		{"as version 3", edit(func(b []byte) []byte { b[0] = 3; return reseal(b) }), ErrFormat, "keepalive is a version-4 entry"},
		{"bad name", body(func(e *Entry) { e.Items[1].Name = "-x" }), ErrFormat, "item 1: name must start"},
		{"empty holder", body(func(e *Entry) { e.Items[0].Holder = "" }), ErrFormat, "item 0: holder is empty"},
		{"token 0", body(func(e *Entry) { e.Items[1].Token = 0 }), ErrFormat, "item 1: renew needs a token"},
		{"lease 0", body(func(e *Entry) { e.Items[0].LeaseS = 0 }), ErrFormat, "item 0: lease_s 0"},
		{"lease 251", body(func(e *Entry) { e.Items[0].LeaseS = 251; e.Items[0].ExpiryMs = t0 + 251000 + testDelta }), ErrFormat, "item 0: lease_s 251"},
		{"expiry without Δ", body(func(e *Entry) { e.Items[1].ExpiryMs = t0 + 30000 }), ErrFormat, "item 1: expiry_ms"},
		{"recv after now", body(func(e *Entry) { e.RecvMs = e.NowMs + 1 }), ErrFormat, "after now_ms"},
		{"flipped bit", edit(func(b []byte) []byte { b[25] ^= 1; return b }), ErrChecksum, "CRC-32C"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeEntry(c.in)
			if !errors.Is(err, c.kind) || !strings.Contains(fmt.Sprint(err), c.msg) {
				t.Fatalf("got %v, want kind %v with %q", err, c.kind, c.msg)
			}
			// Applied, it stops the FSM: never a skip.
			h := newHarness(t)
			if r := h.f.Apply(2, c.in); r.Code != CodeFatal || h.f.Fatal() == nil {
				t.Fatalf("applied as %v", r.Code)
			}
		})
	}
	for _, e := range []Entry{
		{Op: OpRenew, NowMs: t0, RecvMs: t0, Name: "a", Holder: "h", Token: 1, LeaseS: 1, ExpiryMs: t0 + 1000 + testDelta, Items: good.Items},
		func() Entry { e := good; e.Name = "a"; return e }(),
		func() Entry { e := good; e.Token = 1; return e }(),
	} {
		if b, err := EncodeEntry(&e); err == nil {
			t.Fatalf("%s with %d items and name %q encoded to %x", e.Op, len(e.Items), e.Name, b)
		}
	}
}

// A KeepAlive's results: one per item, in order, each what a Renew entry
// of that item returns — renewed, or refused (not held, another holder,
// another token, the lease over, revoked) with the current ticket and
// nothing changed for it.
func TestKeepAliveItemResults(t *testing.T) {
	h := newHarness(t)
	a := h.grant("a", "h", 30, t0).Ticket
	b := h.grant("b", "h", 30, t0).Ticket
	c := h.grant("c", "other", 30, t0).Ticket
	d := h.grant("d", "h", 1, t0).Ticket
	rv := h.grant("rv", "h", 30, t0).Ticket
	wantCode(t, "revoke", h.apply(&Entry{Op: OpRevoke, NowMs: t0, Name: "rv"}), CodeOK)
	now := uint64(t0 + 2000)
	r := h.apply(&Entry{Op: OpKeepAlive, NowMs: now, RecvMs: now - 3, Items: []RenewItem{
		renewItem("a", "h", a.Token, 60, now),
		renewItem("b", "h", b.Token+1, 60, now),
		renewItem("c", "h", c.Token, 60, now),
		renewItem("none", "h", 1, 60, now),
		renewItem("d", "h", d.Token, 60, now),
		renewItem("rv", "h", rv.Token, 60, now),
		renewItem("a", "h", a.Token, 90, now), // again: sees the first item's renewal
	}})
	wantCode(t, "keepalive", r, CodeOK)
	want := []Code{CodeOK, CodeWrongToken, CodeWrongHolder, CodeNotHeld, CodeLeaseOver, CodeRevoked, CodeOK}
	if len(r.Items) != len(want) {
		t.Fatalf("%d results for %d items", len(r.Items), len(want))
	}
	for i, c := range want {
		wantCode(t, fmt.Sprintf("item %d", i), r.Items[i], c)
	}
	renewed := Ticket{Name: "a", Holder: "h", Token: a.Token, LeaseS: 90, ValidBeforeMs: now - 3 + 90000, ExpiryMs: now + 90000 + testDelta}
	if r.Items[6].Ticket != renewed {
		t.Fatalf("the second renewal of a: %+v, want %+v", r.Items[6].Ticket, renewed)
	}
	if r.Items[1].Ticket != b || r.Items[2].Ticket != c || r.Items[4].Ticket != d {
		t.Fatalf("refusals carry the current tickets: %+v", r.Items)
	}
	for name, was := range map[string]Ticket{"b": b, "c": c, "d": d} {
		if cur, _ := h.f.Get(name); cur != was {
			t.Fatalf("%s changed by a refused item: %+v, was %+v", name, cur, was)
		}
	}
	if cur, _ := h.f.Get("a"); cur != renewed {
		t.Fatalf("a is %+v, want %+v", cur, renewed)
	}
	// The fate of the entry holds the item results too.
	if f, _ := h.f.FateOf(h.idx); f.Kind != FateForgotten {
		t.Fatalf("fate without a term: %+v", f)
	}
	h.idx++
	r2 := h.f.ApplyTerm(h.idx, 2, encoded(t, &Entry{Op: OpKeepAlive, NowMs: now, RecvMs: now, Items: []RenewItem{renewItem("a", "h", a.Token, 5, now)}}))
	if f := wantFate(t, h.f, h.idx, FateApplied); !reflect.DeepEqual(f.Result, r2) || len(f.Result.Items) != 1 {
		t.Fatalf("fate %+v, applied %+v", f.Result, r2)
	}
}

// The fates of KeepAlives are bounded by their items too: a ring of
// large KeepAlives forgets its oldest until it holds at most
// fateItemBudget item results, and keeps the newest.
func TestFateRingItemBudget(t *testing.T) {
	h := newHarness(t)
	const per = 1000
	g := h.grant("a", "h", 250, t0).Ticket
	items := make([]RenewItem, per)
	for i := range items {
		items[i] = renewItem("a", "h", g.Token, 250, t0)
	}
	data := encoded(t, &Entry{Op: OpKeepAlive, NowMs: t0, RecvMs: t0, Items: items})
	first := h.idx + 1
	n := uint64(2 * fateItemBudget / per)
	for i := range n {
		h.f.ApplyTerm(first+i, 3, data)
	}
	last := first + n - 1
	if h.f.fates.items > fateItemBudget {
		t.Fatalf("the ring holds %d item results, above %d", h.f.fates.items, fateItemBudget)
	}
	kept := uint64(fateItemBudget / per)
	wantFate(t, h.f, last, FateApplied)
	wantFate(t, h.f, last-kept+1, FateApplied)
	wantFate(t, h.f, last-kept, FateForgotten)
	wantFate(t, h.f, first, FateForgotten)
	// Small entries after them push the large ones out as before, and
	// the ring grows again up to fateRingLen.
	for i := range uint64(fateRingLen) {
		h.f.ApplyTerm(last+1+i, 3, encoded(t, grantEntry(h, fmt.Sprint("t", i), t0)))
	}
	wantFate(t, h.f, last, FateForgotten)
	wantFate(t, h.f, last+1, FateApplied)
	if h.f.fates.items != 0 || h.f.fates.n != fateRingLen {
		t.Fatalf("ring of %d entries, %d items", h.f.fates.n, h.f.fates.items)
	}
}

// A KeepAlive is N Renew entries applied one after another with the same
// now (SPEC §4): after any history of grants, renewals, releases,
// revocations and expiries, applying the items as one KeepAlive to one
// FSM and as single Renews to another gives the same result for every
// item and the same state (tickets, expiry order, highest token), with a
// snapshot held across it or not.
func TestKeepAliveEqualsRenews(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		one, many := newHarness(rt), newHarness(rt)
		names := []string{"a", "b", "c", "d"}
		holders := []string{"h1", "h2"}
		clock := uint64(t0)
		both := func(e Entry) {
			ra, rb := one.apply(&e), many.apply(&e)
			if !reflect.DeepEqual(ra, rb) {
				rt.Fatalf("%s: %+v and %+v", e.Op, ra, rb)
			}
		}
		token := func(rt *rapid.T, name string) uint64 {
			if cur, ok := one.f.Get(name); ok && rapid.IntRange(0, 3).Draw(rt, "own token") > 0 {
				return cur.Token
			}
			return rapid.Uint64Range(1, one.idx+2).Draw(rt, "token")
		}
		holder := func(rt *rapid.T, name string) string {
			if cur, ok := one.f.Get(name); ok && rapid.IntRange(0, 3).Draw(rt, "own holder") > 0 {
				return cur.Holder
			}
			return rapid.SampledFrom(holders).Draw(rt, "holder")
		}
		rt.Repeat(map[string]func(*rapid.T){
			"tick": func(rt *rapid.T) { clock += rapid.Uint64Range(0, 4000).Draw(rt, "advance") },
			"grant": func(rt *rapid.T) {
				lease := uint8(rapid.IntRange(1, 5).Draw(rt, "lease"))
				both(Entry{Op: OpGrant, NowMs: clock, RecvMs: clock, Name: rapid.SampledFrom(names).Draw(rt, "name"),
					Holder: rapid.SampledFrom(holders).Draw(rt, "holder"), LeaseS: lease, ExpiryMs: clock + uint64(lease)*1000 + testDelta})
			},
			"release": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				both(Entry{Op: OpRelease, NowMs: clock, Name: name, Holder: holder(rt, name), Token: token(rt, name)})
			},
			"expire": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				both(Entry{Op: OpExpire, NowMs: clock, Name: name, Token: token(rt, name)})
			},
			"revoke": func(rt *rapid.T) {
				both(Entry{Op: OpRevoke, NowMs: clock, Name: rapid.SampledFrom(names).Draw(rt, "name")})
			},
			"keepalive": func(rt *rapid.T) {
				now := clock + rapid.Uint64Range(0, 3000).Draw(rt, "late")
				recv := now - rapid.Uint64Range(0, 2).Draw(rt, "recvlag")
				n := rapid.IntRange(1, 8).Draw(rt, "items")
				items := make([]RenewItem, n)
				for i := range items {
					name := rapid.SampledFrom(names).Draw(rt, "name")
					items[i] = renewItem(name, holder(rt, name), token(rt, name), uint8(rapid.IntRange(1, 5).Draw(rt, "lease")), now)
				}
				var pinned [2]*Snapshot
				if rapid.Bool().Draw(rt, "pinned") {
					for i, h := range []*harness{one, many} {
						s, err := h.f.Snapshot()
						if err != nil {
							rt.Fatalf("snapshot: %v", err)
						}
						pinned[i] = s
					}
				}
				before, _ := one.f.List("", 0)
				// The singles at consecutive indexes, the KeepAlive at the
				// last of them: both FSMs then stand at the same index.
				var want []Result
				for _, it := range items {
					want = append(want, many.apply(&Entry{Op: OpRenew, NowMs: now, RecvMs: recv, Name: it.Name, Holder: it.Holder, Token: it.Token, LeaseS: it.LeaseS, ExpiryMs: it.ExpiryMs}))
				}
				one.gap = uint64(n)
				got := one.apply(&Entry{Op: OpKeepAlive, NowMs: now, RecvMs: recv, Items: items})
				one.gap = 1
				if got.Code != CodeOK || !reflect.DeepEqual(got.Items, want) {
					rt.Fatalf("keepalive %+v: %+v\nrenews: %+v", items, got, want)
				}
				for i, s := range pinned {
					if s == nil {
						continue
					}
					back := thaw(s)
					s.Release()
					if i == 0 && !reflect.DeepEqual(back.Tickets, nonNil(before)) {
						rt.Fatalf("a snapshot held across the keepalive changed: %+v, was %+v", back.Tickets, before)
					}
				}
			},
			"": func(rt *rapid.T) {
				a, _ := one.f.List("", 0)
				b, _ := many.f.List("", 0)
				if !reflect.DeepEqual(a, b) {
					rt.Fatalf("states differ:\n keepalive %+v\n renews    %+v", a, b)
				}
				if one.f.Index() != many.f.Index() || one.f.HighestToken() != many.f.HighestToken() {
					rt.Fatalf("index %d/%d, highest token %d/%d", one.f.Index(), many.f.Index(), one.f.HighestToken(), many.f.HighestToken())
				}
				if x, y := one.f.Due(^uint64(0), 100), many.f.Due(^uint64(0), 100); len(x) != len(y) {
					rt.Fatalf("expiry index %d and %d", len(x), len(y))
				}
				x, okx := one.f.NextExpiry()
				y, oky := many.f.NextExpiry()
				if x != y || okx != oky {
					rt.Fatalf("next expiry %d/%v and %d/%v", x, okx, y, oky)
				}
			},
		})
	})
}

func nonNil(ts []Ticket) []Ticket {
	if ts == nil {
		return []Ticket{}
	}
	return ts
}
