package safety

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// b is a history builder: ops with times in ms.
type b struct {
	h *History
}

func newB() *b { return &b{h: NewHistory(500)} }

func deadline(callMs int64, leaseS int) int64 { return bounds{}.early(callMs*ms, leaseS) }

func (x *b) grant(client int, ticket, holder string, callMs, retMs int64, tok uint64) *b {
	x.h.Add(Op{Client: client, Kind: Grant, Ticket: ticket, Holder: holder, LeaseS: 1, Token: tok, Call: callMs * ms, Return: retMs * ms,
		Outcome: OK, Deadline: deadline(callMs, 1)})
	return x
}

func (x *b) op(op Op) *b {
	op.Call *= ms
	op.Return *= ms
	if op.LeaseS == 0 && (op.Kind == Grant || op.Kind == Renew) {
		op.LeaseS = 1
	}
	if op.Outcome == OK && (op.Kind == Grant || op.Kind == Renew) {
		op.Deadline = bounds{}.early(op.Call, op.LeaseS)
	}
	x.h.Add(op)
	return x
}

func check(t *testing.T, h *History) *Result {
	t.Helper()
	r, err := Check(h, Config{OutDir: t.TempDir(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.Summary())
	return r
}

func wantOK(t *testing.T, h *History) {
	t.Helper()
	if r := check(t, h); !r.OK() {
		t.Fatalf("good history flagged: %v", r.Violations)
	}
}

func wantCaught(t *testing.T, h *History, checks ...string) *Result {
	t.Helper()
	r := check(t, h)
	for _, c := range checks {
		if !slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Check == c }) {
			t.Errorf("want a %s violation, got %v", c, r.Violations)
		}
	}
	return r
}

// SPEC §4: hand-made good histories pass.
func TestCheckGoodHistories(t *testing.T) {
	t.Run("grant release grant", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Write, Ticket: "x", Holder: "a", Token: 5, Call: 11, Return: 12, Outcome: OK}).
			op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 20, Return: 30, Outcome: Refused, Code: "held", RespHolder: "a", RespToken: 5}).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 5, Call: 40, Return: 50, Outcome: OK}).
			grant(1, "x", "b", 60, 70, 9).
			op(Op{Client: 1, Kind: Write, Ticket: "x", Holder: "b", Token: 9, Call: 71, Return: 72, Outcome: OK}).
			op(Op{Client: 0, Kind: Write, Ticket: "x", Holder: "a", Token: 5, Call: 80, Return: 81, Outcome: Refused}).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 90, Return: 95, Outcome: OK, RespHolder: "b", RespToken: 9, ServerExpiryMs: 1000}).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 96, Return: 97, Outcome: OK, RespHolder: "b", RespToken: 9, ServerExpiryMs: 1000}).h)
	})
	t.Run("expiry then another holder", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 500, Return: 510, Outcome: Refused, Code: "held", RespHolder: "a", RespToken: 5}).
			grant(1, "x", "b", 1000, 1010, 8).
			op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 1020, Return: 1030, Outcome: Refused, Code: "wrong_token"}).h)
	})
	t.Run("renew extends", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 20, Return: 25, Outcome: OK, RespHolder: "a", RespToken: 5, ServerExpiryMs: 1500}).
			op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 800, Return: 810, Outcome: OK}).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 820, Return: 825, Outcome: OK, RespHolder: "a", RespToken: 5, ServerExpiryMs: 2300}).
			op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 1200, Return: 1210, Outcome: Refused, Code: "held", RespHolder: "a", RespToken: 5}).h)
	})
	// The unknown release must have applied for b's grant to be legal.
	t.Run("unknown release that must have applied", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 5, Call: 20, Return: 30, Outcome: Unknown, Code: "timeout"}).
			grant(1, "x", "b", 40, 50, 9).h)
	})
	// The unknown grant must have applied: a read names its holder.
	t.Run("unknown grant revealed by a read", func(t *testing.T) {
		wantOK(t, newB().
			op(Op{Client: 0, Kind: Grant, Ticket: "x", Holder: "a", Call: 0, Return: 30, Outcome: Unknown, Code: "timeout"}).
			op(Op{Client: 1, Kind: Get, Ticket: "x", Call: 40, Return: 50, Outcome: OK, RespHolder: "a", RespToken: 4, ServerExpiryMs: 9}).
			op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 60, Return: 70, Outcome: Refused, Code: "held", RespHolder: "a", RespToken: 4}).h)
	})
	// The long run's r1-cold-8 (seed 42): the holder's own lease ran out,
	// its repeated grant had an unknown outcome and applied as a new grant
	// with a new token, which a read then showed. (The model once treated
	// every same-holder grant as an idempotent repeat and flagged this.)
	t.Run("unknown grant by the same holder after its lease ended", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Grant, Ticket: "x", Holder: "a", Call: 3000, Return: 3100, Outcome: Unknown, Code: "not_leader"}).
			op(Op{Client: 1, Kind: Get, Ticket: "x", Call: 3200, Return: 3210, Outcome: OK, RespHolder: "a", RespToken: 8, ServerExpiryMs: 9}).
			grant(0, "x", "a", 6000, 6010, 11).h)
	})
	t.Run("idempotent grant", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Grant, Ticket: "x", Holder: "a", Token: 5, Call: 20, Return: 30, Outcome: OK}).h)
	})
}

