package ticket

import (
	"bytes"
	"testing"
)

func (h *harness) revoke(name string, token uint64, now uint64) Result {
	h.t.Helper()
	return h.apply(&Entry{Op: OpRevoke, NowMs: now, Name: name, Token: token})
}

// SPEC §4 (Revoke): the holder can no longer Renew; the ticket frees at
// its current server-side expiry, never earlier; Get shows it revoked and
// its modify index moves; a revoke of a revoked ticket changes nothing; a
// ticket nobody holds (or whose expiry has passed) is not revoked.
func TestRevoke(t *testing.T) {
	h := newHarness(t)
	var changed []string
	h.f.OnChange(func(name string) { changed = append(changed, name) })
	g := h.grant("job", "alice", 30, t0)
	wantCode(t, "grant", g, CodeOK)
	tok, exp := g.Ticket.Token, g.Ticket.ExpiryMs

	wantCode(t, "revoke free", h.revoke("other", 0, t0+1), CodeNotHeld)
	wantCode(t, "revoke by another token", h.revoke("job", tok+1, t0+1), CodeWrongToken)
	if cur, _ := h.f.Get("job"); cur.Revoked {
		t.Fatal("a refused revoke revoked")
	}
	changed = nil
	r := h.revoke("job", tok, t0+1000)
	wantCode(t, "revoke", r, CodeOK)
	if !r.Ticket.Revoked || r.Ticket.Token != tok || r.Ticket.ExpiryMs != exp {
		t.Fatalf("revoke answered %+v", r.Ticket)
	}
	cur, _, mod := h.f.GetIndexed("job")
	if !cur.Revoked || mod != h.idx || len(changed) != 1 || changed[0] != "job" {
		t.Fatalf("after revoke: %+v mod %d (idx %d), changed %v", cur, mod, h.idx, changed)
	}
	wantCode(t, "revoke again", h.revoke("job", 0, t0+1001), CodeExisting)
	if _, _, again := h.f.GetIndexed("job"); again != mod {
		t.Fatal("an idempotent revoke moved the modify index")
	}

	wantCode(t, "renew", h.renew("job", "alice", tok, 30, t0+2000), CodeRevoked)
	wantCode(t, "grant by the holder", h.grant("job", "alice", 30, t0+2000), CodeRevoked)
	wantCode(t, "grant by another", h.grant("job", "bob", 30, exp-1), CodeHeld)
	wantCode(t, "expire early", h.expire("job", tok, exp-1), CodeNoop)
	if cur, _ := h.f.Get("job"); cur.ExpiryMs != exp || !cur.Revoked {
		t.Fatalf("expiry moved: %+v", cur)
	}
	wantCode(t, "expire at expiry", h.expire("job", tok, exp), CodeOK)
	wantCode(t, "revoke after expire", h.revoke("job", 0, exp), CodeNotHeld)

	// Held past its expiry (no Expire yet): free for a Grant, so not revoked.
	g = h.grant("job", "bob", 5, exp)
	wantCode(t, "grant after", g, CodeOK)
	if g.Ticket.Revoked {
		t.Fatal("a new grant inherited the revocation")
	}
	wantCode(t, "revoke past expiry", h.revoke("job", 0, g.Ticket.ExpiryMs), CodeNotHeld)

	// The holder's Release still frees a revoked ticket.
	wantCode(t, "revoke bob", h.revoke("job", 0, exp+1), CodeOK)
	wantCode(t, "release by another", h.release("job", "carol", g.Ticket.Token, exp+2), CodeWrongHolder)
	wantCode(t, "release", h.release("job", "bob", g.Ticket.Token, exp+2), CodeOK)
	if _, ok := h.f.Get("job"); ok {
		t.Fatal("released revoked ticket still held")
	}
}

// A revoked ticket survives snapshot and restore (version 4), and a state
// with one cannot be written in a version that would lose it.
func TestRevokeSnapshot(t *testing.T) {
	h := filled(t)
	cur, _ := h.f.Get("b")
	wantCode(t, "revoke", h.revoke("b", cur.Token, t0+6000), CodeOK)
	b, _ := positioned(t, h, nil)
	f := New(testDelta)
	if err := f.Restore(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Get("b"); !got.Revoked {
		t.Fatal("revocation lost in the snapshot")
	}
	if got, _ := f.Get("a"); got.Revoked {
		t.Fatal("an unrevoked ticket restored revoked")
	}
	s, _ := h.f.Snapshot()
	if _, err := s.WriteTo(new(bytes.Buffer)); err == nil {
		t.Fatal("a revoked ticket was written without a position (versions 1 and 2 cannot carry it)")
	}
}
