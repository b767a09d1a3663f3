package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/ticket"
)

// scriptBackend answers each Write by its holder, so one batch can mix
// outcomes; it is safe for the batch's concurrent ops.
type scriptBackend struct {
	fakeBackend
	mu     sync.Mutex
	writes []Write
	// gate, when set, holds every Write until it is closed.
	gate    chan struct{}
	entered chan struct{}
}

var scripted = map[string]ticket.Code{
	"ok": ticket.CodeOK, "again": ticket.CodeExisting, "held": ticket.CodeHeld, "nothold": ticket.CodeNotHeld,
	"wrongh": ticket.CodeWrongHolder, "wrongt": ticket.CodeWrongToken, "over": ticket.CodeLeaseOver,
	"nodelta": ticket.CodeNoDelta, "fatal": ticket.CodeFatal,
}

func (b *scriptBackend) Write(ctx context.Context, w Write) (Written, error) {
	b.mu.Lock()
	b.writes = append(b.writes, w)
	b.mu.Unlock()
	if b.gate != nil {
		b.entered <- struct{}{}
		<-b.gate
	}
	switch w.Holder {
	case "lost":
		return Written{}, Unavailable("", "unknown_outcome", "forwarded to the leader, no answer; the write may still be applied")
	case "notleader":
		return Written{}, NotLeader("raft", "this node is not the leader of the current term")
	case "internal":
		return Written{}, fmt.Errorf("disk on fire")
	}
	tk := ticket.Ticket{Name: w.Name, Holder: w.Holder, Token: 7 + w.Token, LeaseS: w.LeaseS, ValidBeforeMs: 31000, ExpiryMs: 31501}
	if w.Holder == "held" {
		tk.Holder = "someone"
	}
	return Written{Result: ticket.Result{Code: scripted[w.Holder], Ticket: tk}, RecvMs: 1000}, nil
}

func (b *scriptBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.writes)
}