// Each kind of bad history is caught.
func TestCheckCatchesBadHistories(t *testing.T) {
	// An unknown grant's unseen token is still checked: after it applied,
	// a read cannot show a token at or below one granted before it.
	t.Run("unknown grant then an old token", func(t *testing.T) {
		wantCaught(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 5, Call: 20, Return: 30, Outcome: OK}).
			op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 40, Return: 50, Outcome: Unknown, Code: "timeout"}).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 60, Return: 70, Outcome: OK, RespHolder: "b", RespToken: 5, ServerExpiryMs: 9}).h, "linearizable")
	})
	t.Run("double holder", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).grant(1, "x", "b", 500, 510, 7).h, "overlap", "linearizable")
	})
	t.Run("token reuse", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 5, Call: 20, Return: 30, Outcome: OK}).
			grant(1, "x", "b", 40, 50, 5).h, "token_reuse", "linearizable")
	})
	t.Run("token reused on another ticket", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).grant(1, "y", "b", 40, 50, 5).h, "token_reuse")
	})
	t.Run("token goes down", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 9).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 9, Call: 20, Return: 30, Outcome: OK}).
			grant(1, "x", "b", 40, 50, 7).h, "token_order", "linearizable")
	})
	t.Run("stale write accepted", func(t *testing.T) {
		wantCaught(t, newB().
			op(Op{Client: 1, Kind: Write, Ticket: "x", Holder: "b", Token: 9, Call: 10, Return: 11, Outcome: OK}).
			op(Op{Client: 0, Kind: Write, Ticket: "x", Holder: "a", Token: 5, Call: 20, Return: 21, Outcome: OK}).h, "stale_write")
	})
	t.Run("refused grant that applied", func(t *testing.T) {
		wantCaught(t, newB().
			op(Op{Client: 0, Kind: Grant, Ticket: "x", Holder: "a", Call: 0, Return: 30, Outcome: Refused, Code: "not_leader"}).
			op(Op{Client: 1, Kind: Get, Ticket: "x", Call: 40, Return: 50, Outcome: OK, RespHolder: "a", RespToken: 4}).h, "linearizable")
	})
	t.Run("unknown release that cannot explain it", func(t *testing.T) {
		// b's grant needs a's release applied, but a read after it still
		// shows a: no order of the unknown release fits.
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 5, Call: 20, Return: 30, Outcome: Unknown}).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 100, Return: 110, Outcome: OK, RespHolder: "a", RespToken: 5}).
			grant(1, "x", "b", 40, 50, 9).h, "linearizable")
	})
	t.Run("renew after expiry", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 5000, Return: 5010, Outcome: OK}).h, "linearizable")
	})
	t.Run("lease_over while surely valid", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 100, Return: 110, Outcome: Refused, Code: "lease_over"}).h, "linearizable")
	})
	t.Run("read of a free ticket inside the lease", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 1, Kind: Get, Ticket: "x", Call: 100, Return: 110, Outcome: OK}).h, "linearizable")
	})
	t.Run("expiry moved without renew", func(t *testing.T) {
		wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 20, Return: 25, Outcome: OK, RespHolder: "a", RespToken: 5, ServerExpiryMs: 1500}).
			op(Op{Client: 2, Kind: Get, Ticket: "x", Call: 30, Return: 35, Outcome: OK, RespHolder: "a", RespToken: 5, ServerExpiryMs: 2000}).h, "expiry_moved")
	})
}

