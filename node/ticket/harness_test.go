package ticket

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testDelta = 500

// failer is what the harness needs from a test: *testing.T or *rapid.T,
// so a failure inside a rapid property is rapid's (and gets shrunk).
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// harness proposes entries the way a leader does: it computes the absolute
// expiry once from the proposer's now and Δ, encodes, and applies at the
// next Raft index (gap simulates barrier/config entries in between).
type harness struct {
	t     failer
	f     *FSM
	delta uint64
	idx   uint64
	gap   uint64
}

func newHarness(t failer) *harness {
	h := &harness{t: t, f: New(testDelta), delta: testDelta, gap: 1}
	if r := h.apply(&Entry{Op: OpInit, DeltaMs: testDelta}); r.Code != CodeOK {
		t.Fatalf("init: %v %v", r.Code, r.Err)
	}
	return h
}

func (h *harness) apply(e *Entry) Result {
	h.t.Helper()
	b, err := EncodeEntry(e)
	if err != nil {
		h.t.Fatalf("encode %+v: %v", e, err)
	}
	h.idx += h.gap
	return h.f.Apply(h.idx, b)
}

func (h *harness) expiry(now uint64, lease uint8) uint64 {
	exp, ok := ExpiryFor(now, lease, h.delta)
	if !ok {
		h.t.Fatalf("expiry overflow")
	}
	return exp
}

func (h *harness) grant(name, holder string, lease uint8, now uint64) Result {
	h.t.Helper()
	return h.apply(&Entry{Op: OpGrant, NowMs: now, RecvMs: now, Name: name, Holder: holder, LeaseS: lease, ExpiryMs: h.expiry(now, lease)})
}

func (h *harness) renew(name, holder string, token uint64, lease uint8, now uint64) Result {
	h.t.Helper()
	return h.apply(&Entry{Op: OpRenew, NowMs: now, RecvMs: now, Name: name, Holder: holder, Token: token, LeaseS: lease, ExpiryMs: h.expiry(now, lease)})
}

func (h *harness) release(name, holder string, token uint64, now uint64) Result {
	h.t.Helper()
	return h.apply(&Entry{Op: OpRelease, NowMs: now, Name: name, Holder: holder, Token: token})
}

func (h *harness) expire(name string, token uint64, now uint64) Result {
	h.t.Helper()
	return h.apply(&Entry{Op: OpExpire, NowMs: now, Name: name, Token: token})
}

// reseal recomputes an entry's trailing CRC-32C after a test edited it.
func reseal(b []byte) []byte {
	n := len(b) - 4
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
	return b
}

// thaw returns a copy of s with its tickets copied out into Tickets (name
// order) and no frozen tree: for tests that read or edit them.
func thaw(s *Snapshot) *Snapshot {
	c := *s
	c.Tickets = make([]Ticket, 0, s.Len())
	s.Each(func(t *Ticket) bool {
		c.Tickets = append(c.Tickets, *t)
		return true
	})
	c.frozen = nil
	return &c
}
