package ticket

import (
	"errors"
	"testing"
)

const t0 = 1_700_000_000_000 // a wall time in ms

func wantCode(t *testing.T, what string, r Result, c Code) {
	t.Helper()
	if r.Code != c {
		t.Fatalf("%s: code %v (err %v), want %v", what, r.Code, r.Err, c)
	}
}

// SPEC §4-1: a free ticket is granted; the token is the Grant's Raft index;
// expiry = now + lease_s×1000 + Δ, absolute; the client bound has no Δ.
func TestGrantFree(t *testing.T) {
	h := newHarness(t)
	h.gap = 5
	r := h.grant("job", "alice", 30, t0)
	wantCode(t, "grant", r, CodeOK)
	want := Ticket{Name: "job", Holder: "alice", Token: h.idx, LeaseS: 30, ValidBeforeMs: t0 + 30000, ExpiryMs: t0 + 30000 + testDelta}
	if r.Ticket != want {
		t.Fatalf("got %+v want %+v", r.Ticket, want)
	}
	if got, ok := h.f.Get("job"); !ok || got != want {
		t.Fatalf("Get: %+v %v", got, ok)
	}
}

// SPEC §4-1: another holder gets 409 held with the current holder and token.
func TestGrantHeld(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 30, t0)
	r := h.grant("job", "bob", 30, g.Ticket.ExpiryMs-1)
	wantCode(t, "grant by bob", r, CodeHeld)
	if r.Ticket != g.Ticket {
		t.Fatalf("held answer %+v, want %+v", r.Ticket, g.Ticket)
	}
}

// SPEC §4-1: a repeated Grant by the holder returns the grant unchanged — no
// extension, even with a longer lease.
func TestGrantIdempotent(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 10, t0)
	r := h.grant("job", "alice", 250, t0+9000)
	wantCode(t, "re-grant", r, CodeExisting)
	if r.Ticket != g.Ticket {
		t.Fatalf("re-grant changed the ticket: %+v, was %+v", r.Ticket, g.Ticket)
	}
	if cur, _ := h.f.Get("job"); cur != g.Ticket {
		t.Fatalf("state changed: %+v", cur)
	}
}

// SPEC §4-1: once the entry's now reaches the server-side expiry, anyone
// (the old holder too) gets a new grant with a larger token.
func TestGrantAfterExpiry(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 1, t0)
	r := h.grant("job", "bob", 5, g.Ticket.ExpiryMs)
	wantCode(t, "takeover", r, CodeOK)
	if r.Ticket.Holder != "bob" || r.Ticket.Token <= g.Ticket.Token {
		t.Fatalf("takeover %+v after %+v", r.Ticket, g.Ticket)
	}
	r2 := h.grant("job", "bob", 5, r.Ticket.ExpiryMs)
	wantCode(t, "re-grant after own expiry", r2, CodeOK)
	if r2.Ticket.Token <= r.Ticket.Token {
		t.Fatalf("token did not increase: %d then %d", r.Ticket.Token, r2.Ticket.Token)
	}
}

// SPEC §4-2, §4-6: Renew keeps the token, needs holder and token, and only
// while now < the current expiry; new expiry = now + lease + Δ.
func TestRenewRules(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 30, t0)
	tok := g.Ticket.Token
	wantCode(t, "renew nobody", h.renew("none", "alice", tok, 30, t0+1), CodeNotHeld)
	wantCode(t, "renew wrong holder", h.renew("job", "bob", tok, 30, t0+1), CodeWrongHolder)
	wantCode(t, "renew wrong token", h.renew("job", "alice", tok+1, 30, t0+1), CodeWrongToken)
	if cur, _ := h.f.Get("job"); cur != g.Ticket {
		t.Fatalf("refused renews changed the ticket: %+v", cur)
	}
	r := h.renew("job", "alice", tok, 60, t0+20000)
	wantCode(t, "renew", r, CodeOK)
	want := Ticket{Name: "job", Holder: "alice", Token: tok, LeaseS: 60, ValidBeforeMs: t0 + 20000 + 60000, ExpiryMs: t0 + 20000 + 60000 + testDelta}
	if r.Ticket != want {
		t.Fatalf("renewed %+v want %+v", r.Ticket, want)
	}
	wantCode(t, "renew at expiry", h.renew("job", "alice", tok, 60, want.ExpiryMs), CodeLeaseOver)
	if cur, _ := h.f.Get("job"); cur != want {
		t.Fatalf("late renew changed the ticket: %+v", cur)
	}
}

