package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

// POST /v1/batch carries several grant, renew and release ops in one
// request (one HTTP request per op bounds a client's throughput long
// before Raft does: bench/report.md). Each op
// goes through exactly the path of its single endpoint: the same
// validation, the same Backend.Write (clock check per proposal, its own
// Raft entry, forwarding from a follower, the unknown-outcome mapping) and
// the same answer, status and JSON body — but for the renew ops of a
// Backend that is a Renewer: those go to Renews together (a leader
// proposes them as KeepAlive entries, many renewals an entry: keeping
// millions of tickets alive takes that many renewals per lease), each
// still answered as its single endpoint would. The ops run concurrently;
// their order of application is unspecified, as for concurrent single
// requests. The results come back in the order of the ops.

// MaxBatchOps is the most ops one batch may carry.
const MaxBatchOps = wire.MaxBatchOps

// MaxBatchBody is the largest batch body accepted (larger: 413): room for
// MaxBatchOps ops with the longest names and holders.
const MaxBatchBody = 256 << 10

// The fields of a batch op, as bits of opFields.seen.
const (
	fOp uint8 = 1 << iota
	fName
	fHolder
	fToken
	fLease
	fWait
)

// batchOps are the op names a batch takes, and the fields each takes
// besides "op" and "name".
var batchOps = map[string]struct {
	op    ticket.Op
	takes uint8
}{
	"grant":   {ticket.OpGrant, fHolder | fLease},
	"renew":   {ticket.OpRenew, fHolder | fToken | fLease},
	"release": {ticket.OpRelease, fHolder | fToken},
}

// opChecked are the fields whose presence an op's kind decides, in the
// order they are checked (and named in the refusal).
var opChecked = []struct {
	bit  uint8
	name string
}{{fHolder, "holder"}, {fToken, "token"}, {fLease, "lease_s"}}

// opFields is one batch op as read, before it is checked.
type opFields struct {
	op     string
	wr     Write // Name, Holder and Token
	lease  int64
	waitMs uint64
	seen   uint8 // the fields given
}

// batchResult is one op's answer inside a batch answer: the status and
// body its single endpoint would have answered.
type batchResult struct {
	Status int `json:"status"`
	Body   any `json:"body"`
}

type batchAnswer struct {
	Results []batchResult `json:"results"`
}

// DecodeBatch reads a batch body {"ops":[...]} into its ops, each still
// undecoded JSON; a malformed body (not that object, an empty list, more
// than MaxBatchOps ops) is an error naming the field. The ops may share
// body's memory. Exported for the fuzz targets.
func DecodeBatch(body []byte) ([]json.RawMessage, error) {
	ops, err := decodeBatch(body)
	if err != nil {
		return nil, err
	}
	raws := make([]json.RawMessage, len(ops))
	for i, op := range ops {
		raws[i] = op.raw
	}
	return raws, nil
}

// batchOp is one op of a batch body: its JSON and, when the fast scanner
// read it, its fields.
type batchOp struct {
	raw     json.RawMessage
	f       opFields
	scanned bool
}

// decode reads and checks the op as DecodeBatchOp does.
func (op *batchOp) decode() (string, Write, *Error) {
	if op.scanned {
		return op.f.check()
	}
	return DecodeBatchOp(op.raw)
}

// decodeBatch is DecodeBatch: the fast scanner for a body in the shape
// the Go client sends, DecodeBatchReference for any other.
func decodeBatch(body []byte) ([]batchOp, error) {
	if ops, ok := scanBatch(body); ok {
		return ops, nil
	}
	raws, err := DecodeBatchReference(body)
	if err != nil {
		return nil, err
	}
	ops := make([]batchOp, len(raws))
	for i, raw := range raws {
		ops[i].raw = raw
	}
	return ops, nil
}

// DecodeBatchReference is DecodeBatch over encoding/json's Decoder
// alone: the reading every input had before the fast path, and still the
// one of every body outside its shape. Exported for the differential fuzz
// target (FuzzBatchDecoders).
func DecodeBatchReference(body []byte) ([]json.RawMessage, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New(`body is empty; want {"ops":[...]}`)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("body is not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("body must be a JSON object, not %s", describe(tok))
	}
	var ops []json.RawMessage
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("body is not JSON: %v", err)
		}
		if key, _ := tok.(string); key != "ops" {
			return nil, fmt.Errorf("unknown field %q; a batch takes \"ops\"", key)
		}
		if seen {
			return nil, errors.New(`field "ops" is given twice`)
		}
		seen = true
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("field \"ops\": not JSON: %v", err)
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return nil, fmt.Errorf("field \"ops\": want an array of ops, got %s", describe(tok))
		}
		for dec.More() {
			if len(ops) == MaxBatchOps {
				return nil, fmt.Errorf("field \"ops\": more than %d ops", MaxBatchOps)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, fmt.Errorf("field \"ops\": op %d is not JSON: %v", len(ops), err)
			}
			ops = append(ops, raw)
		}
		if _, err := dec.Token(); err != nil { // the closing bracket
			return nil, fmt.Errorf("field \"ops\": not JSON: %v", err)
		}
	}
	if err := closeObject(dec); err != nil {
		return nil, err
	}
	if !seen {
		return nil, errors.New(`field "ops" is required`)
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("field \"ops\": empty; want 1..=%d ops", MaxBatchOps)
	}
	return ops, nil
}

