package ticket

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// naive is the model: a plain map and the SPEC §4 rules written as directly
// as possible, with none of the FSM's structure (no heap, no encoding).
type naive struct {
	delta   uint64
	tickets map[string]Ticket
	issued  uint64 // largest token ever issued
}

func (m *naive) step(index uint64, e Entry) Code {
	cur, held := m.tickets[e.Name]
	switch e.Op {
	case OpGrant:
		if held && now(e) < cur.ExpiryMs {
			if cur.Holder != e.Holder {
				return CodeHeld
			}
			if cur.Revoked {
				return CodeRevoked
			}
			return CodeExisting
		}
		m.tickets[e.Name] = Ticket{Name: e.Name, Holder: e.Holder, Token: index, LeaseS: e.LeaseS, ValidBeforeMs: e.RecvMs + 1000*uint64(e.LeaseS), ExpiryMs: e.NowMs + 1000*uint64(e.LeaseS) + m.delta}
		m.issued = index
		return CodeOK
	case OpRenew, OpRelease:
		switch {
		case !held:
			return CodeNotHeld
		case cur.Holder != e.Holder:
			return CodeWrongHolder
		case cur.Token != e.Token:
			return CodeWrongToken
		}
		if e.Op == OpRelease {
			delete(m.tickets, e.Name)
			return CodeOK
		}
		if cur.Revoked {
			return CodeRevoked
		}
		if now(e) >= cur.ExpiryMs {
			return CodeLeaseOver
		}
		cur.LeaseS = e.LeaseS
		cur.ValidBeforeMs = e.RecvMs + 1000*uint64(e.LeaseS)
		cur.ExpiryMs = e.NowMs + 1000*uint64(e.LeaseS) + m.delta
		m.tickets[e.Name] = cur
		return CodeOK
	case OpExpire:
		if held && cur.Token == e.Token && now(e) >= cur.ExpiryMs {
			delete(m.tickets, e.Name)
			return CodeOK
		}
		return CodeNoop
	case OpRevoke:
		switch {
		case !held || now(e) >= cur.ExpiryMs:
			return CodeNotHeld
		case e.Token != 0 && e.Token != cur.Token:
			return CodeWrongToken
		case cur.Revoked:
			return CodeExisting
		}
		cur.Revoked = true
		m.tickets[e.Name] = cur
		return CodeOK
	}
	panic("op")
}

func now(e Entry) uint64 { return e.NowMs }

