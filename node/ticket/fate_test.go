package ticket

import (
	"bytes"
	"fmt"
	"testing"
)

func encoded(t *testing.T, e *Entry) []byte {
	t.Helper()
	b, err := EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func grantEntry(h *harness, name string, now uint64) *Entry {
	return &Entry{Op: OpGrant, NowMs: now, RecvMs: now, Name: name, Holder: "h", LeaseS: 30, ExpiryMs: h.expiry(now, 30)}
}

func wantFate(t *testing.T, f *FSM, index uint64, kind FateKind) Fate {
	t.Helper()
	got, wake := f.FateOf(index)
	if got.Kind != kind {
		t.Fatalf("FateOf(%d) = %+v, want kind %d", index, got, kind)
	}
	if (wake != nil) != (kind == FatePending) {
		t.Fatalf("FateOf(%d): a wake channel %v for kind %d", index, wake != nil, kind)
	}
	return got
}

// The FSM knows, for recent indexes, which command it applied there
// (index and term) and its result; an index it passed without a command
// (a no-op, a barrier, a configuration) holds no proposer's command; an
// index it has not reached is pending, with a channel the next apply
// closes.
func TestFateOfRecentEntries(t *testing.T) {
	h := newHarness(t) // Init at 1, without a term: nothing known yet
	wantFate(t, h.f, 1, FateForgotten)
	const now = 1_700_000_000_000
	if r := h.f.ApplyTerm(2, 3, encoded(t, grantEntry(h, "a", now))); r.Code != CodeOK {
		t.Fatalf("grant a: %+v", r)
	}
	// 3 and 4: no commands (a no-op of term 4 and a configuration).
	if r := h.f.ApplyTerm(5, 4, encoded(t, grantEntry(h, "a", now+1))); r.Code != CodeExisting {
		t.Fatalf("grant a again: %+v", r)
	}
	got := wantFate(t, h.f, 2, FateApplied)
	if got.Term != 3 || got.Result.Code != CodeOK || got.Result.Ticket.Name != "a" || got.Result.Ticket.Token != TokenFor(0, 2) {
		t.Fatalf("FateOf(2) = %+v, want grant a at term 3", got)
	}
	if got := wantFate(t, h.f, 5, FateApplied); got.Term != 4 || got.Result.Code != CodeExisting {
		t.Fatalf("FateOf(5) = %+v", got)
	}
	wantFate(t, h.f, 3, FateNoCommand)
	wantFate(t, h.f, 4, FateNoCommand)
	wantFate(t, h.f, 1, FateForgotten) // before the first entry with a term
	_, wake := h.f.FateOf(7)
	h.f.ApplyTerm(6, 4, encoded(t, grantEntry(h, "b", now+2)))
	select {
	case <-wake:
	default:
		t.Fatal("applying index 6 did not wake a waiter for 7")
	}
	_, wake = h.f.FateOf(7)
	h.f.ApplyTerm(8, 5, encoded(t, grantEntry(h, "c", now+3)))
	<-wake
	wantFate(t, h.f, 7, FateNoCommand)
	wantFate(t, h.f, 9, FatePending)
	// An entry applied without its term forgets every fate.
	h.f.Apply(9, encoded(t, grantEntry(h, "d", now+4)))
	wantFate(t, h.f, 8, FateForgotten)
	wantFate(t, h.f, 9, FateForgotten)
	wantFate(t, h.f, 10, FatePending)
}

// The ring is bounded: the oldest fates are forgotten, never misread as
// "no command there".
func TestFateRingForgetsTheOldest(t *testing.T) {
	h := newHarness(t)
	const now = 1_700_000_000_000
	n := uint64(fateRingLen + 10)
	for i := uint64(2); i < 2+n; i++ {
		h.f.ApplyTerm(2*i, 7, encoded(t, grantEntry(h, fmt.Sprint("t", i), now))) // every other index: no command
	}
	last := 2 * (n + 1)
	for _, i := range []uint64{4, 5, 21, 22} {
		wantFate(t, h.f, i, FateForgotten)
	}
	oldest := last - 2*(fateRingLen-1)
	if got := wantFate(t, h.f, oldest, FateApplied); got.Result.Ticket.Token != TokenFor(0, oldest) {
		t.Fatalf("FateOf(%d) = %+v", oldest, got)
	}
	wantFate(t, h.f, oldest-2, FateForgotten) // the last one forgotten
	wantFate(t, h.f, oldest-1, FateNoCommand) // after it: still known to be no command
	wantFate(t, h.f, oldest+1, FateNoCommand)
	wantFate(t, h.f, last, FateApplied)
	wantFate(t, h.f, last+1, FatePending)
}

// A Restore forgets every fate and wakes the waiters; the fates are not
// state: a snapshot of an FSM that knows them is byte for byte the one of
// an FSM that applied the same entries without terms.
func TestFateIsNotState(t *testing.T) {
	const now = 1_700_000_000_000
	a, b := newHarness(t), newHarness(t)
	for i := uint64(2); i < 50; i++ {
		e := encoded(t, grantEntry(a, fmt.Sprint("t", i%7), now+i))
		a.f.ApplyTerm(i, 2, e)
		b.f.Apply(i, e)
	}
	wantFate(t, a.f, 49, FateApplied)
	snapBytes := func(f *FSM) []byte {
		s, err := f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		var buf bytes.Buffer
		if _, err := s.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	sa := snapBytes(a.f)
	if !bytes.Equal(sa, snapBytes(b.f)) {
		t.Fatal("the snapshot of an FSM that knows fates differs from one that does not")
	}
	_, wake := a.f.FateOf(60)
	if err := a.f.Restore(bytes.NewReader(sa)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	default:
		t.Fatal("a Restore did not wake a waiter")
	}
	wantFate(t, a.f, 49, FateForgotten)
	wantFate(t, a.f, 20, FateForgotten)
	wantFate(t, a.f, 50, FatePending)
	if !bytes.Equal(snapBytes(a.f), sa) {
		t.Fatal("the snapshot after a Restore differs")
	}
}