// DecodeBatchOp reads one op of a batch and validates it as its single
// endpoint would (name, holder, token, lease). It returns the op's name
// ("grant", "renew", "release"; "" when the op field is unusable) and the
// Write, or a 400 naming the field. An op in the shape the Go client sends
// is read by a scanner of its own; any other by DecodeBatchOpReference,
// so every refusal's text is that reading's. Exported for the fuzz
// targets.
func DecodeBatchOp(raw []byte) (string, Write, *Error) {
	if f, ok := scanOpExact(raw); ok {
		return f.check()
	}
	return DecodeBatchOpReference(raw)
}

// DecodeBatchOpReference is DecodeBatchOp over the strict decoder
// (decodeSeen) alone: the reading every op had before the fast scanner,
// and still the one of every op outside its shape. Exported for the
// differential fuzz target (FuzzBatchDecoders).
func DecodeBatchOpReference(raw []byte) (string, Write, *Error) {
	var f opFields
	seen, err := decodeSeen(raw, []fieldSpec{
		{name: "op", kind: kString, required: true, str: &f.op},
		{name: "name", kind: kString, required: true, str: &f.wr.Name},
		{name: "holder", kind: kString, str: &f.wr.Holder},
		{name: "token", kind: kUint, u64: &f.wr.Token},
		{name: "lease_s", kind: kInt, i64: &f.lease},
		{name: "wait_ms", kind: kUint, u64: &f.waitMs},
	})
	if err != nil {
		opName := f.op
		if _, known := batchOps[opName]; !known {
			opName = ""
		}
		return opName, Write{}, badRequest("%v", strings.Replace(err.Error(), "this request takes", "a batch op takes", 1))
	}
	for _, c := range opChecked {
		if seen[c.name] {
			f.seen |= c.bit
		}
	}
	if seen["wait_ms"] {
		f.seen |= fWait
	}
	return f.check()
}

// check validates a read op (its kind, the fields that kind takes, the
// name, then checkWrite).
func (f *opFields) check() (string, Write, *Error) {
	op, known := batchOps[f.op]
	if !known {
		return "", Write{}, badRequest("field \"op\": %q is not grant, renew or release", f.op)
	}
	opName := f.op
	if f.seen&fWait != 0 {
		return opName, Write{}, badRequest("field \"wait_ms\": not allowed in a batch; a blocking grant is a request of its own")
	}
	for _, c := range opChecked {
		given, takes := f.seen&c.bit != 0, op.takes&c.bit != 0
		switch {
		case given && !takes:
			return opName, Write{}, badRequest("field %q: a %s takes no %s", c.name, opName, c.name)
		case !given && takes:
			return opName, Write{}, badRequest("field %q is required", c.name)
		}
	}
	wr := f.wr
	if err := ticket.ValidName(wr.Name); err != nil {
		return opName, Write{}, badRequest("ticket %v", err)
	}
	wr.Op = op.op
	wr, berr := checkWrite(wr, f.lease)
	return opName, wr, berr
}

// batch is POST /v1/batch: every op through its single endpoint's path,
// concurrently, answered together in order.
func (s *server) batch(w http.ResponseWriter, r *http.Request, body []byte) string {
	if err := noQuery(r); err != nil {
		return s.fail(w, err)
	}
	ops, err := decodeBatch(body)
	if err != nil {
		return s.fail(w, badRequest("%v", err))
	}
	s.m.BatchOps(len(ops))
	answers := make([]answer, len(ops))
	renewer, _ := s.b.(Renewer)
	var renews []int // the ops given to Renews
	var renewWrites []Write
	var wg sync.WaitGroup
	start := time.Now()
	for i := range ops {
		op, wr, berr := ops[i].decode()
		if berr != nil {
			answers[i] = s.errAnswer(berr)
			if op != "" {
				s.m.Observe(op, answers[i].label, time.Since(start))
			}
			continue
		}
		if renewer != nil && wr.Op == ticket.OpRenew {
			renews = append(renews, i)
			renewWrites = append(renewWrites, wr)
			continue
		}
		wg.Go(func() {
			answers[i] = s.apply(r.Context(), wr)
			s.m.Observe(op, answers[i].label, time.Since(start))
		})
	}
	if len(renews) > 0 {
		wg.Go(func() {
			outs := renewer.Renews(r.Context(), renewWrites)
			for j, i := range renews {
				o := Outcome{Err: errors.New("internal: no outcome for this renewal")}
				if j < len(outs) {
					o = outs[j]
				}
				answers[i] = s.writtenAnswer(renewWrites[j], o.Written, o.Err)
				s.m.Observe("renew", answers[i].label, time.Since(start))
			}
		})
	}
	wg.Wait()
	out := batchAnswer{Results: make([]batchResult, len(answers))}
	for i, a := range answers {
		out.Results[i] = batchResult{Status: a.status, Body: a.body}
	}
	writeJSON(w, http.StatusOK, out)
	return "ok"
}