// SPEC §4-3, §4-6: Release needs holder and token.
func TestReleaseRules(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 30, t0)
	tok := g.Ticket.Token
	wantCode(t, "release nobody", h.release("none", "alice", tok, t0), CodeNotHeld)
	wantCode(t, "release wrong holder", h.release("job", "bob", tok, t0), CodeWrongHolder)
	wantCode(t, "release wrong token", h.release("job", "alice", tok-1, t0), CodeWrongToken)
	wantCode(t, "release", h.release("job", "alice", tok, t0), CodeOK)
	if _, ok := h.f.Get("job"); ok {
		t.Fatal("released ticket still present")
	}
	wantCode(t, "release twice", h.release("job", "alice", tok, t0), CodeNotHeld)
}

// SPEC §4-4: Expire applies only if the token matches and now ≥ the current
// stored expiry.
func TestExpireRules(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 30, t0)
	exp := g.Ticket.ExpiryMs
	wantCode(t, "expire early", h.expire("job", g.Ticket.Token, exp-1), CodeNoop)
	wantCode(t, "expire other token", h.expire("job", g.Ticket.Token+1, exp), CodeNoop)
	wantCode(t, "expire absent", h.expire("nope", 1, exp), CodeNoop)
	if h.f.Len() != 1 {
		t.Fatal("no-op expire removed the ticket")
	}
	wantCode(t, "expire", h.expire("job", g.Ticket.Token, exp), CodeOK)
	if h.f.Len() != 0 {
		t.Fatal("expire kept the ticket")
	}
}

// SPEC §4-5 (race): an Expire proposed from a stale view (the leader saw the
// old expiry pass) that commits after the holder's Renew is a no-op: the
// FSM decides against the current state, not the proposer's view.
func TestRaceExpireAfterRenew(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 10, t0)
	staleExpiry := g.Ticket.ExpiryMs
	// The leader's view: staleExpiry passed at its clock; it proposes
	// Expire(token, now=staleExpiry). Before that commits, the holder's
	// Renew (proposed at staleExpiry-1 by its proposer) commits.
	wantCode(t, "renew", h.renew("job", "alice", g.Ticket.Token, 10, staleExpiry-1), CodeOK)
	r := h.expire("job", g.Ticket.Token, staleExpiry)
	wantCode(t, "stale expire", r, CodeNoop)
	cur, ok := h.f.Get("job")
	if !ok || cur.ExpiryMs != staleExpiry-1+10000+testDelta || cur.Token != g.Ticket.Token {
		t.Fatalf("after stale expire: %+v %v", cur, ok)
	}
}

// SPEC §4-5 (race): a takeover Grant proposed from a stale view (its
// proposer saw the ticket expired) that commits after the holder's Renew
// gets 409 held, and nothing changes.
func TestRaceTakeoverGrantAfterRenew(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 10, t0)
	renewed := h.renew("job", "alice", g.Ticket.Token, 10, g.Ticket.ExpiryMs-1)
	wantCode(t, "renew", renewed, CodeOK)
	r := h.grant("job", "bob", 10, g.Ticket.ExpiryMs+5)
	wantCode(t, "stale takeover", r, CodeHeld)
	if cur, _ := h.f.Get("job"); cur != renewed.Ticket {
		t.Fatalf("takeover changed the ticket: %+v", cur)
	}
}

// SPEC §4-5 (race): an Expire for an old token committing after a Release
// and a new Grant does not touch the new grant.
func TestRaceExpireOldTokenAfterRegrant(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 1, t0)
	wantCode(t, "release", h.release("job", "alice", g.Ticket.Token, t0+10), CodeOK)
	g2 := h.grant("job", "bob", 30, t0+20)
	wantCode(t, "old-token expire", h.expire("job", g.Ticket.Token, g2.Ticket.ExpiryMs), CodeNoop)
	if cur, _ := h.f.Get("job"); cur != g2.Ticket {
		t.Fatalf("old-token expire changed the ticket: %+v", cur)
	}
}

