package fuzz

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/tckclk/tckclk/node/cluster/forward"
)

// FuzzForwardFrames feeds arbitrary bytes, as a frame body, to the strict
// request and response decoders of the forwarding frames (issue 11 item 4):
// neither panics; each accepts exactly what the naive decoder accepts, with
// the same id and fields; an accepted body re-encodes byte-identically; and
// the same bytes behind a length prefix read back through ReadFrame.
func FuzzForwardFrames(f *testing.F) {
	seed := func(b []byte, err error) {
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	tk := forward.Ticket{Name: "n", Holder: "h", Token: 42, LeaseS: 30, ConservativeValidBeforeUnixMs: 1_800_000_030_000, ServerExpiryUnixMs: 1_800_000_030_500, RemainingMs: 30_000}
	seed(forward.AppendRequest(1, forward.Request{Op: forward.OpGrant, Name: "orders.migration", Holder: "w-1", LeaseS: 30, WaitMs: 500}))
	seed(forward.AppendRequest(2, forward.Request{Op: forward.OpRenew, Name: "n", Holder: "h", Token: 9, LeaseS: 250}))
	seed(forward.AppendRequest(3, forward.Request{Op: forward.OpRelease, Name: "n", Holder: "h", Token: 9}))
	seed(forward.AppendRequest(4, forward.Request{Op: forward.OpGet, Name: "n"}))
	seed(forward.AppendRequest(5, forward.Request{Op: forward.OpList, Prefix: "o", Limit: 10}))
	seed(forward.AppendRequest(10, forward.Request{Op: forward.OpWatch, Name: "n", Index: 12, WaitMs: 1000}))
	seed(forward.AppendRequest(14, forward.Request{Op: forward.OpRevoke, Name: "n", Token: 42}))
	rv := tk
	rv.Revoked = true
	seed(forward.AppendResponse(15, forward.Response{Code: forward.CodeOK, Ticket: &rv}))
	seed(forward.AppendResponse(16, forward.Response{Code: forward.CodeOK, List: &forward.List{Tickets: []forward.Ticket{tk, rv}}}))
	wt := tk
	wt.Waiters = 3
	seed(forward.AppendResponse(17, forward.Response{Code: forward.CodeOK, List: &forward.List{Tickets: []forward.Ticket{tk, wt, rv}}}))
	seed(forward.AppendResponse(11, forward.Response{Code: forward.CodeOK, Watched: &forward.Watched{Index: 12, Ticket: &tk}}))
	seed(forward.AppendResponse(12, forward.Response{Code: forward.CodeOK, Watched: &forward.Watched{Index: 13}}))
	seed(forward.AppendResponse(13, forward.Response{Code: forward.CodeOK, Ticket: &tk, WaitedMs: 1500}))
	seed(forward.AppendResponse(6, forward.Response{Code: forward.CodeOK, Ticket: &tk}))
	seed(forward.AppendResponse(7, forward.Response{Code: forward.CodeOK, List: &forward.List{Tickets: []forward.Ticket{tk, {}}, Truncated: true}}))
	seed(forward.AppendResponse(8, forward.Response{Code: forward.CodeHeld, Message: "held", Holder: "o", Token: 3}))
	seed(forward.AppendResponse(9, forward.Response{Code: forward.CodeUnavailable, Message: "m", Stage: "failed", Reason: "rollback"}))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		id, req, err := forward.ParseRequest(body)
		nid, nreq, nok := naiveForwardRequest(body)
		if (err == nil) != nok {
			t.Fatalf("request: strict err %v, naive ok %v", err, nok)
		}
		if err == nil {
			if id != nid || !reflect.DeepEqual(req, nreq) {
				t.Fatalf("request decoders disagree: %d %+v vs %d %+v", id, req, nid, nreq)
			}
			out, err := forward.AppendRequest(id, req)
			if err != nil || !bytes.Equal(out, body) {
				t.Fatalf("request re-encoding: %v\n%x\n%x", err, out, body)
			}
		}
		id, resp, err := forward.ParseResponse(body)
		nid, nresp, nok := naiveForwardResponse(body)
		if (err == nil) != nok {
			t.Fatalf("response: strict err %v, naive ok %v", err, nok)
		}
		if err == nil {
			if id != nid || !reflect.DeepEqual(resp, nresp) {
				t.Fatalf("response decoders disagree: %d %+v vs %d %+v", id, resp, nid, nresp)
			}
			out, err := forward.AppendResponse(id, resp)
			if err != nil || !bytes.Equal(out, body) {
				t.Fatalf("response re-encoding: %v\n%x\n%x", err, out, body)
			}
		}
		framed := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		got, err := forward.ReadFrame(bytes.NewReader(append(framed, body...)))
		if len(body) > forward.MaxFrame {
			if err == nil {
				t.Fatal("ReadFrame accepted an oversize frame")
			}
		} else if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("ReadFrame: %v", err)
		}
	})
}
