package forward

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleRequests() []Request {
	return []Request{
		{Op: OpGrant, Name: "orders.migration", Holder: "worker-1", LeaseS: 30, WaitMs: 5000},
		{Op: OpGrant, Name: "a", Holder: "h", LeaseS: 0},
		{Op: OpRenew, Name: "orders.migration", Holder: "worker-1", Token: 1 << 40, LeaseS: 250},
		{Op: OpRelease, Name: "n", Holder: "h", Token: 7},
		{Op: OpGet, Name: "x:y-z"},
		{Op: OpList, Prefix: "orders.", Limit: 100},
		{Op: OpList},
		{Op: OpWatch, Name: "lock", Index: 1 << 50, WaitMs: 300_000},
		{Op: OpWatch, Name: "lock"},
		{Op: OpRevoke, Name: "lock", Token: 1<<48 | 5},
		{Op: OpRevoke, Name: "lock"},
	}
}

func sampleResponses() []Response {
	tk := Ticket{Name: "n", Holder: "h", Token: 42, LeaseS: 30, ConservativeValidBeforeUnixMs: 1_800_000_030_000, ServerExpiryUnixMs: 1_800_000_030_500, RemainingMs: 30_000}
	rv := tk
	rv.Revoked = true
	out := []Response{
		{Code: CodeOK, Ticket: &tk},
		{Code: CodeOK, List: &List{Tickets: []Ticket{tk, {Name: "m"}}, Truncated: true}},
		{Code: CodeOK, List: &List{}},
		{Code: CodeOK},
		{Code: CodeOK, Watched: &Watched{Index: 77, Ticket: &tk}},
		{Code: CodeOK, Watched: &Watched{Index: 78}},
		{Code: CodeOK, Ticket: &tk, WaitedMs: 12_345},
		{Code: CodeOK, Ticket: &rv},
		{Code: CodeOK, Ticket: &rv, WaitedMs: 1},
		{Code: CodeOK, List: &List{Tickets: []Ticket{tk, rv}}},
		{Code: CodeOK, Watched: &Watched{Index: 79, Ticket: &rv}},
	}
	for c := CodeHeld; c < codeCount; c++ {
		if !c.known() {
			continue
		}
		r := Response{Code: c, Message: "because " + c.String()}
		switch c {
		case CodeHeld:
			r.Holder, r.Token = "other", 9
		case CodeUnavailable:
			r.Stage, r.Reason = "clock_check", "rollback"
		}
		out = append(out, r)
	}
	return out
}

func TestRequestRoundTrip(t *testing.T) {
	for i, r := range sampleRequests() {
		b, err := AppendRequest(uint64(i)*1e9, r)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		id, got, err := ParseRequest(b)
		if err != nil || id != uint64(i)*1e9 || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v: %d %+v %v", r, id, got, err)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for i, r := range sampleResponses() {
		b, err := AppendResponse(uint64(i), r)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		id, got, err := ParseResponse(b)
		if r.List != nil && len(r.List.Tickets) == 0 {
			r.List.Tickets = nil
		}
		if err != nil || id != uint64(i) || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v: %d %+v %v", r, id, got, err)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, r := range []Request{
		{Op: 0, Name: "n"},
		{Op: 9},
		{Op: OpGet, Name: "n", Holder: "h"},
		{Op: OpList, Name: "n"},
		{Op: OpRelease, Name: "n", Holder: "h", Token: 1, LeaseS: 3},
		{Op: OpRenew, Name: "n", Holder: "h", Token: 1, LeaseS: 3, WaitMs: 1},
		{Op: OpGrant, Name: strings.Repeat("x", 70000)},
		{Op: OpGrant, Name: strings.Repeat("x", 40000), Holder: strings.Repeat("y", 40000)},
	} {
		if _, err := AppendRequest(1, r); err == nil {
			t.Errorf("encoded %v (name %d bytes)", r.Op, len(r.Name))
		}
	}
	tk := &Ticket{}
	if _, err := AppendResponse(1, Response{Ticket: tk, List: &List{}}); err == nil {
		t.Error("encoded a response with a ticket and a list")
	}
	for _, c := range []Code{7, 8, codeCount} { // 7, 8: retired, never reused
		if _, err := AppendResponse(1, Response{Code: c}); err == nil {
			t.Errorf("encoded the unknown code %d", c)
		}
	}
}