// SPEC §4-9: Δ is replicated state; a Grant before it is refused, an entry
// whose expiry was computed with another Δ is refused, an Init with a Δ
// other than the configured one stops the FSM.
func TestDeltaInState(t *testing.T) {
	f := New(testDelta)
	e := Entry{Op: OpGrant, NowMs: t0, RecvMs: t0, Name: "a", Holder: "h", LeaseS: 1, ExpiryMs: t0 + 1000 + testDelta}
	b, _ := EncodeEntry(&e)
	if r := f.Apply(1, b); r.Code != CodeNoDelta {
		t.Fatalf("grant before init: %v", r.Code)
	}
	h := newHarness(t)
	other := Entry{Op: OpGrant, NowMs: t0, RecvMs: t0, Name: "a", Holder: "h", LeaseS: 1, ExpiryMs: t0 + 1000 + 400}
	wantCode(t, "other Δ", h.apply(&other), CodeBadExpiry)
	if h.f.Len() != 0 {
		t.Fatal("bad-expiry grant applied")
	}
	r := h.apply(&Entry{Op: OpInit, DeltaMs: 400})
	wantCode(t, "init with other Δ", r, CodeFatal)
	if !errors.Is(r.Err, ErrDeltaMismatch) {
		t.Fatalf("err %v", r.Err)
	}
	if h.f.Delta() != testDelta {
		t.Fatalf("Δ changed to %d", h.f.Delta())
	}
}

// SPEC §4-8: a bad entry stops the FSM: nothing after it applies and no
// snapshot of the partial state can be taken.
func TestFatalLatch(t *testing.T) {
	h := newHarness(t)
	h.grant("a", "h", 30, t0)
	good, _ := EncodeEntry(&Entry{Op: OpGrant, NowMs: t0, RecvMs: t0, Name: "b", Holder: "h", LeaseS: 30, ExpiryMs: t0 + 30000 + testDelta})
	bad := append([]byte(nil), good...)
	bad[5] ^= 0xff
	r := h.f.Apply(100, bad)
	wantCode(t, "bad checksum", r, CodeFatal)
	var ae *ApplyError
	if !errors.As(r.Err, &ae) || ae.Index != 100 || !errors.Is(r.Err, ErrChecksum) {
		t.Fatalf("err %v", r.Err)
	}
	select {
	case <-h.f.Stopped():
	default:
		t.Fatal("Stopped not closed")
	}
	wantCode(t, "good after bad", h.f.Apply(101, good), CodeFatal)
	if _, ok := h.f.Get("b"); ok {
		t.Fatal("entry after the bad one was applied")
	}
	if _, err := h.f.Snapshot(); !errors.Is(err, ErrStopped) {
		t.Fatalf("snapshot after fatal: %v", err)
	}
}

func TestIndexMustIncrease(t *testing.T) {
	h := newHarness(t)
	h.grant("a", "h", 30, t0)
	b, _ := EncodeEntry(&Entry{Op: OpExpire, NowMs: t0, Name: "a", Token: 1})
	r := h.f.Apply(h.idx, b)
	if r.Code != CodeFatal || !errors.Is(r.Err, ErrOrder) {
		t.Fatalf("replayed index: %v %v", r.Code, r.Err)
	}
}

