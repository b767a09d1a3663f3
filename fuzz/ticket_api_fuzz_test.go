package fuzz

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/ticket"
)

// bodyBackend is an api.Backend that records the one Write the handler
// asks for and grants it; every other method is unused by these requests.
type bodyBackend struct {
	writes []api.Write
}

func (b *bodyBackend) Write(_ context.Context, w api.Write) (api.Written, error) {
	b.writes = append(b.writes, w)
	return api.Written{Result: ticket.Result{Code: ticket.CodeOK, Ticket: ticket.Ticket{
		Name: w.Name, Holder: w.Holder, Token: max(w.Token, 1), LeaseS: w.LeaseS, ValidBeforeMs: 1_000_000, ExpiryMs: 2_000_000,
	}}, RecvMs: 1}, nil
}

var errUnused = errors.New("fuzz: not used by body requests")

func (b *bodyBackend) Get(context.Context, string) (ticket.Ticket, bool, error) {
	return ticket.Ticket{}, false, errUnused
}
func (b *bodyBackend) List(context.Context, string, int) ([]ticket.Ticket, bool, error) {
	return nil, false, errUnused
}
func (b *bodyBackend) Status(context.Context) wire.Status { return wire.Status{} }
func (b *bodyBackend) Readiness() wire.Health             { return wire.Health{Status: "ok"} }
func (b *bodyBackend) Liveness() wire.Health              { return wire.Health{Status: "ok"} }
func (b *bodyBackend) Members(context.Context) (wire.Members, error) {
	return wire.Members{}, errUnused
}
func (b *bodyBackend) TransferLeadership(context.Context, string) error { return errUnused }
func (b *bodyBackend) RemoveMember(context.Context, string) error       { return errUnused }
func (b *bodyBackend) Snapshot(context.Context) (wire.SnapshotInfo, error) {
	return wire.SnapshotInfo{}, errUnused
}

// The write requests whose bodies the strict decoder reads (SPEC §4.1).
var bodyRoutes = []struct {
	action   string
	op       ticket.Op
	keys     []string
	optional []string
}{
	{"grant", ticket.OpGrant, []string{"holder", "lease_s"}, []string{"wait_ms"}}, // SPEC §4.2
	{"renew", ticket.OpRenew, []string{"holder", "token", "lease_s"}, nil},
	{"release", ticket.OpRelease, []string{"holder", "token"}, nil},
}

// naiveBody is the deliberately simple reading of a write body: standard
// encoding/json into a map, exactly the route's keys, the holder a string
// of SPEC §4 (1..=128 printable ASCII), lease_s a canonical decimal in
// 1..=250, token a canonical decimal u64 ≥ 1, the optional wait_ms a
// canonical decimal in 0..=300000. A map keeps only the last of
// a key given twice, so duplicates are found first by naiveDuplicateKey, a
// separate walk over encoding/json's tokens; a body with one is refused.
type naiveBody struct {
	ok     bool
	dup    bool // a top-level key is given twice
	holder string
	lease  uint64
	token  uint64
	wait   uint64
}

