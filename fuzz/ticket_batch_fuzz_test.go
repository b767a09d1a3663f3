package fuzz

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

// batchBackend records the Writes of a batch (its ops run concurrently)
// and grants each.
type batchBackend struct {
	bodyBackend
	mu sync.Mutex
}

func (b *batchBackend) Write(ctx context.Context, w api.Write) (api.Written, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bodyBackend.Write(ctx, w)
}

func writeKey(w api.Write) string { return fmt.Sprintf("%+v", w) }

// FuzzBatchBody: POST /v1/batch (issue 16 item 3). A body the batch
// decoder refuses is a 4xx JSON error that reaches no backend; one it
// accepts (1..=256 ops) is a 200 with one result per op, in order: an op
// DecodeBatchOp refuses is its own 400 and writes nothing, every other op
// is exactly one Write, the one DecodeBatchOp read. And a batch op is
// accepted exactly when its single endpoint accepts the same fields (less
// "op" and "name") with the same Write, except that a batch refuses
// wait_ms.
func FuzzBatchBody(f *testing.F) {
	for _, s := range []string{
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30}]}`,
		`{"ops":[{"op":"renew","name":"a","holder":"h","token":7,"lease_s":30},{"op":"release","name":"b","holder":"h","token":7}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30,"wait_ms":5}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30,"token":1}]}`,
		`{"ops":[{"op":"grant","name":"a/b","holder":"h","lease_s":30}]}`,
		`{"ops":[{"op":"steal","name":"a","holder":"h"}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30,"holder":"i"}]}`,
		`{"ops":[{"op":"grant","name":"a","hold\u0065r":"h","lease_s":30}]}`,
		`{"ops":[null,[],1,"x",{}]}`,
		`{"ops":[]}`, `{"ops":{}}`, `{}`, `[]`, ``, `{"ops":[1],"ops":[1]}`, `{"ops":[{"op":"grant"}]} x`,
		`{"ops":[` + strings.TrimSuffix(strings.Repeat(`{"op":"grant","name":"a","holder":"h","lease_s":1},`, 257), ",") + `]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		be := &batchBackend{}
		h := api.NewHandler(api.Options{Backend: be})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/batch", bytes.NewReader(body)))
		ops, derr := api.DecodeBatch(body)
		if derr != nil || len(body) > api.MaxBatchBody {
			var e wire.ErrorBody
			if rec.Code < 400 || rec.Code > 499 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error == "" || e.Message == "" || len(be.writes) != 0 {
				t.Fatalf("refused batch %q (%v): status %d, answer %q, %d writes; want a 4xx JSON error and nothing written", body, derr, rec.Code, rec.Body.Bytes(), len(be.writes))
			}
			return
		}
		var out wire.BatchResponse
		if len(ops) < 1 || len(ops) > api.MaxBatchOps || rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || len(out.Results) != len(ops) {
			t.Fatalf("accepted batch %q of %d ops: status %d, answer %q", body, len(ops), rec.Code, rec.Body.Bytes())
		}
		var want []string
		for i, raw := range ops {
			_, w, e := api.DecodeBatchOp(raw)
			if e != nil {
				if out.Results[i].Status != http.StatusBadRequest {
					t.Fatalf("op %d %q refused (%v) but answered %d %s", i, raw, e, out.Results[i].Status, out.Results[i].Body)
				}
			} else {
				if out.Results[i].Status != http.StatusOK {
					t.Fatalf("op %d %q accepted as %+v but answered %d %s", i, raw, w, out.Results[i].Status, out.Results[i].Body)
				}
				want = append(want, writeKey(w))
			}
			singleAgrees(t, raw, w, e)
		}
		var got []string
		for _, w := range be.writes {
			got = append(got, writeKey(w))
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			t.Fatalf("batch %q: the backend saw %v, the accepted ops are %v", body, got, want)
		}
	})
}

// singleAgrees checks one batch op against its single endpoint.
func singleAgrees(t *testing.T, raw []byte, w api.Write, e *api.Error) {
	t.Helper()
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil || naiveDuplicateKey(raw) {
		return // not an object, or a key given twice (the map would hide it)
	}
	var op, name string
	if json.Unmarshal(fields["op"], &op) != nil || json.Unmarshal(fields["name"], &name) != nil || ticket.ValidName(name) != nil {
		return
	}
	action := map[string]string{"grant": "grant", "renew": "renew", "release": "release"}[op]
	if action == "" {
		return
	}
	_, wait := fields["wait_ms"]
	delete(fields, "op")
	delete(fields, "name")
	single, _ := json.Marshal(fields)
	be := &bodyBackend{}
	rec := httptest.NewRecorder()
	api.NewHandler(api.Options{Backend: be}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/tickets/"+name+"/"+action, bytes.NewReader(single)))
	accepted := len(be.writes) == 1
	switch {
	case wait:
		if e == nil {
			t.Fatalf("batch op %q with wait_ms accepted", raw)
		}
	case accepted != (e == nil):
		t.Fatalf("batch op %q: batch refusal %v, the single endpoint %s answered %d %s", raw, e, action, rec.Code, rec.Body.Bytes())
	case accepted && be.writes[0] != w:
		t.Fatalf("batch op %q gave %+v, the single endpoint %+v", raw, w, be.writes[0])
	}
}