// A violation writes the history JSON (which reads back the same) and
// porcupine's HTML.
func TestCheckWritesFiles(t *testing.T) {
	h := newB().grant(0, "x/y", "a", 0, 10, 5).grant(1, "x/y", "b", 500, 510, 7).h
	h.Fault("partition")
	dir := t.TempDir()
	r, err := Check(h, Config{OutDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || len(r.Files) != 2 {
		t.Fatalf("files %v, violations %v", r.Files, r.Violations)
	}
	html, err := os.ReadFile(filepath.Join(dir, "ticket-x_y.html"))
	if err != nil || !strings.Contains(string(html), "<html") {
		t.Fatalf("html: %v", err)
	}
	back, err := ReadJSON(filepath.Join(dir, "history.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Ops(), h.Ops()) || back.Faults()["partition"] != 1 || back.DeltaMs != 500 {
		t.Fatalf("history JSON did not round-trip: %+v", back.Ops())
	}
	if !strings.Contains(r.Summary(), "violations 2") || !strings.Contains(r.Summary(), "partition=1") {
		t.Fatalf("summary %q", r.Summary())
	}
}

// porcupine's Unknown (its search ran out of time) is a failure.
func TestCheckTimeoutIsFailure(t *testing.T) {
	x := newB()
	// Many overlapping unknown grants and releases: a large search.
	for i := range 60 {
		x.op(Op{Client: i, Kind: Grant, Ticket: "x", Holder: string(rune('a' + i%26)), Call: int64(i), Return: int64(i) + 1, Outcome: Unknown})
		x.op(Op{Client: i, Kind: Release, Ticket: "x", Holder: string(rune('a' + i%26)), Token: uint64(i + 1), Call: int64(i), Return: int64(i) + 1, Outcome: Unknown})
	}
	x.op(Op{Client: 61, Kind: Get, Ticket: "x", Call: 100, Return: 101, Outcome: OK, RespHolder: "zz", RespToken: 3})
	r, err := Check(x.h, Config{OutDir: t.TempDir(), Timeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Check == "porcupine_timeout" }) {
		t.Fatalf("want porcupine_timeout, got %v", r.Violations)
	}
}

// A 409 held is not a linearizable read by default (SPEC §4: only Get
// is); with StrictRefusals a stale one is caught. Either way, a held
// answer naming a holder no grant made is caught.
func TestCheckHeldRefusals(t *testing.T) {
	stale := func() *History {
		return newB().grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 5, Call: 20, Return: 30, Outcome: OK}).
			op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 40, Return: 50, Outcome: Refused, Code: "held", RespHolder: "a", RespToken: 5}).h
	}
	wantOK(t, stale())
	r, err := Check(stale(), Config{OutDir: t.TempDir(), StrictRefusals: true})
	if err != nil || r.OK() {
		t.Fatalf("strict: a held answer after the release was not caught (%v)", err)
	}
	wantCaught(t, newB().grant(0, "x", "a", 0, 10, 5).
		op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 40, Return: 50, Outcome: Refused, Code: "held", RespHolder: "z", RespToken: 3}).h, "held_unknown_holder")
}

// A history whose clock runs backwards is refused, not checked.
func TestCheckRefusesBackwardsClock(t *testing.T) {
	h := newB().op(Op{Client: 0, Kind: Get, Ticket: "x", Call: 20, Return: 10, Outcome: OK}).h
	if _, err := Check(h, Config{OutDir: t.TempDir()}); err == nil {
		t.Fatal("a return before its call was accepted")
	}
}