// naiveDuplicateKey reports whether the top-level JSON object in body names
// one key twice (keys compared after unescaping, as encoding/json reads
// them). Keys come from Decoder.Token; each value is skipped whole as a
// json.RawMessage. Malformed JSON has no duplicate as far as it read.
func naiveDuplicateKey(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		key, ok := tok.(string)
		if !ok {
			return false
		}
		if seen[key] {
			return true
		}
		seen[key] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

func naiveDecode(keys, optional []string, body []byte) naiveBody {
	if naiveDuplicateKey(body) {
		return naiveBody{dup: true}
	}
	var m map[string]json.RawMessage
	if !json.Valid(body) || json.Unmarshal(body, &m) != nil || m == nil || len(m) < len(keys) || len(m) > len(keys)+len(optional) {
		return naiveBody{}
	}
	var n naiveBody
	for _, k := range append(slices.Clone(keys), optional...) {
		raw, ok := m[k]
		if !ok {
			if slices.Contains(optional, k) {
				continue
			}
			return naiveBody{}
		}
		delete(m, k)
		v := string(raw)
		switch k {
		case "wait_ms":
			if n.wait, ok = naiveUint(v); !ok || n.wait > 300_000 {
				return naiveBody{}
			}
		case "holder":
			if json.Unmarshal(raw, &n.holder) != nil || !strings.HasPrefix(v, `"`) || !naiveHolder.MatchString(n.holder) {
				return naiveBody{}
			}
		case "lease_s": // a negative literal is out of range anyway
			lease, ok := naiveUint(v)
			if !ok || lease < 1 || lease > 250 {
				return naiveBody{}
			}
			n.lease = lease
		case "token":
			var ok bool
			if n.token, ok = naiveUint(v); !ok || n.token < 1 {
				return naiveBody{}
			}
		}
	}
	if len(m) != 0 {
		return naiveBody{} // a key the route does not take
	}
	n.ok = true
	return n
}

// FuzzTicketAPIBody: the API's strict JSON body decoder (DESIGN §11), run
// through the real handler on grant, renew and release. It never panics;
// a body it accepts reaches the backend with valid fields equal to the
// naive reading's; a body it refuses gets a 4xx JSON error and reaches no
// backend. Both agree on acceptance (a key given twice refused by both,
// and the strict decoder's "given twice" only where the naive walk found
// one), except that bodies over api.MaxBody are refused (413).
func FuzzTicketAPIBody(f *testing.F) {
	for _, s := range []struct {
		route uint8
		body  string
	}{
		{0, `{"holder":"h","lease_s":30}`},
		{0, `{"lease_s":250,"holder":"alice smith"}`},
		{0, " {\n\t\"holder\" : \" \" , \"lease_s\" : 1 }\n"},
		{0, `{"holder":"h","lease_s":30,"holder":"h"}`},
		{0, `{"holder":"h","lease_s":30,"hold\u0065r":"h"}`},
		{1, `{"token":7,"holder":"h","token":7,"lease_s":60}`},
		{2, `{"holder":"h","token":7,"token":8}`},
		{0, `{"holder":"h","lease_s":30.0}`},
		{0, `{"holder":"h","lease_s":3e1}`},
		{0, `{"holder":"h","lease_s":-0}`},
		{0, `{"holder":"h","lease_s":"30"}`},
		{0, `{"holder":null,"lease_s":30}`},
		{0, `{"holder":["h"],"lease_s":30}`},
		{0, `{"holder":"\u0068\u0020","lease_s":30}`},
		{0, `{"holder":"a\u0000","lease_s":30}`},
		{0, `{"holder":"\ud800","lease_s":30}`},
		{0, `{"holder":"h","lease_s":30}{}`},
		{0, `{"holder":"h","lease_s":30,}`},
		{0, `{"holder":"h","lease_s":99999999999999999999}`},
		{0, `[]`},
		{0, `{"holder":"h","lease_s":30,"wait_ms":0}`},
		{0, `{"holder":"h","lease_s":30,"wait_ms":300000}`},
		{0, `{"holder":"h","lease_s":30,"wait_ms":300001}`},
		{0, `{"holder":"h","lease_s":30,"wait_ms":-0}`},
		{0, `{"wait_ms":5,"holder":"h","lease_s":30,"wait_ms":5}`},
		{1, `{"holder":"h","token":7,"lease_s":60,"wait_ms":5}`},
		{0, ``},
		{1, `{"holder":"h","token":7,"lease_s":60}`},
		{1, `{"holder":"h","token":18446744073709551615,"lease_s":60}`},
		{1, `{"holder":"h","token":18446744073709551616,"lease_s":60}`},
		{1, `{"holder":"h","token":-1,"lease_s":60}`},
		{1, `{"holder":"h","token":0,"lease_s":60}`},
		{2, `{"holder":"h","token":7}`},
		{2, `{"holder":"h","token":7,"lease_s":1}`},
		{2, `{"holder":"` + strings.Repeat("x", 129) + `","token":7}`},
	} {
		f.Add(s.route, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		be := &bodyBackend{}
		h := api.NewHandler(api.Options{Backend: be})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/tickets/fz/"+r.action, bytes.NewReader(body)))
		naive := naiveDecode(r.keys, r.optional, body)

		if len(be.writes) == 0 {
			var e wire.ErrorBody
			if rec.Code < 400 || rec.Code > 499 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error == "" || e.Message == "" {
				t.Fatalf("refused body %q: status %d, answer %q; want a 4xx JSON error with a message", body, rec.Code, rec.Body.Bytes())
			}
			if naive.ok && len(body) <= api.MaxBody {
				t.Fatalf("strict decoder refused %q (%s), the naive one accepts it", body, e.Message)
			}
			if strings.Contains(e.Message, "given twice") && !naive.dup {
				t.Fatalf("strict decoder says %q for %q, the naive walk found no key given twice", e.Message, body)
			}
			return
		}
		if naive.dup {
			t.Fatalf("accepted body %q names a key twice", body)
		}
		if len(be.writes) != 1 || rec.Code != http.StatusOK {
			t.Fatalf("accepted body %q: %d writes, status %d", body, len(be.writes), rec.Code)
		}
		w := be.writes[0]
		if w.Op != r.op || w.Name != "fz" || ticket.ValidHolder(w.Holder) != nil {
			t.Fatalf("accepted body %q gave %+v", body, w)
		}
		if (w.Op != ticket.OpGrant) != (w.Token >= 1) || w.Op == ticket.OpGrant && w.Token != 0 {
			t.Fatalf("accepted body %q gave token %d for %s", body, w.Token, w.Op)
		}
		if (w.Op != ticket.OpRelease) != (w.LeaseS >= 1 && w.LeaseS <= 250) || w.Op == ticket.OpRelease && w.LeaseS != 0 {
			t.Fatalf("accepted body %q gave lease %d for %s", body, w.LeaseS, w.Op)
		}
		if !naive.ok || naive.holder != w.Holder || naive.token != w.Token || naive.lease != uint64(w.LeaseS) || naive.wait != uint64(w.WaitMs) {
			t.Fatalf("accepted body %q gave %+v; the naive reading is %+v", body, w, naive)
		}
	})
}
