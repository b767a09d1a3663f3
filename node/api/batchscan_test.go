package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"
)

// clientBatch is a batch body as the Go client's coalescer encodes it
// (json.Marshal of a wire.BatchRequest): n ops, grants and releases by
// turns, with the occasional renew.
func clientBatch(n int) []byte {
	req := wire.BatchRequest{}
	for i := range n {
		lease, token := int64(30), uint64(1000+i)
		op := wire.BatchOp{Op: "grant", Name: fmt.Sprintf("jobs:shard-%03d", i), Holder: fmt.Sprintf("worker-%02d.example:%d", i%16, 4000+i), LeaseS: &lease}
		switch i % 4 {
		case 1:
			op.Op, op.LeaseS, op.Token = "release", nil, &token
		case 3:
			op.Op, op.Token = "renew", &token
		}
		req.Ops = append(req.Ops, op)
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// The client's own bodies take the fast path whole, and every op it reads
// is the reference's reading.
func TestScanReadsTheClientShape(t *testing.T) {
	for _, n := range []int{1, 2, 64, MaxBatchOps} {
		fastAsReference(t, clientBatch(n), n)
	}
}

// JSON whitespace between tokens (an indented body) stays on the fast
// path, and reads as the reference reads it.
func TestScanTakesWhitespace(t *testing.T) {
	var req wire.BatchRequest
	if err := json.Unmarshal(clientBatch(8), &req); err != nil {
		t.Fatal(err)
	}
	body, _ := json.MarshalIndent(req, " \r", "\t ")
	fastAsReference(t, body, 8)
}

// fastAsReference checks that body of n ops takes the fast path, and that
// its ops, alone or read inside the body, are the reference's.
func fastAsReference(t *testing.T, body []byte, n int) {
	t.Helper()
	ops, ok := scanBatch(body)
	if !ok || len(ops) != n {
		t.Fatalf("a batch of %d ops: scanned %v, %d ops; want the fast path", n, ok, len(ops))
	}
	ref, err := DecodeBatchReference(body)
	if err != nil || len(ref) != n {
		t.Fatalf("the reference: %d ops, %v", len(ref), err)
	}
	for i := range ops {
		if string(ops[i].raw) != string(ref[i]) {
			t.Fatalf("op %d is %q, the reference's %q", i, ops[i].raw, ref[i])
		}
		if _, ok := scanOpExact(ref[i]); !ok {
			t.Fatalf("op %s alone: not the fast shape", ref[i])
		}
		sameOp(t, ref[i], ops[i].f.check)
	}
}

// Each input outside the fast shape makes the scanner give up (so the
// reference words the answer), and DecodeBatchOp answers what the
// reference answers.
func TestScanGivesUpOutsideItsShape(t *testing.T) {
	good := `{"op":"grant","name":"a","holder":"h","lease_s":30}`
	for _, op := range []string{
		`{"op":"grant","name":"a","holder":"h\u0041","lease_s":30}`,
		`{"op":"gr\u0061nt","name":"a","holder":"h","lease_s":30}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":030}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":3.0}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":3e1}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":-}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":9223372036854775807}`,
		`{"op":"renew","name":"a","holder":"h","token":18446744073709551615,"lease_s":3}`,
		`{"op":"renew","name":"a","holder":"h","token":-1,"lease_s":3}`,
		`{"op":"grant","name":"a","holder":"h` + "\xc3\xa9" + `","lease_s":30}`,
		`{"op":"grant","name":"a","holder":"h` + "\x7f" + `","lease_s":30}`,
		`{"op":"grant","name":"a","holder":"h` + "\t" + `","lease_s":30}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":30,"holder":"i"}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":30,"x":1}`,
		`{"op":"grant","name":"a","holder":null,"lease_s":30}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":"30"}`,
		`{"op":"grant","name":1,"holder":"h","lease_s":30}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":30,}`,
		`{"op":"grant","name":"a","holder":"h","lease_s":30`,
		`{"op":"grant" "name":"a","holder":"h","lease_s":30}`,
		`{"op":"steal","name":"a","holder":"h","lease_s":30}`,
		`{"name":"a","holder":"h","lease_s":30}`,
		`{"op":"grant","holder":"h","lease_s":30}`,
		`{}`, `[]`, `null`, `"grant"`,
		good + ` x`, good + "\v", "\u00a0" + good,
	} {
		if _, ok := scanOpExact([]byte(op)); ok {
			t.Errorf("%q: the scanner read it; want it to give up", op)
		}
		sameOp(t, []byte(op), func() (string, Write, *Error) { return DecodeBatchOp([]byte(op)) })
		body := `{"ops":[` + good + `,` + op + `]}`
		if _, ok := scanBatch([]byte(body)); ok {
			t.Errorf("batch with %q: the scanner read it; want it to give up", op)
		}
	}
	for _, body := range []string{
		`{"ops":[` + good + `],"ops":[` + good + `]}`, `{"ops":[` + good + `]} {}`, `{"ops":[` + good + `],}`,
		`{"ops":[]}`, `{"ops":[` + good + `,]}`, `{"op\u0073":[` + good + `]}`, `{"opsx":[` + good + `]}`,
		`{"ops":[` + strings.TrimSuffix(strings.Repeat(good+",", MaxBatchOps+1), ",") + `]}`,
	} {
		if _, ok := scanBatch([]byte(body)); ok {
			t.Errorf("%.80q: the scanner read it; want it to give up", body)
		}
		ref, rerr := DecodeBatchReference([]byte(body))
		got, gerr := DecodeBatch([]byte(body))
		if fmt.Sprint(gerr) != fmt.Sprint(rerr) || len(got) != len(ref) {
			t.Errorf("%.80q: DecodeBatch %d ops, %v; the reference %d, %v", body, len(got), gerr, len(ref), rerr)
		}
	}
}

// sameOp checks that read answers what DecodeBatchOpReference answers
// for raw.
func sameOp(t *testing.T, raw []byte, read func() (string, Write, *Error)) {
	t.Helper()
	op, w, e := read()
	rop, rw, re := DecodeBatchOpReference(raw)
	if op != rop || w != rw || fmt.Sprint(e) != fmt.Sprint(re) {
		t.Errorf("op %q: read %q %+v %v; the reference %q %+v %v", raw, op, w, e, rop, rw, re)
	}
}

// BenchmarkDecodeBatch reads a 64-op batch as the client sends it and
// checks every op, as server.batch does before the writes: the reference
// (encoding/json's Decoder for the envelope and each op) against the
// fast path. Compare the two in one run: benchstat or the ratio of ns/op.
func BenchmarkDecodeBatch(b *testing.B) {
	body := clientBatch(64)
	for _, c := range []struct {
		name string
		read func() error
	}{
		{"reference", func() error {
			raws, err := DecodeBatchReference(body)
			for _, raw := range raws {
				if _, _, e := DecodeBatchOpReference(raw); e != nil {
					return e
				}
			}
			return err
		}},
		{"fast", func() error {
			ops, err := decodeBatch(body)
			for i := range ops {
				if _, _, e := ops[i].decode(); e != nil {
					return e
				}
			}
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := c.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeWrite reads a grant and a release body as the Go client
// sends them, through the single endpoints' reading (the scanner) and
// through the reference (encoding/json's strict decoder), in one run.
func BenchmarkDecodeWrite(b *testing.B) {
	grant, _ := json.Marshal(wire.GrantRequest{Holder: "client-042", LeaseS: 30})
	release, _ := json.Marshal(wire.ReleaseRequest{Holder: "client-042", Token: 123456789})
	for _, c := range []struct {
		name string
		read func(rt route, name string, body []byte) (Write, *Error)
	}{{"reference", decodeWriteReference}, {"fast", decodeWrite}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.read(rGrant, "jobs:42", grant); err != nil {
					b.Fatal(err)
				}
				if _, err := c.read(rRelease, "jobs:42", release); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