// SPEC §4 as a property: the FSM agrees with the naive model on every
// answer and every state, the highest token issued included; at most one
// holder per name at any entry time; a revoked ticket is never renewed
// and never freed before its expiry but by its holder's Release;
// every new token is above every token ever issued (not only the ones held
// now); no expiry ever moves later except by the holder's own successful
// Renew; a holder that did not release loses its ticket only to an entry
// (takeover Grant or Expire) whose now ≥ its conservative valid-before + Δ,
// the client-side rule that keeps two clients from both believing they
// hold it; snapshot+restore changes nothing and never adds Δ again.
// Proposers' clocks disagree by up to Δ (now jitters back and forth), as
// leaders' clocks may.
func TestFSMModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		h := newHarness(rt)
		m := &naive{delta: testDelta, tickets: map[string]Ticket{}}
		clock := uint64(t0)
		names := []string{"a", "b", "c"}
		holders := []string{"h1", "h2", "h3"}
		var kept []keptSnapshot

		entryNow := func(rt *rapid.T) uint64 {
			// Often hit a held ticket's expiry exactly, or one ms either side.
			if len(m.tickets) > 0 && rapid.IntRange(0, 2).Draw(rt, "edge") == 0 {
				cur := m.tickets[rapid.SampledFrom(names).Draw(rt, "edgename")]
				if cur.ExpiryMs != 0 {
					return cur.ExpiryMs + rapid.Uint64Range(0, 2).Draw(rt, "edgeoff") - 1
				}
			}
			j := rapid.IntRange(-testDelta, testDelta).Draw(rt, "jitter")
			return uint64(int64(clock) + int64(j))
		}
		tokenFor := func(rt *rapid.T, name string) uint64 {
			if cur, ok := m.tickets[name]; ok && rapid.IntRange(0, 3).Draw(rt, "tokenpick") > 0 {
				return cur.Token
			}
			return rapid.Uint64Range(1, h.idx+3).Draw(rt, "token")
		}
		run := func(rt *rapid.T, e Entry) {
			before := maps.Clone(m.tickets)
			issued := m.issued
			h.gap = rapid.Uint64Range(1, 3).Draw(rt, "gap")
			r := h.apply(&e)
			want := m.step(h.idx, e)
			if r.Code != want {
				rt.Fatalf("%s %+v: FSM %v, model %v", e.Op, e, r.Code, want)
			}
			// SPEC §4-6: the fencing token is strictly increasing globally,
			// above every token ever issued, released or expired ones too.
			if e.Op == OpGrant && r.Code == CodeOK && r.Ticket.Token <= issued {
				rt.Fatalf("token %d granted after token %d was issued", r.Ticket.Token, issued)
			}
			// SPEC §4 (client bound): a holder that did not release loses
			// the ticket only at an entry now ≥ valid-before + Δ.
			if old, ok := before[e.Name]; ok && r.Code == CodeOK && (e.Op == OpExpire || e.Op == OpGrant) {
				if e.NowMs < old.ValidBeforeMs+testDelta {
					rt.Fatalf("%s of %s at %d ends %s's lease before its valid-before %d + Δ", e.Op, e.Name, e.NowMs, old.Holder, old.ValidBeforeMs)
				}
			}
			// Invariants, checked against the state before the step.
			for name, old := range before {
				now, ok := m.tickets[name]
				if !ok || now.Token != old.Token {
					continue
				}
				if now.ExpiryMs > old.ExpiryMs && !(e.Op == OpRenew && r.Code == CodeOK && e.Name == name && e.Holder == old.Holder && e.Token == old.Token) {
					rt.Fatalf("expiry of %s moved later (%d → %d) by %s %v", name, old.ExpiryMs, now.ExpiryMs, e.Op, r.Code)
				}
			}
			// SPEC §4 (Revoke): the holder can no longer renew; the
			// ticket frees at its expiry, never earlier.
			if old, ok := before[e.Name]; ok && old.Revoked && r.Code == CodeOK {
				switch {
				case e.Op == OpRenew:
					rt.Fatalf("revoked %s renewed by %s", e.Name, e.Holder)
				case e.Op == OpExpire && e.NowMs < old.ExpiryMs, e.Op == OpGrant && e.NowMs < old.ExpiryMs:
					rt.Fatalf("revoked %s freed by %s at %d before its expiry %d", e.Name, e.Op, e.NowMs, old.ExpiryMs)
				}
			}
			if e.Op == OpGrant && r.Code == CodeOK {
				if old, ok := before[e.Name]; ok && old.ExpiryMs > e.NowMs {
					rt.Fatalf("second holder: %s granted to %s at %d while %s held it until %d", e.Name, e.Holder, e.NowMs, old.Holder, old.ExpiryMs)
				}
				for _, old := range before {
					if r.Ticket.Token <= old.Token {
						rt.Fatalf("token %d not above existing %d", r.Ticket.Token, old.Token)
					}
				}
			}
			compare(rt, h.f, m)
		}

		rt.Repeat(map[string]func(*rapid.T){
			"tick": func(rt *rapid.T) {
				clock += rapid.Uint64Range(0, 8000).Draw(rt, "advance")
			},
			"grant": func(rt *rapid.T) {
				n, lease := entryNow(rt), uint8(rapid.IntRange(1, 6).Draw(rt, "lease"))
				recv := n - rapid.Uint64Range(0, 1).Draw(rt, "recvlag")
				run(rt, Entry{Op: OpGrant, NowMs: n, RecvMs: recv, Name: rapid.SampledFrom(names).Draw(rt, "name"),
					Holder: rapid.SampledFrom(holders).Draw(rt, "holder"), LeaseS: lease, ExpiryMs: n + 1000*uint64(lease) + testDelta})
			},
			"renew": func(rt *rapid.T) {
				n, lease := entryNow(rt), uint8(rapid.IntRange(1, 6).Draw(rt, "lease"))
				name := rapid.SampledFrom(names).Draw(rt, "name")
				holder := rapid.SampledFrom(holders).Draw(rt, "holder")
				if cur, ok := m.tickets[name]; ok && rapid.Bool().Draw(rt, "own") {
					holder = cur.Holder
				}
				run(rt, Entry{Op: OpRenew, NowMs: n, RecvMs: n, Name: name, Holder: holder, Token: tokenFor(rt, name),
					LeaseS: lease, ExpiryMs: n + 1000*uint64(lease) + testDelta})
			},
			// A KeepAlive: the model applies its items as Renews, one
			// after another with the entry's now (SPEC §4).
			"keepalive": func(rt *rapid.T) {
				n := entryNow(rt)
				items := make([]RenewItem, rapid.IntRange(1, 4).Draw(rt, "items"))
				for i := range items {
					name := rapid.SampledFrom(names).Draw(rt, "name")
					holder := rapid.SampledFrom(holders).Draw(rt, "holder")
					if cur, ok := m.tickets[name]; ok && rapid.Bool().Draw(rt, "own") {
						holder = cur.Holder
					}
					lease := uint8(rapid.IntRange(1, 6).Draw(rt, "lease"))
					items[i] = RenewItem{Name: name, Holder: holder, Token: tokenFor(rt, name), LeaseS: lease, ExpiryMs: n + 1000*uint64(lease) + testDelta}
				}
				before := maps.Clone(m.tickets)
				h.gap = 1
				r := h.apply(&Entry{Op: OpKeepAlive, NowMs: n, RecvMs: n, Items: items})
				if r.Code != CodeOK || len(r.Items) != len(items) {
					rt.Fatalf("keepalive: %v with %d results for %d items", r.Code, len(r.Items), len(items))
				}
				for i, it := range items {
					want := m.step(h.idx, Entry{Op: OpRenew, NowMs: n, RecvMs: n, Name: it.Name, Holder: it.Holder, Token: it.Token, LeaseS: it.LeaseS, ExpiryMs: it.ExpiryMs})
					if r.Items[i].Code != want {
						rt.Fatalf("keepalive item %d %+v: FSM %v, model %v", i, it, r.Items[i].Code, want)
					}
					if old, ok := before[it.Name]; ok && old.Revoked && want == CodeOK {
						rt.Fatalf("revoked %s renewed by a keepalive", it.Name)
					}
				}
				compare(rt, h.f, m)
			},
			"release": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				holder := rapid.SampledFrom(holders).Draw(rt, "holder")
				if cur, ok := m.tickets[name]; ok && rapid.Bool().Draw(rt, "own") {
					holder = cur.Holder
				}
				run(rt, Entry{Op: OpRelease, NowMs: entryNow(rt), Name: name, Holder: holder, Token: tokenFor(rt, name)})
			},
			"expire": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				run(rt, Entry{Op: OpExpire, NowMs: entryNow(rt), Name: name, Token: tokenFor(rt, name)})
			},
			"revoke": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				var tok uint64 // any holder's
				if rapid.Bool().Draw(rt, "bytoken") {
					tok = tokenFor(rt, name)
				}
				run(rt, Entry{Op: OpRevoke, NowMs: entryNow(rt), Name: name, Token: tok})
			},
			"snapshot+restore": func(rt *rapid.T) {
				s, err := h.f.Snapshot()
				if err != nil {
					rt.Fatalf("snapshot: %v", err)
				}
				// Version 4 (with a position) carries revocations and
				// the highest token.
				s.Raft = &Position{Index: h.idx, Term: 1, ConfigurationIndex: 1, Servers: []Server{{ID: "n1", Address: "a1"}}}
				var a, b bytes.Buffer
				if _, err := s.WriteTo(&a); err != nil {
					rt.Fatalf("write: %v", err)
				}
				f2 := New(testDelta)
				if err := f2.Restore(bytes.NewReader(a.Bytes())); err != nil {
					rt.Fatalf("restore: %v", err)
				}
				s2, err := f2.Snapshot()
				if err != nil {
					rt.Fatalf("snapshot of the restored state: %v", err)
				}
				s2.Raft = s.Raft
				if _, err := s2.WriteTo(&b); err != nil {
					rt.Fatalf("write: %v", err)
				}
				if !bytes.Equal(a.Bytes(), b.Bytes()) {
					rt.Fatalf("snapshot of the restored state differs")
				}
				s.Release()
				s2.Release()
				if f2.Index() != h.f.Index() || f2.Delta() != testDelta {
					rt.Fatalf("restored index %d Δ %d", f2.Index(), f2.Delta())
				}
				h.f = f2
				compare(rt, h.f, m)
			},
			// A snapshot kept while later entries apply is the state of
			// the moment it was taken (the FSM's tree is copy-on-write).
			"snapshot (kept)": func(rt *rapid.T) {
				s, err := h.f.Snapshot()
				if err != nil {
					rt.Fatalf("snapshot: %v", err)
				}
				kept = append(kept, keptSnapshot{s: s, want: sortedTickets(m.tickets)})
			},
			"write a kept snapshot": func(rt *rapid.T) {
				if len(kept) == 0 {
					rt.Skip("none kept")
				}
				k := kept[0]
				kept = kept[1:]
				k.s.Raft = &Position{Index: k.s.Index, Term: 1, ConfigurationIndex: 1, Servers: []Server{{ID: "n1", Address: "a1"}}}
				var b bytes.Buffer
				if _, err := k.s.WriteTo(&b); err != nil {
					rt.Fatalf("write: %v", err)
				}
				back, err := ReadSnapshot(&b)
				if err != nil {
					rt.Fatalf("read back: %v", err)
				}
				if !slices.Equal(back.Tickets, k.want) {
					rt.Fatalf("kept snapshot holds %+v, the state when it was taken %+v", back.Tickets, k.want)
				}
				// Released, the FSM changes its tickets in place again
				// (once no other snapshot is pinned): never write it again.
				k.s.Release()
				if _, err := k.s.WriteTo(io.Discard); !errors.Is(err, ErrReleased) {
					rt.Fatalf("write after Release: %v, want ErrReleased", err)
				}
			},
			"": func(rt *rapid.T) { compare(rt, h.f, m) },
		})
	})
}

