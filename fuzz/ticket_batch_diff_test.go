package fuzz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
)

// FuzzBatchDecoders: the fast batch decoder against the one it replaced,
// kept as the reference (api.DecodeBatchReference and
// api.DecodeBatchOpReference: encoding/json's Decoder alone). For every
// body: DecodeBatch gives the reference's ops byte for byte or its
// refusal word for word; every op, and the body itself read as one op,
// gives the reference's op name, Write and refusal; and the handler,
// which reads the ops inside the body, answers each op with exactly the
// reference's refusal or makes exactly the reference's Write.
func FuzzBatchDecoders(f *testing.F) {
	client, _ := json.Marshal(wire.BatchRequest{Ops: []wire.BatchOp{
		{Op: "grant", Name: "jobs:42", Holder: "worker-7", LeaseS: ptr[int64](30)},
		{Op: "renew", Name: "a", Holder: "h", Token: ptr[uint64](9), LeaseS: ptr[int64](250)},
		{Op: "release", Name: "a.b_c-d", Holder: "h i", Token: ptr[uint64](18446744073709551615)},
	}})
	f.Add(client)
	for _, s := range []string{
		`{"op":"grant","name":"a","holder":"h","lease_s":30}`,
		` { "ops" : [ { "op" : "grant" , "name" : "a" , "holder" : "h" , "lease_s" : 30 } ] } `,
		"{\"ops\":[\t{\"op\":\"grant\",\r\n\"name\":\"a\",\"holder\":\"h\",\"lease_s\":30}\n]}\n",
		`{ "ops":[{"op":"grant","name":"a","holder":"h","lease_s":30}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":-0}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":030}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":3.0}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":3e1}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":-9223372036854775808}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":9223372036854775808}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":999999999999999999}]}`,
		`{"ops":[{"op":"renew","name":"a","holder":"h","token":18446744073709551616,"lease_s":3}]}`,
		`{"ops":[{"op":"renew","name":"a","holder":"h","token":-1,"lease_s":3}]}`,
		`{"ops":[{"op":"release","name":"a","holder":"h","token":0}]}`,
		`{"ops":[{"op":"release","name":"a","holder":"h\u0020i","token":1}]}`,
		`{"ops":[{"op":"release","name":"a","holder":"h\"i","token":1}]}`,
		`{"ops":[{"op":"release","name":"a","holder":"h` + "\xff" + `","token":1}]}`,
		`{"ops":[{"op":"release","name":"a","holder":"h` + "\x7f\x01" + `","token":1}]}`,
		`{"ops":[{"op":"release","name":"é","holder":"h","token":1}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30,"wait_ms":0}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30,"name":"b"}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30,"x":{"y":[1]}}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":null,"lease_s":30}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":"30"}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30,}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30}],}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30} {}]}`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30}]}` + "\v",
		"\u00a0" + `{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30}]}`,
		`{"ops":[{"op":"Grant","name":"a","holder":"h","lease_s":30}]}`,
		`{"ops":[{"name":"a","op":"grant","lease_s":30,"holder":"h"}]}`,
		`{"ops":[{"op":"grant","holder":"h","lease_s":30}]}`,
		`{"ops":[{}]}`, `{"ops":[]}`, `{"ops":[1]}`, `{"ops":null}`, `{"ops":[{"op":"grant"`, `{"ops":[{"op":"gr`,
		`{"ops":[{"op":"grant","name":"a","holder":"h","lease_s":30}],"ops":[]}`,
		`{"ops":[` + strings.TrimSuffix(strings.Repeat(`{"op":"grant","name":"a","holder":"h","lease_s":1},`, 256), ",") + `]}`,
		`{"ops":[` + strings.Repeat(`{"op":"grant","name":"a","holder":"h","lease_s":1},`, 256) + `]}`,
		`{"ops":[` + strings.Repeat(`{"op":"grant","name":"a","holder":"h","lease_s":1},`, 256) + `{]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		opAgrees(t, body)
		ref, rerr := api.DecodeBatchReference(body)
		got, gerr := api.DecodeBatch(body)
		if fmt.Sprint(gerr) != fmt.Sprint(rerr) || len(got) != len(ref) {
			t.Fatalf("batch %q: DecodeBatch %d ops, %v; the reference %d ops, %v", body, len(got), gerr, len(ref), rerr)
		}
		for i := range ref {
			if !bytes.Equal(got[i], ref[i]) {
				t.Fatalf("batch %q: op %d is %q, the reference's %q", body, i, got[i], ref[i])
			}
			opAgrees(t, ref[i])
		}
		if len(body) > api.MaxBatchBody {
			return // 413 before any decoder
		}
		be := &batchBackend{}
		rec := httptest.NewRecorder()
		api.NewHandler(api.Options{Backend: be}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/batch", bytes.NewReader(body)))
		if rerr != nil {
			var e wire.ErrorBody
			if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Message != rerr.Error() {
				t.Fatalf("batch %q: answered %d %s, the reference refuses it: %v", body, rec.Code, rec.Body, rerr)
			}
			return
		}
		var out wire.BatchResponse
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || len(out.Results) != len(ref) {
			t.Fatalf("batch %q of %d ops: answered %d %s", body, len(ref), rec.Code, rec.Body)
		}
		want := map[string]int{} // the reference's Writes, each with its count
		accepted := 0
		for i, raw := range ref {
			_, w, e := api.DecodeBatchOpReference(raw)
			var eb wire.ErrorBody
			_ = json.Unmarshal(out.Results[i].Body, &eb)
			switch {
			case e != nil && (out.Results[i].Status != http.StatusBadRequest || eb.Error != e.Code || eb.Message != e.Message):
				t.Fatalf("batch %q: op %d answered %d %s, the reference refuses it: %v", body, i, out.Results[i].Status, out.Results[i].Body, e)
			case e == nil && out.Results[i].Status != http.StatusOK:
				t.Fatalf("batch %q: op %d answered %d %s, the reference reads %+v", body, i, out.Results[i].Status, out.Results[i].Body, w)
			case e == nil:
				want[writeKey(w)]++
				accepted++
			}
		}
		for _, w := range be.writes {
			if want[writeKey(w)] == 0 {
				t.Fatalf("batch %q: the backend saw %+v, which the reference does not read (%d Writes, %d accepted)", body, w, len(be.writes), accepted)
			}
			want[writeKey(w)]--
		}
		if len(be.writes) != accepted {
			t.Fatalf("batch %q: the backend saw %d Writes, the reference accepts %d ops", body, len(be.writes), accepted)
		}
	})
}

// opAgrees checks DecodeBatchOp against DecodeBatchOpReference on raw:
// the same op name, Write and refusal (code and message).
func opAgrees(t *testing.T, raw []byte) {
	t.Helper()
	op, w, e := api.DecodeBatchOp(raw)
	rop, rw, re := api.DecodeBatchOpReference(raw)
	if op != rop || w != rw || fmt.Sprintf("%+v", e) != fmt.Sprintf("%+v", re) {
		t.Fatalf("op %q: DecodeBatchOp %q %+v %+v; the reference %q %+v %+v", raw, op, w, e, rop, rw, re)
	}
}

func ptr[T any](v T) *T { return &v }