// Strict decode: every kind of bad input is an ErrMalformed error.
func TestParseStrict(t *testing.T) {
	req, _ := AppendRequest(5, Request{Op: OpGet, Name: "n"})
	resp, _ := AppendResponse(5, Response{Code: CodeOK, List: &List{Tickets: []Ticket{{Name: "a"}}}})
	mut := func(b []byte, i int, v byte) []byte { c := bytes.Clone(b); c[i] = v; return c }
	bad := map[string]struct {
		b    []byte
		resp bool
	}{
		"empty":              {nil, false},
		"version":            {mut(req, 0, 2), false},
		"kind":               {mut(req, 1, kindResponse), false},
		"op 0":               {mut(req, headerLen, 0), false},
		"op 6":               {mut(req, headerLen, 6), false},
		"trailing":           {append(bytes.Clone(req), 0), false},
		"truncated":          {req[:len(req)-1], false},
		"string too long":    {mut(req, headerLen+2, 200), false},
		"response as req":    {resp, false},
		"code":               {mut(resp, headerLen, byte(codeCount)), true},
		"retired code 7":     {mut(resp, headerLen, 7), true},
		"retired code 8":     {mut(resp, headerLen, 8), true},
		"body tag":           {mut(resp, headerLen+1+2*4+8, 3), true},
		"bool":               {mut(resp, len(resp)-1, 2), true},
		"resp trailing":      {append(bytes.Clone(resp), 1), true},
		"resp truncated":     {resp[:len(resp)-2], true},
		"count beyond frame": {countTo(resp, 1<<30), true},
	}
	for name, c := range bad {
		var err error
		if c.resp {
			_, _, err = ParseResponse(c.b)
		} else {
			_, _, err = ParseRequest(c.b)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// countTo rewrites the ticket count of a list response.
func countTo(resp []byte, n uint32) []byte {
	c := bytes.Clone(resp)
	binary.BigEndian.PutUint32(c[headerLen+1+2*4+8+1:], n)
	return c
}

func TestReadFrameBounds(t *testing.T) {
	var big [4]byte
	binary.BigEndian.PutUint32(big[:], MaxFrame+1)
	if _, err := ReadFrame(bytes.NewReader(big[:])); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	if err := WriteFrame(&bytes.Buffer{}, make([]byte, MaxFrame+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("writing oversize: %v", err)
	}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFrame(bytes.NewReader(buf.Bytes()[:5]))
	if err == nil {
		t.Fatalf("short body read as %q", b)
	}
	if b, err := ReadFrame(&buf); err != nil || string(b) != "abc" {
		t.Fatalf("%q %v", b, err)
	}
}

func TestErrorIs(t *testing.T) {
	known := 0
	for c := CodeHeld; c < codeCount; c++ {
		if !c.known() {
			continue
		}
		known++
		err := Response{Code: c, Message: "m"}.Err()
		for c2 := CodeHeld; c2 < codeCount; c2++ {
			if errors.Is(err, &Error{Code: c2}) != (c == c2) {
				t.Errorf("errors.Is(%v, code %v) = %v", err, c2, c != c2)
			}
		}
		if errors.Is(err, ErrNotFound) != (c == CodeNotFound) {
			t.Errorf("errors.Is(%v, ErrNotFound) = %v", err, c != CodeNotFound)
		}
	}
	if known != 7 {
		t.Fatalf("%d non-ok codes, want 7 (held … unavailable, internal)", known)
	}
	if (Response{Code: CodeOK}).Err() != nil {
		t.Error("ok is an error")
	}
	e := Response{Code: CodeHeld, Message: "ticket \"n\" is held", Holder: "h", Token: 3}.Err()
	if !strings.Contains(e.Error(), `held by "h", token 3`) {
		t.Errorf("held error text %q", e)
	}
}

// A ticket's waiters (SPEC §4.2, the status page's ticket table) travel
// under the flags byte's bit 1 as a u32 > 0; a list without any is
// encoded as before; a zero count under the bit, or a cut count, is
// malformed.
func TestWaitersFlag(t *testing.T) {
	tk := Ticket{Name: "n", Holder: "h", Token: 1}
	wt := tk
	wt.Waiters = 7
	plain, _ := AppendResponse(1, Response{Code: CodeOK, List: &List{Tickets: []Ticket{tk, tk}}})
	b, err := AppendResponse(1, Response{Code: CodeOK, List: &List{Tickets: []Ticket{tk, wt}}})
	if err != nil || len(b) != len(plain)+2+4 {
		t.Fatalf("list with waiters: %d bytes (%v), plain %d: want a flags byte per ticket and a u32", len(b), err, len(plain))
	}
	_, r, err := ParseResponse(b)
	if err != nil || r.List == nil || r.List.Tickets[0].Waiters != 0 || r.List.Tickets[1].Waiters != 7 {
		t.Fatalf("parsed %+v %v", r.List, err)
	}
	zero := append(append([]byte(nil), b[:len(b)-5]...), 0, 0, 0, 0, 0) // count 0, truncated flag
	cut := append(append([]byte(nil), b[:len(b)-3]...), 0)              // the count cut short
	for name, bad := range map[string][]byte{"zero count": zero, "cut count": cut} {
		if _, _, err := ParseResponse(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// SPEC §4 (Revoke): a revoked ticket travels with a flags byte under a
// flagged body tag; an answer without one is encoded exactly as before
// revocations (a peer of the previous release reads it); a flagged body
// whose tickets carry no flag, or an unknown flag bit, is malformed.
func TestRevokedFlag(t *testing.T) {
	tk := Ticket{Name: "n", Holder: "h", Token: 1}
	plain, _ := AppendResponse(1, Response{Code: CodeOK, Ticket: &tk})
	const tagAt = headerLen + 1 + 4*2 + 8 // code, four empty strings, token
	if plain[tagAt] != bodyTicket {
		t.Fatalf("an answer without a revoked ticket is not tagged %d", bodyTicket)
	}
	rv := tk
	rv.Revoked = true
	flagged, _ := AppendResponse(1, Response{Code: CodeOK, Ticket: &rv})
	if len(flagged) != len(plain)+1 {
		t.Fatalf("flagged answer of %d bytes, plain %d", len(flagged), len(plain))
	}
	if flagged[tagAt] != bodyTicket|bodyFlagged {
		t.Fatalf("tag %d", flagged[tagAt])
	}
	for name, b := range map[string][]byte{
		"no flag set":  append(append([]byte(nil), flagged[:len(flagged)-1]...), 0),
		"unknown bit":  append(append([]byte(nil), flagged[:len(flagged)-1]...), 5),
		"flagged none": append(append([]byte(nil), flagged[:tagAt]...), bodyFlagged),
	} {
		if _, _, err := ParseResponse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
