package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/ticket"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBackend records what reaches it and answers with a fixed result.
type fakeBackend struct {
	writes []Write
	res    ticket.Result
	err    error
}

func (f *fakeBackend) Write(_ context.Context, w Write) (Written, error) {
	f.writes = append(f.writes, w)
	return Written{Result: f.res, RecvMs: 1000}, f.err
}
func (f *fakeBackend) Get(context.Context, string) (ticket.Ticket, bool, error) {
	return ticket.Ticket{}, false, f.err
}
func (f *fakeBackend) List(context.Context, string, int) ([]ticket.Ticket, bool, error) {
	return nil, false, f.err
}
func (f *fakeBackend) Status(context.Context) wire.Status               { return wire.Status{} }
func (f *fakeBackend) Readiness() wire.Health                           { return wire.Health{Status: "ok"} }
func (f *fakeBackend) Liveness() wire.Health                            { return wire.Health{Status: "ok"} }
func (f *fakeBackend) Members(context.Context) (wire.Members, error)    { return wire.Members{}, nil }
func (f *fakeBackend) TransferLeadership(context.Context, string) error { return nil }
func (f *fakeBackend) RemoveMember(context.Context, string) error       { return nil }
func (f *fakeBackend) Snapshot(context.Context) (wire.SnapshotInfo, error) {
	return wire.SnapshotInfo{}, nil
}

func serve(h http.Handler, method, path, body string) (*httptest.ResponseRecorder, wire.ErrorBody) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var e wire.ErrorBody
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return rec, e
}

// SPEC §4.1: bad input reaches no Backend method.
func TestBadInputNeverReachesBackend(t *testing.T) {
	b := &fakeBackend{}
	h := NewHandler(Options{Backend: b})
	for _, body := range []string{
		`{"holder":"h","lease_s":0}`, `{"holder":"h","lease_s":"30"}`, `{"holder":"h","lease_s":30.5}`,
		`{"holder":"h","lease_s":30,"x":1}`, `{"holder":"","lease_s":30}`, `{}`, ``, `null`, `{"holder":"h","lease_s":30} x`,
		strings.Repeat(" ", MaxBody+1),
	} {
		rec, e := serve(h, "POST", "/v1/tickets/a/grant", body)
		if rec.Code/100 != 4 || e.Error == "" || e.Message == "" {
			t.Errorf("%.40q: %d %+v", body, rec.Code, e)
		}
	}
	if len(b.writes) != 0 {
		t.Fatalf("bad input reached the backend: %+v", b.writes)
	}
	rec, _ := serve(h, "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30}`)
	if rec.Code != 200 || len(b.writes) != 1 || b.writes[0] != (Write{Op: ticket.OpGrant, Name: "a", Holder: "h", LeaseS: 30}) {
		t.Fatalf("good grant: %d %+v", rec.Code, b.writes)
	}
}

// SPEC §4.1: FSM outcomes map to 200/409/503, and ticket_ops_total counts them.
func TestOutcomesAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	b := &fakeBackend{}
	h := NewHandler(Options{Backend: b, Metrics: m, Gatherer: reg})
	tk := ticket.Ticket{Name: "a", Holder: "x", Token: 9, LeaseS: 30, ValidBeforeMs: 31000, ExpiryMs: 31501}
	for _, c := range []struct {
		code   ticket.Code
		status int
		err    string
	}{
		{ticket.CodeOK, 200, ""},
		{ticket.CodeExisting, 200, ""},
		{ticket.CodeHeld, 409, "held"},
		{ticket.CodeNotHeld, 409, "not_held"},
		{ticket.CodeWrongHolder, 409, "wrong_holder"},
		{ticket.CodeWrongToken, 409, "wrong_token"},
		{ticket.CodeLeaseOver, 409, "lease_over"},
		{ticket.CodeNoDelta, 503, "unavailable"},
		{ticket.CodeFatal, 503, "unavailable"},
	} {
		b.res = ticket.Result{Code: c.code, Ticket: tk}
		rec, e := serve(h, "POST", "/v1/tickets/a/grant", `{"holder":"h","lease_s":30}`)
		if rec.Code != c.status || e.Error != c.err {
			t.Errorf("%v: %d %+v", c.code, rec.Code, e)
		}
		if c.code == ticket.CodeHeld && (e.Holder != "x" || e.Token != 9) {
			t.Errorf("held answer lacks holder/token: %+v", e)
		}
		if c.status == 200 {
			var g wire.Grant
			json.Unmarshal(rec.Body.Bytes(), &g)
			if g.RemainingMs != 30000 || g.ConservativeValidBeforeUnixMs != 31000 {
				t.Errorf("grant answer %+v", g)
			}
		}
	}
	if v := counter(t, reg, "grant", "held"); v != 1 {
		t.Fatalf("ticket_ops_total{grant,held} = %v", v)
	}
	if v := counter(t, reg, "grant", "unavailable"); v != 2 {
		t.Fatalf("ticket_ops_total{grant,unavailable} = %v", v)
	}
	b.err = Unavailable("replay", "barrier", "not yet")
	rec, e := serve(h, "GET", "/v1/tickets/a", "")
	if rec.Code != 503 || e.Stage != "replay" || e.Reason != "barrier" {
		t.Fatalf("503 from a read: %d %+v", rec.Code, e)
	}
	rec, _ = serve(h, "GET", "/metrics", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "ticket_op_duration_seconds_bucket") {
		t.Fatalf("metrics: %d", rec.Code)
	}
}

// counter reads ticket_ops_total{op,result} from the registry.
func counter(t *testing.T, reg *prometheus.Registry, op, result string) float64 {
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "ticket_ops_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == op && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