func compare(rt *rapid.T, f *FSM, m *naive) {
	if f.HighestToken() != m.issued {
		rt.Fatalf("highest token %d, model %d", f.HighestToken(), m.issued)
	}
	got, _ := f.List("", 0)
	if len(got) != len(m.tickets) {
		rt.Fatalf("FSM holds %d tickets, model %d", len(got), len(m.tickets))
	}
	for _, g := range got {
		if w := m.tickets[g.Name]; g != w {
			rt.Fatalf("ticket %s: FSM %+v model %+v", g.Name, g, w)
		}
	}
	// The expiry index agrees with the state.
	due := f.Due(^uint64(0), 1<<30)
	if len(due) != len(got) {
		rt.Fatalf("expiry index holds %d, state %d", len(due), len(got))
	}
	if len(got) > 0 {
		least := got[0].ExpiryMs
		for _, g := range got {
			least = min(least, g.ExpiryMs)
		}
		if next, _ := f.NextExpiry(); next != least {
			rt.Fatal(fmt.Sprintf("NextExpiry %d, least expiry %d", next, least))
		}
	}
}

// keptSnapshot is a snapshot taken and written only later, with the
// model's tickets when it was taken.
type keptSnapshot struct {
	s    *Snapshot
	want []Ticket
}

func sortedTickets(m map[string]Ticket) []Ticket {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b Ticket) int { return strings.Compare(a.Name, b.Name) })
	return out
}