type batchOut struct {
	Results []struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"results"`
}

// single is what the op's own endpoint answers (status, body).
func single(h *server, op, name, body string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/tickets/"+name+"/"+op, strings.NewReader(body)))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// Each op of a batch gets exactly the answer (status and JSON body) its
// single endpoint gives, in order, whatever mix of outcomes the batch
// holds; a bad op is its own 400 and reaches no Backend method.
// With a Backend that is a Renewer, the renew ops (only the good ones)
// go to one Renews call, in order, and are answered from its outcomes
// exactly as their single endpoints answer.
func TestBatchAnswersAsTheSingleEndpoints(t *testing.T) {
	t.Run("writes", func(t *testing.T) { batchAsSingles(t, &scriptBackend{}, nil) })
	r := &renewingBackend{}
	t.Run("renewer", func(t *testing.T) { batchAsSingles(t, &r.scriptBackend, r) })
	if len(r.calls) != 1 {
		t.Fatalf("%d Renews calls for one batch, want 1", len(r.calls))
	}
	var got []string
	for _, w := range r.calls[0] {
		if w.Op != ticket.OpRenew {
			t.Fatalf("Renews was given a %s", w.Op)
		}
		got = append(got, w.Name)
	}
	var want []string
	for holder := range scripted {
		want = append(want, "r-"+holder)
	}
	slices.Sort(want)
	if slices.Sort(got); !slices.Equal(got, want) {
		t.Fatalf("Renews was given %v, want the good renew ops %v", got, want)
	}
}

// renewingBackend is a scriptBackend that is a Renewer: each renewal's
// outcome is the script's, the calls are recorded.
type renewingBackend struct {
	scriptBackend
	calls [][]Write
}

func (b *renewingBackend) Renews(ctx context.Context, ws []Write) []Outcome {
	b.mu.Lock()
	b.calls = append(b.calls, slices.Clone(ws))
	b.mu.Unlock()
	out := make([]Outcome, len(ws))
	for i, w := range ws {
		out[i].Written, out[i].Err = b.Write(ctx, w)
	}
	return out
}

func batchAsSingles(t *testing.T, b *scriptBackend, backend Backend) {
	if backend == nil {
		backend = b
	}
	h := NewHandler(Options{Backend: backend}).(*server)
	type op struct{ op, name, body string }
	var ops []op
	for holder := range scripted {
		ops = append(ops, op{"grant", "g-" + holder, fmt.Sprintf(`{"holder":%q,"lease_s":30}`, holder)})
		ops = append(ops, op{"renew", "r-" + holder, fmt.Sprintf(`{"holder":%q,"token":3,"lease_s":20}`, holder)})
		ops = append(ops, op{"release", "x-" + holder, fmt.Sprintf(`{"holder":%q,"token":4}`, holder)})
	}
	for _, holder := range []string{"lost", "notleader", "internal"} {
		ops = append(ops, op{"grant", "e-" + holder, fmt.Sprintf(`{"holder":%q,"lease_s":30}`, holder)})
	}
	// Bad ops the single endpoints refuse with the same message.
	bad := []op{
		{"grant", "b1", `{"holder":"ok","lease_s":0}`},
		{"grant", "b2", `{"holder":"","lease_s":30}`},
		{"renew", "b3", `{"holder":"ok","token":0,"lease_s":30}`},
		{"release", "b4", `{"holder":"ok","token":1.5}`},
		{"grant", "b5", `{"holder":"ok","lease_s":251}`},
	}
	ops = append(ops, bad...)
	var parts []string
	for _, o := range ops {
		parts = append(parts, fmt.Sprintf(`{"op":%q,"name":%q,%s`, o.op, o.name, strings.TrimPrefix(o.body, "{")))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/batch", strings.NewReader(`{"ops":[`+strings.Join(parts, ",")+`]}`)))
	if rec.Code != 200 {
		t.Fatalf("batch: %d %s", rec.Code, rec.Body)
	}
	var out batchOut
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Results) != len(ops) {
		t.Fatalf("batch answer %s: %v (want %d results)", rec.Body, err, len(ops))
	}
	batched := b.count()
	if want := len(ops) - len(bad); batched != want {
		t.Fatalf("the batch made %d writes, want %d (bad ops reach no Backend method)", batched, want)
	}
	for i, o := range ops {
		status, body := single(h, o.op, o.name, o.body)
		got := out.Results[i]
		var compact bytes.Buffer
		_ = json.Compact(&compact, got.Body)
		if got.Status != status || compact.String() != body {
			t.Errorf("op %d (%s %s %s): batch %d %s, single endpoint %d %s", i, o.op, o.name, o.body, got.Status, compact.String(), status, body)
		}
	}
	if b.count() != 2*batched {
		t.Fatalf("single endpoints made %d writes, want %d", b.count()-batched, batched)
	}
}

// Bad ops that only a batch can have: each is its own 400 naming the
// field, the good op beside them still runs, and nothing else is written.
func TestBatchBadOps(t *testing.T) {
	b := &scriptBackend{}
	h := NewHandler(Options{Backend: b})
	for _, c := range []struct{ op, field string }{
		{`{"op":"grant","name":"a","holder":"ok","lease_s":30,"wait_ms":10}`, "wait_ms"},
		{`{"op":"grant","name":"a","holder":"ok","lease_s":30,"wait_ms":0}`, "wait_ms"},
		{`{"op":"grant","name":"a","holder":"ok","lease_s":30,"token":3}`, "token"},
		{`{"op":"release","name":"a","holder":"ok","token":3,"lease_s":30}`, "lease_s"},
		{`{"op":"renew","name":"a","holder":"ok","lease_s":30}`, "token"},
		{`{"op":"grant","name":"a","lease_s":30}`, "holder"},
		{`{"op":"steal","name":"a","holder":"ok","lease_s":30}`, "op"},
		{`{"name":"a","holder":"ok","lease_s":30}`, "op"},
		{`{"op":"grant","holder":"ok","lease_s":30}`, "name"},
		{`{"op":"grant","name":"a/b","holder":"ok","lease_s":30}`, "name"},
		{`{"op":"grant","name":"a","holder":"ok","lease_s":30,"x":1}`, "x"},
		{`{"op":"grant","name":"a","holder":"ok","lease_s":30,"op":"grant"}`, "op"},
		{`{"op":1,"name":"a","holder":"ok","lease_s":30}`, "op"},
		{`["grant","a"]`, "object"},
		{`null`, "object"},
	} {
		rec := httptest.NewRecorder()
		body := `{"ops":[` + c.op + `,{"op":"grant","name":"good","holder":"ok","lease_s":30}]}`
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/batch", strings.NewReader(body)))
		var out batchOut
		if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != 200 || err != nil || len(out.Results) != 2 {
			t.Errorf("%s: %d %s", c.op, rec.Code, rec.Body)
			continue
		}
		var e struct{ Error, Message string }
		_ = json.Unmarshal(out.Results[0].Body, &e)
		if out.Results[0].Status != 400 || e.Error != "bad_request" || !strings.Contains(e.Message, c.field) {
			t.Errorf("%s: %d %s, want a 400 naming %s", c.op, out.Results[0].Status, out.Results[0].Body, c.field)
		}
		if out.Results[1].Status != 200 {
			t.Errorf("%s: the good op beside it: %d %s", c.op, out.Results[1].Status, out.Results[1].Body)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.writes {
		if w.Name != "good" {
			t.Fatalf("a bad op reached the backend: %+v", w)
		}
	}
}

// A malformed batch is a 400 (or 413) for the whole request and reaches
// no Backend method; exactly MaxBatchOps ops are accepted.
func TestBatchMalformed(t *testing.T) {
	b := &scriptBackend{}
	reg := prometheus.NewRegistry()
	h := NewHandler(Options{Backend: b, Metrics: NewMetrics(reg), Gatherer: reg})
	good := `{"op":"grant","name":"a","holder":"ok","lease_s":30}`
	many := func(n int) string { return `{"ops":[` + strings.TrimSuffix(strings.Repeat(good+",", n), ",") + `]}` }
	for _, c := range []struct {
		path, body string
		status     int
		says       string
	}{
		{"/v1/batch", ``, 400, "empty"},
		{"/v1/batch", `[]`, 400, "object"},
		{"/v1/batch", `{}`, 400, `"ops" is required`},
		{"/v1/batch", `{"ops":[]}`, 400, `"ops": empty`},
		{"/v1/batch", `{"ops":null}`, 400, `"ops"`},
		{"/v1/batch", `{"ops":{}}`, 400, `"ops"`},
		{"/v1/batch", `{"ops":[` + good + `],"ops":[` + good + `]}`, 400, "twice"},
		{"/v1/batch", `{"ops":[` + good + `],"x":1}`, 400, `"x"`},
		{"/v1/batch", `{"ops":[` + good + `]} {}`, 400, "after"},
		{"/v1/batch", `{"ops":[` + good + `,]}`, 400, "not JSON"},
		{"/v1/batch", `{"ops":[` + good, 400, "JSON"},
		{"/v1/batch", many(MaxBatchOps + 1), 400, fmt.Sprintf("more than %d ops", MaxBatchOps)},
		{"/v1/batch?x=1", many(1), 400, "query"},
		{"/v1/batch", `{"ops":["` + strings.Repeat("x", MaxBatchBody) + `"]}`, 413, "larger"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", c.path, strings.NewReader(c.body)))
		var e struct{ Error, Message string }
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != c.status || !strings.Contains(e.Message, c.says) {
			t.Errorf("%.60s: %d %.200s, want %d saying %q", c.body, rec.Code, rec.Body, c.status, c.says)
		}
	}
	if n := b.count(); n != 0 {
		t.Fatalf("malformed batches made %d writes", n)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/batch", nil))
	if rec.Code != 405 {
		t.Fatalf("GET /v1/batch: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/batch", strings.NewReader(many(MaxBatchOps))))
	var out batchOut
	if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != 200 || err != nil || len(out.Results) != MaxBatchOps || b.count() != MaxBatchOps {
		t.Fatalf("a batch of %d: %d, %d results, %d writes", MaxBatchOps, rec.Code, len(out.Results), b.count())
	}
	if v := gauge(t, reg, "ticket_batch_ops_total", ""); v != MaxBatchOps {
		t.Errorf("ticket_batch_ops_total = %v, want %d", v, MaxBatchOps)
	}
	if v := gauge(t, reg, "ticket_batch_requests_total", "ok"); v != 1 {
		t.Errorf("ticket_batch_requests_total{ok} = %v, want 1", v)
	}
	if v := gauge(t, reg, "ticket_batch_requests_total", "bad_request"); v != 13 {
		t.Errorf("ticket_batch_requests_total{bad_request} = %v, want 13", v)
	}
	if v := counter(t, reg, "grant", "ok"); v != MaxBatchOps {
		t.Errorf("ticket_ops_total{grant,ok} = %v, want %d (each op counted under its op)", v, MaxBatchOps)
	}
}

// The ops of one batch run concurrently (they share Raft batches): every
// op is inside Backend.Write before any of them returns.
func TestBatchOpsRunConcurrently(t *testing.T) {
	const n = 8
	b := &scriptBackend{gate: make(chan struct{}), entered: make(chan struct{}, n)}
	h := NewHandler(Options{Backend: b})
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`{"op":"grant","name":"c%d","holder":"ok","lease_s":30}`, i))
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/batch", strings.NewReader(`{"ops":[`+strings.Join(parts, ",")+`]}`)))
		done <- rec
	}()
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-b.entered:
		case <-timeout:
			close(b.gate)
			<-done
			t.Fatalf("only %d of %d ops entered Write while the first was held: the ops run one after another", i, n)
		}
	}
	close(b.gate)
	rec := <-done
	var out batchOut
	if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != 200 || err != nil || len(out.Results) != n {
		t.Fatalf("batch: %d %s", rec.Code, rec.Body)
	}
	for i, r := range out.Results {
		var g struct{ Name string }
		_ = json.Unmarshal(r.Body, &g)
		if r.Status != 200 || g.Name != fmt.Sprintf("c%d", i) {
			t.Fatalf("result %d is %d %s: out of order", i, r.Status, r.Body)
		}
	}
}

// gauge reads a counter family's value with the given result label
// ("" for an unlabelled counter).
func gauge(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			r := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					r = l.GetValue()
				}
			}
			if r == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// POST /v1/batch is a client endpoint: without the client (or admin)
// token it is a 401 and reaches no Backend method.
func TestBatchNeedsTheClientToken(t *testing.T) {
	client, admin := strings.Repeat("c", 32), strings.Repeat("a", 32)
	b := &scriptBackend{}
	h := NewHandler(Options{Backend: b, ClientToken: []byte(client), AdminToken: []byte(admin)})
	body := `{"ops":[{"op":"grant","name":"a","holder":"ok","lease_s":30}]}`
	for _, c := range []struct {
		tok  string
		want int
	}{{"", 401}, {"wrong", 401}, {client, 200}, {admin, 200}} {
		r := httptest.NewRequest("POST", "/v1/batch", strings.NewReader(body))
		if c.tok != "" {
			r.Header.Set("Authorization", "Bearer "+c.tok)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != c.want {
			t.Errorf("token %.1q…: %d, want %d", c.tok, rec.Code, c.want)
		}
	}
	if n := b.count(); n != 2 {
		t.Fatalf("%d writes, want 2 (only the authorised batches)", n)
	}
}