// A Renew at the very instants of the reads around it (a history clock
// that did not move) still explains a later expiry (closed intervals).
func TestCheckRenewAtEqualInstants(t *testing.T) {
	wantOK(t, newB().grant(0, "x", "a", 0, 10, 5).
		op(Op{Client: 0, Kind: Get, Ticket: "x", Call: 20, Return: 30, Outcome: OK, RespHolder: "a", RespToken: 5, ServerExpiryMs: 1500}).
		op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 30, Return: 30, Outcome: OK}).
		op(Op{Client: 0, Kind: Get, Ticket: "x", Call: 30, Return: 30, Outcome: OK, RespHolder: "a", RespToken: 5, ServerExpiryMs: 2030}).h)
}

// SPEC §4 (Revoke) in the checker: a revoked grant stays held until it
// may have expired (another holder before that is a violation) and is
// never renewed after the revoke returned; a renew refused as revoked, a
// revoke of a free ticket and the holder's release are good; a Get shows
// the revocation once it took effect.
func TestCheckRevoke(t *testing.T) {
	revoke := func(callMs, retMs int64, tok uint64) Op {
		return Op{Client: 9, Kind: Revoke, Ticket: "x", Token: tok, Call: callMs, Return: retMs, Outcome: OK, RespHolder: "a", RespToken: tok}
	}
	t.Run("good", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(revoke(20, 30, 5)).
			op(Op{Client: 9, Kind: Get, Ticket: "x", Call: 31, Return: 32, Outcome: OK, RespHolder: "a", RespToken: 5, RespRevoked: true}).
			op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 40, Return: 50, Outcome: Refused, Code: "revoked"}).
			op(Op{Client: 1, Kind: Grant, Ticket: "x", Holder: "b", Call: 60, Return: 70, Outcome: Refused, Code: "held", RespHolder: "a", RespToken: 5}).
			op(Op{Client: 0, Kind: Grant, Ticket: "x", Holder: "a", Call: 80, Return: 90, Outcome: Refused, Code: "revoked"}).
			op(Op{Client: 0, Kind: Release, Ticket: "x", Holder: "a", Token: 5, Call: 100, Return: 110, Outcome: OK}).
			op(Op{Client: 9, Kind: Revoke, Ticket: "x", Call: 120, Return: 130, Outcome: Refused, Code: "not_found"}).
			grant(1, "x", "b", 140, 150, 9).h)
	})
	t.Run("expires, never earlier", func(t *testing.T) {
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(revoke(20, 30, 5)).
			grant(1, "x", "b", 2000, 2010, 9).h)
		wantCaught(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(revoke(20, 30, 5)).
			grant(1, "x", "b", 100, 110, 9).h, "linearizable")
	})
	t.Run("renew after revoke", func(t *testing.T) {
		wantCaught(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(revoke(20, 30, 5)).
			op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 40, Return: 50, Outcome: OK}).h, "linearizable", "renew_after_revoke")
	})
	t.Run("revoke of a free ticket", func(t *testing.T) {
		wantCaught(t, newB().
			op(revoke(20, 30, 5)).h, "linearizable")
	})
	t.Run("get without the revocation", func(t *testing.T) {
		wantCaught(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(revoke(20, 30, 5)).
			op(Op{Client: 9, Kind: Get, Ticket: "x", Call: 40, Return: 50, Outcome: OK, RespHolder: "a", RespToken: 5}).h, "linearizable")
	})
	t.Run("unknown revoke", func(t *testing.T) {
		h := newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 9, Kind: Revoke, Ticket: "x", Token: 5, Call: 20, Return: forever / ms, Outcome: Unknown})
		wantOK(t, newB().
			grant(0, "x", "a", 0, 10, 5).
			op(Op{Client: 9, Kind: Revoke, Ticket: "x", Token: 5, Call: 20, Return: forever / ms, Outcome: Unknown}).
			op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 40, Return: 50, Outcome: Refused, Code: "revoked"}).h)
		wantOK(t, h.op(Op{Client: 0, Kind: Renew, Ticket: "x", Holder: "a", Token: 5, Call: 40, Return: 50, Outcome: OK}).h)
	})
}