// SPEC §4-4: the leader's expiry loop sees exactly the tickets whose
// expiry ≤ now, after releases and after renews that move an expiry later
// (out of the due set) or earlier (a shorter lease: into it); the heap
// follows every change.
func TestDue(t *testing.T) {
	h := newHarness(t)
	const cut = t0 + 20000
	want := map[string]bool{}
	for i := range 200 {
		name := string(rune('a'+i%26)) + string(rune('a'+i/26))
		r := h.grant(name, "h", uint8(1+i%50), t0+uint64(i*37%1000))
		if r.Ticket.ExpiryMs <= cut {
			want[name] = true
		}
	}
	released, later, earlier := 0, 0, 0
	for i := range 200 {
		name := string(rune('a'+i%26)) + string(rune('a'+i/26))
		cur, _ := h.f.Get(name)
		switch {
		case cur.Token%3 == 0: // release
			wantCode(t, "release "+name, h.release(name, "h", cur.Token, t0), CodeOK)
			delete(want, name)
			released++
		case cur.Token%3 == 1 && want[name]: // renew a due one past the cut
			r := h.renew(name, "h", cur.Token, 50, t0+1000)
			wantCode(t, "renew later "+name, r, CodeOK)
			if r.Ticket.ExpiryMs <= cut {
				t.Fatalf("renewed %s still due at %d", name, r.Ticket.ExpiryMs)
			}
			delete(want, name)
			later++
		case cur.Token%3 == 1 && !want[name]: // renew a later one with a short lease: now due
			r := h.renew(name, "h", cur.Token, 1, t0+1000)
			wantCode(t, "renew earlier "+name, r, CodeOK)
			if r.Ticket.ExpiryMs > cut {
				t.Fatalf("shortened %s not due: %d", name, r.Ticket.ExpiryMs)
			}
			want[name] = true
			earlier++
		}
	}
	if released == 0 || later == 0 || earlier == 0 {
		t.Fatalf("the test exercised %d releases, %d renews later, %d renews earlier; want each", released, later, earlier)
	}
	due := h.f.Due(cut, 1000)
	got := map[string]bool{}
	for _, d := range due {
		cur, ok := h.f.Get(d.Name)
		if !ok || cur.Token != d.Token || cur.ExpiryMs > cut {
			t.Fatalf("due %+v but state %+v %v", d, cur, ok)
		}
		got[d.Name] = true
	}
	for name := range want {
		if !got[name] {
			t.Errorf("%s is due but Due left it out", name)
		}
	}
	if len(got) != len(want) || len(due) != len(got) {
		t.Fatalf("due %d tickets (%d distinct), want %d", len(due), len(got), len(want))
	}
	if len(h.f.Due(cut, 3)) != min(3, len(want)) {
		t.Fatal("max not honoured")
	}
	least := uint64(1<<64 - 1)
	for _, tk := range mustList(t, h.f) {
		least = min(least, tk.ExpiryMs)
	}
	if next, ok := h.f.NextExpiry(); !ok || next != least {
		t.Fatalf("NextExpiry %d %v, least expiry %d", next, ok, least)
	}
}

func mustList(t *testing.T, f *FSM) []Ticket {
	t.Helper()
	l, more := f.List("", 0)
	if more {
		t.Fatal("List without a limit says more")
	}
	return l
}

// SPEC §4-4: the leader proposes Expire when its wall ms (rounded down) ≥
// the expiry, so Due includes a ticket whose expiry equals now exactly, and
// not one ms before.
func TestDueBoundary(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 1, t0)
	exp := g.Ticket.ExpiryMs
	if d := h.f.Due(exp-1, 10); len(d) != 0 {
		t.Fatalf("Due(expiry-1) = %+v, want none", d)
	}
	if d := h.f.Due(exp, 10); len(d) != 1 || d[0] != (Due{Name: "job", Token: g.Ticket.Token}) {
		t.Fatalf("Due(expiry) = %+v, want the ticket", d)
	}
	if d := h.f.Due(exp, 0); len(d) != 0 {
		t.Fatalf("Due(expiry, max 0) = %+v, want none", d)
	}
}

// SPEC §4-9: Δ is written once at bootstrap; a repeated Init with the same
// Δ (a re-bootstrap entry, a recovery's Init) changes nothing and is not
// fatal.
func TestInitSameDeltaAgain(t *testing.T) {
	h := newHarness(t)
	g := h.grant("job", "alice", 30, t0)
	wantCode(t, "second init", h.apply(&Entry{Op: OpInit, DeltaMs: testDelta}), CodeOK)
	if h.f.Delta() != testDelta || h.f.Fatal() != nil {
		t.Fatalf("Δ %d, fatal %v", h.f.Delta(), h.f.Fatal())
	}
	if cur, _ := h.f.Get("job"); cur != g.Ticket {
		t.Fatalf("second init changed the ticket: %+v", cur)
	}
}
