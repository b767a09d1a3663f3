package fuzz

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/tckclk/tckclk/node/ticket"
)

func snapshotSeeds() [][]byte {
	var out [][]byte
	for _, n := range []int{0, 1, 3} {
		fsm := ticket.New(500)
		idx := uint64(1)
		apply := func(e ticket.Entry) {
			b, err := ticket.EncodeEntry(&e)
			if err != nil {
				panic(err)
			}
			idx++
			fsm.Apply(idx, b)
		}
		apply(ticket.Entry{Op: ticket.OpInit, DeltaMs: 500})
		for i := range n - 1 { // 0, 0 and 2 retired NodeIds: versions 1 and 2
			apply(ticket.Entry{Op: ticket.OpRetire, NodeID: "node-" + string(rune('a'+i))})
		}
		now := uint64(1_700_000_000_001)
		for i := range n {
			name := string(rune('a' + i))
			apply(ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now - 1, Name: name, Holder: "holder " + name, LeaseS: uint8(10 + i), ExpiryMs: now + uint64(10+i)*1000 + 500})
		}
		s, err := fsm.Snapshot()
		if err != nil {
			panic(err)
		}
		var b bytes.Buffer
		s.WriteTo(&b)
		out = append(out, b.Bytes())
		if n > 0 {
			// Version 4 can carry a revoked ticket and a token epoch:
			// revoke the first, then grant one more in epoch 1.
			apply(ticket.Entry{Op: ticket.OpRevoke, NowMs: now, Name: "a"})
			if _, err := fsm.NextEpoch(); err != nil {
				panic(err)
			}
			apply(ticket.Entry{Op: ticket.OpGrant, NowMs: now, RecvMs: now, Name: "z", Holder: "epoch 1", LeaseS: 5, ExpiryMs: now + 5000 + 500})
			if s, err = fsm.Snapshot(); err != nil {
				panic(err)
			}
		}
		// Version 4: the state with its Raft position.
		s.Raft = &ticket.Position{Index: idx + 2, Term: 3, TakenMs: 1_700_000_000_500, ConfigurationIndex: 1, Servers: []ticket.Server{
			{Suffrage: ticket.SuffrageVoter, ID: "node-1", Address: "127.0.0.1:7001"},
			{Suffrage: ticket.SuffrageNonvoter, ID: "node-2", Address: "127.0.0.1:7002"},
		}[:1+n%2]}
		b.Reset()
		if _, err := s.WriteTo(&b); err != nil {
			panic(err)
		}
		out = append(out, b.Bytes())
	}
	return out
}

// FuzzTicketSnapshot: ReadSnapshot never panics and never allocates from a
// claimed count; it agrees with the naive decoder on acceptance, refusal
// kind and content; an accepted snapshot re-encodes byte-identically and
// restores into an FSM configured with its Δ, whose own snapshot is the
// same bytes (nothing, Δ included, is added on restore). A version 3
// snapshot is written again as version 4 with the same content, its
// highest token the bound of its index.
func FuzzTicketSnapshot(f *testing.F) {
	for _, b := range snapshotSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSnapshot(t, data)
		// Also as a body with a valid checksum appended (see FuzzTicketEntry).
		checkSnapshot(t, sealed(data))
	})
}

func checkSnapshot(t *testing.T, data []byte) {
	s, err := ticket.ReadSnapshot(bytes.NewReader(data))
	ns, nk := naiveSnapshot(data)
	if got := kindOf(err); got != nk {
		t.Fatalf("%x: ticket says %q (%v), naive says %q", data, got, err, nk)
	}
	if err != nil {
		var de *ticket.DecodeError
		if !errors.As(err, &de) || de.What != "snapshot" {
			t.Fatalf("untyped error %T %v", err, err)
		}
		fsm := ticket.New(500)
		if fsm.Restore(bytes.NewReader(data)) == nil || fsm.Fatal() == nil || fsm.Len() != 0 {
			t.Fatal("a refused snapshot was restored")
		}
		return
	}
	if s.DeltaMs != ns.delta || s.Index != ns.index || len(s.Tickets) != len(ns.tickets) || s.Epoch != ns.epoch || s.MaxToken != ns.maxToken {
		t.Fatalf("header differs: %d/%d/%d/%d/%d vs %d/%d/%d/%d/%d", s.DeltaMs, s.Index, len(s.Tickets), s.Epoch, s.MaxToken,
			ns.delta, ns.index, len(ns.tickets), ns.epoch, ns.maxToken)
	}
	if !slices.Equal(s.Retired, ns.retired) {
		t.Fatalf("retired: %q vs %q", s.Retired, ns.retired)
	}
	if (s.Raft == nil) != (ns.raft == nil) || s.Raft != nil && (s.Raft.TakenMs != ns.raft.TakenMs || !samePosition(s.Raft, ns.raft)) {
		t.Fatalf("raft position: %+v vs %+v", s.Raft, ns.raft)
	}
	for i := range s.Tickets {
		if s.Tickets[i] != ns.tickets[i] {
			t.Fatalf("ticket %d: %+v vs %+v", i, s.Tickets[i], ns.tickets[i])
		}
	}
	var again bytes.Buffer
	if _, err := s.WriteTo(&again); err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	if ns.version == 3 {
		// Written again as version 4: the same content, read back.
		back, err := ticket.ReadSnapshot(bytes.NewReader(again.Bytes()))
		if err != nil || back.Epoch != 0 || back.MaxToken != s.MaxToken || !slices.Equal(back.Tickets, s.Tickets) || !slices.Equal(back.Retired, s.Retired) {
			t.Fatalf("version 3 written again as version 4 reads back otherwise: %v", err)
		}
		data = again.Bytes()
	} else if !bytes.Equal(again.Bytes(), data) {
		t.Fatal("re-encode differs")
	}
	fsm := ticket.New(s.DeltaMs)
	if err := fsm.Restore(bytes.NewReader(data)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	s2, err := fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s2.Raft = s.Raft // not state: the Raft adapter sets it from the metadata
	var b2 bytes.Buffer
	s2.WriteTo(&b2)
	if !bytes.Equal(b2.Bytes(), data) {
		t.Fatal("snapshot of the restored state differs")
	}
	if other := ticket.New(s.DeltaMs%60000 + 1); other.ConfiguredDelta() != s.DeltaMs && other.Restore(bytes.NewReader(data)) == nil {
		t.Fatal("restore with another configured Δ accepted")
	}
}

func samePosition(a, b *ticket.Position) bool {
	f, _, _ := a.Mismatch(b)
	return f == ""
}
