package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tckclk/tckclk/node/api/connlimit"
	"github.com/tckclk/tckclk/node/ticket"
)

// Write is a proposal the API asks the Backend to make.
type Write struct {
	Op     ticket.Op // OpGrant, OpRenew, OpRelease or OpRevoke (admin)
	Name   string
	Holder string // not for OpRevoke
	Token  uint64 // OpRevoke: 0 revokes whoever holds it
	LeaseS uint8
	// WaitMs (Grant only, 0..=MaxWaitMs): wait this long for the ticket to
	// be free, first come first served (SPEC §4.2); 0 fails at once.
	WaitMs uint32
}

// MaxWaitMs is the largest wait_ms of a blocking grant (SPEC §4.2).
const MaxWaitMs = 300_000

// MaxWatchWait is the largest ?wait= of a watch (SPEC §4.2).
const MaxWatchWait = 5 * time.Minute

// Watcher is the optional blocking read of a Backend (SPEC §4.2): Watch
// answers when the ticket's modify index is above index or wait passes,
// with the state and its modify index.
type Watcher interface {
	Watch(ctx context.Context, name string, index uint64, wait time.Duration) (ticket.Ticket, bool, uint64, error)
}

// IndexHeader carries a ticket's modify index on GET answers (as Consul's
// X-Consul-Index): pass it back as ?index= to wait for the next change.
const IndexHeader = "X-Ticket-Index"

// Written is the committed outcome of a Write.
type Written struct {
	Result ticket.Result
	RecvMs uint64 // the leader's wall ms (rounded down) when it took the request
	// WaitedMs: a blocking grant's time queued on the leader before the
	// Grant that succeeded (monotonic, rounded down); 0 otherwise.
	WaitedMs uint64
}

// Backend is what the handler needs from the node, by role (as etcd
// splits its RaftKV and Lessor): the ticket operations, the probes and
// status, and the admin API. The optional behaviours below (Watcher,
// Replacer, HealthReporter, LeaderHinter, Backuper) add to a role.
type Backend interface {
	Tickets
	Health
	Admin
}

// Tickets is the ticket role: SPEC §4.1's operations (/v1/tickets...).
type Tickets interface {
	// Write proposes a Grant, Renew, Release or Revoke and waits for it to
	// apply.
	Write(ctx context.Context, w Write) (Written, error)
	// Get and List are linearizable reads (SPEC §4).
	Get(ctx context.Context, name string) (ticket.Ticket, bool, error)
	List(ctx context.Context, prefix string, limit int) ([]ticket.Ticket, bool, error)
}

// Health is the probes' and status role: /v1/status, /readyz, /livez.
type Health interface {
	Status(ctx context.Context) wire.Status
	// Readiness is /readyz: ok only when the node serves clients.
	Readiness() wire.Health
	// Liveness is /livez: not ok only when the process should be restarted
	// (it is wedged), never because it is merely not ready.
	Liveness() wire.Health
}

// Admin is the admin role: /v1/cluster/... (the admin token).
type Admin interface {
	Members(ctx context.Context) (wire.Members, error)
	TransferLeadership(ctx context.Context, to string) error
	RemoveMember(ctx context.Context, id string) error
	// Snapshot takes a Raft snapshot now (admin; backups, benchmarks).
	Snapshot(ctx context.Context) (wire.SnapshotInfo, error)
}

// Replacer is an optional Backend behaviour: POST /v1/cluster/replace
// (ticketctl cluster replace OLD --with NEW). A Backend without it
// answers 404.
type Replacer interface {
	ReplaceMember(ctx context.Context, old, new string) (wire.Replaced, error)
}

// HealthReporter is an optional Backend behaviour: GET /v1/cluster/health
// (SPEC §3.5; client token). A Backend without it answers 404.
type HealthReporter interface {
	ClusterHealth(ctx context.Context) (wire.ClusterHealth, error)
}

// Renewer is an optional Tickets behaviour: Renews proposes renewals
// (Writes of op OpRenew) together — on a leader as KeepAlive entries,
// many renewals an entry — and returns, in order, each one's outcome:
// what Write would have returned for it alone. POST /v1/batch gives it
// the renew ops of a request; a Backend without it gets them one Write
// each.
type Renewer interface {
	Renews(ctx context.Context, ws []Write) []Outcome
}

// Outcome is one Write's outcome in Renews: Err, or else Written.
type Outcome struct {
	Written Written
	Err     error
}

// LeaderHinter is an optional Backend behaviour: ForwardsTo is the
// leader's NodeId when ticket ops arriving now are forwarded to it, ""
// when this node serves them itself (or cannot forward). The answers to
// ticket ops and batches carry it in wire.LeaderHeader.
type LeaderHinter interface {
	ForwardsTo() string
}

// Backuper is an optional Backend behaviour: GET /v1/cluster/backup (admin;
// ticketctl snapshot save; SPEC §3.4). A Backend without it answers 404.
type Backuper interface {
	Backup(ctx context.Context) (*Backup, error)
}

// Backup is a backup to serve: its header and its state, which the handler
// closes.
type Backup struct {
	Header *wire.BackupHeader
	State  io.ReadCloser
}

// Options configure the handler.
type Options struct {
	Backend  Backend
	Metrics  *Metrics            // nil: no op metrics
	Gatherer prometheus.Gatherer // serves /metrics; nil: 404
	// ClientToken, when set, is required (Authorization: Bearer) on
	// /v1/tickets... and /v1/status. AdminToken guards /v1/cluster/...;
	// without one the admin API answers 403.
	ClientToken []byte
	AdminToken  []byte
	Logger      *slog.Logger
	// HealthOnly serves /livez, /readyz and /metrics alone (the health
	// listener, api.health_addr); everything else is a 404.
	HealthOnly bool
}

// List limits.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 10000
)

type server struct {
	health  bool // HealthOnly
	b       Backend
	m       *Metrics
	metrics http.Handler
	client  *[32]byte
	admin   *[32]byte
	log     *slog.Logger
}

// NewHandler returns the API handler.
func NewHandler(o Options) http.Handler {
	s := &server{b: o.Backend, m: o.Metrics, log: o.Logger, health: o.HealthOnly}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if o.Gatherer != nil {
		s.metrics = promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})
	}
	if len(o.ClientToken) > 0 {
		h := sha256.Sum256(o.ClientToken)
		s.client = &h
	}
	if len(o.AdminToken) > 0 {
		h := sha256.Sum256(o.AdminToken)
		s.admin = &h
	}
	return s
}

type route int

const (
	rNone route = iota
	rLivez
	rReadyz
	rMetrics
	rStatus
	rList
	rGet
	rGrant
	rRenew
	rRelease
	rMembers
	rTransfer
	rRemove
	rSnapshot
	rUI
	rReplace
	rBatch
	rHealth
	rRevoke
	rBackup
)

type endpoint struct {
	r      route
	method string
}

// fixed are the endpoints without a ticket name in the path.
var fixed = map[string]endpoint{
	"/livez":                          {rLivez, http.MethodGet},
	"/readyz":                         {rReadyz, http.MethodGet},
	"/metrics":                        {rMetrics, http.MethodGet},
	"/v1/status":                      {rStatus, http.MethodGet},
	"/v1/tickets":                     {rList, http.MethodGet},
	"/v1/tickets/":                    {rList, http.MethodGet},
	"/v1/cluster/members":             {rMembers, http.MethodGet},
	"/v1/cluster/transfer-leadership": {rTransfer, http.MethodPost},
	"/v1/cluster/remove":              {rRemove, http.MethodPost},
	"/v1/cluster/snapshot":            {rSnapshot, http.MethodPost},
	"/ui":                             {rUI, http.MethodGet},
	"/ui/":                            {rUI, http.MethodGet},
	"/v1/cluster/replace":             {rReplace, http.MethodPost},
	"/v1/batch":                       {rBatch, http.MethodPost},
	"/v1/cluster/health":              {rHealth, http.MethodGet},
	"/v1/cluster/backup":              {rBackup, http.MethodGet},
}

// match returns the route, its method and the ticket name in the path. It
// routes on the escaped path, so an encoded slash stays inside the name
// (a%2Fgrant is the name "a/grant", refused by the name grammar, never a
// grant on "a"); the name is unescaped afterwards.
func match(escaped string) (route, string, string) {
	if e, ok := fixed[escaped]; ok {
		return e.r, e.method, ""
	}
	rest, ok := strings.CutPrefix(escaped, "/v1/tickets/")
	if !ok {
		return rNone, "", ""
	}
	rawName, action, hasAction := strings.Cut(rest, "/")
	name, err := url.PathUnescape(rawName)
	if err != nil {
		name = rawName // not valid escaping: the name grammar refuses the '%'
	}
	if !hasAction {
		return rGet, http.MethodGet, name
	}
	switch action {
	case "grant":
		return rGrant, http.MethodPost, name
	case "renew":
		return rRenew, http.MethodPost, name
	case "release":
		return rRelease, http.MethodPost, name
	case "revoke":
		return rRevoke, http.MethodPost, name
	}
	return rNone, "", ""
}

var opNames = map[route]string{rGrant: "grant", rRenew: "renew", rRelease: "release", rRevoke: "revoke", rGet: "get", rList: "list"}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, method, name := match(r.URL.EscapedPath())
	if s.health && rt != rLivez && rt != rReadyz && rt != rMetrics {
		s.fail(w, &Error{Kind: KindNotFound, Code: "not_found", Message: fmt.Sprintf("no endpoint %s on the health listener (api.health_addr): /livez, /readyz and /metrics only", r.URL.Path)})
		return
	}
	if rt == rNone {
		s.fail(w, &Error{Kind: KindNotFound, Code: "not_found", Message: fmt.Sprintf("no endpoint %s (see SPEC §4.1)", r.URL.Path)})
		return
	}
	if name != "" {
		// The name first: a name with a byte outside the grammar (an
		// encoded slash included) is a 400 whatever the method.
		if err := ticket.ValidName(name); err != nil {
			s.fail(w, badRequest("ticket %v", err))
			return
		}
	}
	if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", method)
		s.fail(w, &Error{Kind: kindMethod, Code: "method_not_allowed", Message: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method)})
		return
	}
	op := opNames[rt]
	start := time.Now()
	result := s.serve(w, r, rt, name)
	if op != "" {
		s.m.Observe(op, result, time.Since(start))
	}
	if rt == rBatch {
		s.m.Batch(result)
	}
}

// serve handles a matched request and returns the metrics result label.
func (s *server) serve(w http.ResponseWriter, r *http.Request, rt route, name string) string {
	switch rt {
	case rLivez:
		h := s.b.Liveness()
		code := http.StatusOK
		if h.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, h)
		return ""
	case rReadyz:
		h := s.b.Readiness()
		code := http.StatusOK
		if h.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, h)
		return ""
	case rMetrics:
		if s.metrics == nil {
			return s.fail(w, &Error{Kind: KindNotFound, Code: "not_found", Message: "metrics are not enabled"})
		}
		s.metrics.ServeHTTP(w, r)
		return ""
	case rUI:
		// The page holds no data; what it shows it reads through the
		// API with the operator's token (docs/operations.md).
		serveUI(w, r)
		return ""
	}
	admin := rt == rMembers || rt == rTransfer || rt == rRemove || rt == rSnapshot || rt == rReplace || rt == rRevoke || rt == rBackup
	if err := s.authorize(r, admin); err != nil {
		if err.Kind == kindUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ticketd"`)
		}
		return s.fail(w, err)
	}
	// The connection may now idle as long as authenticated ones do, and
	// holds a slot unauthenticated ones cannot take (node/api/connlimit).
	connlimit.MarkAuthenticated(r.Context())
	if rt == rGet || rt == rGrant || rt == rRenew || rt == rRelease || rt == rRevoke {
		if err := ticket.ValidName(name); err != nil {
			return s.fail(w, badRequest("ticket %v", err))
		}
	}
	var body []byte
	if r.Method == http.MethodPost {
		var err *Error
		limit := int64(MaxBody)
		if rt == rBatch {
			limit = MaxBatchBody
		}
		if body, err = readBody(w, r, limit); err != nil {
			return s.fail(w, err)
		}
	} else if r.ContentLength > 0 {
		return s.fail(w, badRequest("%s %s takes no body", r.Method, r.URL.Path))
	}
	switch rt {
	case rGet, rList, rGrant, rRenew, rRelease, rRevoke, rBatch:
		if lh, ok := s.b.(LeaderHinter); ok {
			if id := lh.ForwardsTo(); id != "" {
				w.Header().Set(wire.LeaderHeader, id)
			}
		}
	}
	switch rt {
	case rStatus:
		if err := noQuery(r); err != nil {
			return s.fail(w, err)
		}
		writeJSON(w, http.StatusOK, s.b.Status(r.Context()))
		return "ok"
	case rGet:
		if r.URL.RawQuery != "" {
			return s.watch(w, r, name)
		}
		t, ok, err := s.b.Get(r.Context(), name)
		if err != nil {
			return s.fail(w, err)
		}
		if !ok {
			return s.fail(w, &Error{Kind: KindNotFound, Code: "not_found", Message: fmt.Sprintf("ticket %q is not held", name)})
		}
		writeJSON(w, http.StatusOK, TicketFrom(t))
		return "ok"
	case rList:
		return s.list(w, r)
	case rGrant, rRenew, rRelease, rRevoke:
		return s.write(w, r, rt, name, body)
	case rBatch:
		return s.batch(w, r, body)
	case rMembers:
		ms, err := s.b.Members(r.Context())
		if err != nil {
			return s.fail(w, err)
		}
		writeJSON(w, http.StatusOK, ms)
		return "ok"
	case rTransfer:
		var to string
		if len(strings.TrimSpace(string(body))) > 0 {
			if err := decodeStrict(body, fieldSpec{name: "to", kind: kString, str: &to}); err != nil {
				return s.fail(w, badRequest("%v", err))
			}
		}
		if err := s.b.TransferLeadership(r.Context(), to); err != nil {
			return s.fail(w, err)
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return "ok"
	case rSnapshot:
		if len(strings.TrimSpace(string(body))) > 0 {
			return s.fail(w, badRequest("snapshot takes no body"))
		}
		info, err := s.b.Snapshot(r.Context())
		if err != nil {
			return s.fail(w, err)
		}
		writeJSON(w, http.StatusOK, info)
		return "ok"
	case rRemove:
		var id string
		if err := decodeStrict(body, fieldSpec{name: "id", kind: kString, required: true, str: &id}); err != nil {
			return s.fail(w, badRequest("%v", err))
		}
		if err := s.b.RemoveMember(r.Context(), id); err != nil {
			return s.fail(w, err)
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return "ok"
	case rHealth:
		hr, ok := s.b.(HealthReporter)
		if !ok {
			break
		}
		if err := noQuery(r); err != nil {
			return s.fail(w, err)
		}
		h, err := hr.ClusterHealth(r.Context())
		if err != nil {
			return s.fail(w, err)
		}
		writeJSON(w, http.StatusOK, h)
		return "ok"
	case rBackup:
		bk, ok := s.b.(Backuper)
		if !ok {
			break
		}
		if err := noQuery(r); err != nil {
			return s.fail(w, err)
		}
		return s.backup(w, r, bk)
	case rReplace:
		rp, ok := s.b.(Replacer)
		if !ok {
			break
		}
		var old, repl string
		if err := decodeStrict(body, fieldSpec{name: "old", kind: kString, required: true, str: &old},
			fieldSpec{name: "new", kind: kString, required: true, str: &repl}); err != nil {
			return s.fail(w, badRequest("%v", err))
		}
		res, err := rp.ReplaceMember(r.Context(), old, repl)
		if err != nil {
			return s.fail(w, err)
		}
		writeJSON(w, http.StatusOK, res)
		return "ok"
	}
	return s.fail(w, &Error{Kind: KindNotFound, Code: "not_found", Message: "no such endpoint"})
}

func (s *server) list(w http.ResponseWriter, r *http.Request) string {
	q := r.URL.Query()
	limit := DefaultListLimit
	for k, v := range q {
		if len(v) != 1 {
			return s.fail(w, badRequest("query parameter %q is given %d times", k, len(v)))
		}
		switch k {
		case "prefix":
			if err := validPrefix(v[0]); err != nil {
				return s.fail(w, badRequest("prefix: %v", err))
			}
		case "limit":
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 || n > MaxListLimit {
				return s.fail(w, badRequest("limit %q is not an integer in 1..=%d", v[0], MaxListLimit))
			}
			limit = n
		default:
			return s.fail(w, badRequest("unknown query parameter %q; list takes prefix and limit", k))
		}
	}
	ts, truncated, err := s.b.List(r.Context(), q.Get("prefix"), limit)
	if err != nil {
		return s.fail(w, err)
	}
	out := wire.TicketList{Tickets: make([]wire.Ticket, len(ts)), Truncated: truncated}
	for i, t := range ts {
		out.Tickets[i] = TicketFrom(t)
	}
	writeJSON(w, http.StatusOK, out)
	return "ok"
}

func validPrefix(p string) error {
	if len(p) > ticket.MaxNameLen {
		return fmt.Errorf("%d bytes is longer than a name can be", len(p))
	}
	if p == "" {
		return nil
	}
	return ticket.ValidName(p)
}

func (s *server) write(w http.ResponseWriter, r *http.Request, rt route, name string, body []byte) string {
	if err := noQuery(r); err != nil {
		return s.fail(w, err)
	}
	wr, err := decodeWrite(rt, name, body)
	if err != nil {
		return s.fail(w, err)
	}
	ctx := r.Context()
	if wr.WaitMs > 0 {
		// The server's read and write timeouts would cut the wait short
		// (an expired read deadline cancels the request's context).
		longer(w, time.Duration(wr.WaitMs)*time.Millisecond)
		ctx = withCaller(ctx, r)
	}
	a := s.apply(ctx, wr)
	writeJSON(w, a.status, a.body)
	return a.label
}

// writeTakes are the fields of a single grant, renew and release body
// (as bits of opFields.seen): every one but wait_ms is required.
var writeTakes = map[route]struct {
	op    ticket.Op
	takes uint8
}{
	rGrant:   {ticket.OpGrant, fHolder | fLease | fWait},
	rRenew:   {ticket.OpRenew, fHolder | fToken | fLease},
	rRelease: {ticket.OpRelease, fHolder | fToken},
}

// decodeWrite reads the body of a grant, renew, release or revoke on name:
// a body in the Go client's shape through the scanner (scanWrite, the
// batch ops' reading), any other — every refusal included — through
// decodeWriteReference, which reads what the scanner accepts into the
// same Write (FuzzWriteDecoders).
func decodeWrite(rt route, name string, body []byte) (Write, *Error) {
	if wt, ok := writeTakes[rt]; ok {
		if f, ok := scanWrite(body, wt.takes); ok && f.waitMs <= MaxWaitMs {
			f.wr.Op, f.wr.Name, f.wr.WaitMs = wt.op, name, uint32(f.waitMs)
			return checkWrite(f.wr, f.lease)
		}
	}
	return decodeWriteReference(rt, name, body)
}

// DecodeWrite and DecodeWriteReference read a single grant, renew or
// release body (op) on name as the endpoint does, and as encoding/json
// alone does; for the differential fuzz target.
func DecodeWrite(op, name string, body []byte) (Write, error) {
	return asError(decodeWrite(routeOf(op), name, body))
}

// DecodeWriteReference: see DecodeWrite.
func DecodeWriteReference(op, name string, body []byte) (Write, error) {
	return asError(decodeWriteReference(routeOf(op), name, body))
}

func routeOf(op string) route {
	return map[string]route{"grant": rGrant, "renew": rRenew, "release": rRelease}[op]
}

func asError(w Write, e *Error) (Write, error) {
	if e != nil {
		return w, e
	}
	return w, nil
}

// decodeWriteReference reads a write body with encoding/json (the strict
// decoder): the reading every refusal's text comes from.
func decodeWriteReference(rt route, name string, body []byte) (Write, *Error) {
	if rt == rRevoke {
		// No body, or {"token": N}: revoke only while N is the token.
		wr := Write{Op: ticket.OpRevoke, Name: name}
		if len(strings.TrimSpace(string(body))) > 0 {
			if err := decodeStrict(body, fieldSpec{name: "token", kind: kUint, u64: &wr.Token}); err != nil {
				return Write{}, badRequest("%v", err)
			}
		}
		return wr, nil
	}
	wr := Write{Name: name}
	var lease int64
	holder := fieldSpec{name: "holder", kind: kString, required: true, str: &wr.Holder}
	leaseF := fieldSpec{name: "lease_s", kind: kInt, required: true, i64: &lease}
	var waitMs uint64
	waitF := fieldSpec{name: "wait_ms", kind: kUint, u64: &waitMs}
	token := fieldSpec{name: "token", kind: kUint, required: true, u64: &wr.Token}
	var err error
	switch rt {
	case rGrant:
		wr.Op = ticket.OpGrant
		err = decodeStrict(body, holder, leaseF, waitF)
		if err == nil && waitMs > MaxWaitMs {
			err = fmt.Errorf("field \"wait_ms\": %d is outside 0..=%d", waitMs, MaxWaitMs)
		}
		wr.WaitMs = uint32(min(waitMs, MaxWaitMs))
	case rRenew:
		wr.Op = ticket.OpRenew
		err = decodeStrict(body, holder, token, leaseF)
	case rRelease:
		wr.Op = ticket.OpRelease
		err = decodeStrict(body, holder, token)
	}
	if err != nil {
		return Write{}, badRequest("%v", err)
	}
	return checkWrite(wr, lease)
}

// checkWrite validates a decoded write (holder, token, lease) the same way
// for a single request and a batch op.
func checkWrite(wr Write, lease int64) (Write, *Error) {
	if err := ticket.ValidHolder(wr.Holder); err != nil {
		return Write{}, badRequest("%v", err)
	}
	if wr.Op != ticket.OpGrant && wr.Token == 0 {
		return Write{}, badRequest("token must be at least 1")
	}
	if wr.Op != ticket.OpRelease {
		if err := ticket.ValidLease(lease); err != nil {
			return Write{}, badRequest("%v", err)
		}
		wr.LeaseS = uint8(lease)
	}
	return wr, nil
}

// answer is one response: its status, its JSON body and the metrics
// result label.
type answer struct {
	status int
	body   any
	label  string
}

// apply makes a validated write through the Backend and maps the outcome
// to its answer: one mapping for single requests and batch ops.
func (s *server) apply(ctx context.Context, wr Write) answer {
	out, werr := s.b.Write(ctx, wr)
	return s.writtenAnswer(wr, out, werr)
}

// writtenAnswer is the answer to wr whose Write returned out and werr.
func (s *server) writtenAnswer(wr Write, out Written, werr error) answer {
	if werr != nil {
		return s.errAnswer(werr)
	}
	res := out.Result
	t := res.Ticket
	name := wr.Name
	if wr.Op == ticket.OpRevoke && res.Code != ticket.CodeFatal {
		return revokeAnswer(wr, res)
	}
	switch res.Code {
	case ticket.CodeOK, ticket.CodeExisting:
		if wr.Op == ticket.OpRelease {
			return answer{http.StatusOK, wire.Released{Name: t.Name, Holder: t.Holder, Token: t.Token, Released: true}, "ok"}
		}
		var remaining uint64
		if t.ValidBeforeMs > out.RecvMs {
			remaining = t.ValidBeforeMs - out.RecvMs
		}
		return answer{http.StatusOK, wire.Grant{Name: t.Name, Holder: t.Holder, Token: t.Token, LeaseS: t.LeaseS,
			ConservativeValidBeforeUnixMs: t.ValidBeforeMs, RemainingMs: remaining, WaitedMs: out.WaitedMs}, res.Code.String()}
	case ticket.CodeHeld:
		return answer{http.StatusConflict, wire.ErrorBody{Error: "held", Holder: t.Holder, Token: t.Token,
			Message: fmt.Sprintf("ticket %q is held by %q (token %d)", name, t.Holder, t.Token)}, "held"}
	case ticket.CodeNotHeld:
		return conflict(res.Code, "ticket %q is not held", name)
	case ticket.CodeWrongHolder:
		return conflict(res.Code, "ticket %q is not held by %q", name, wr.Holder)
	case ticket.CodeWrongToken:
		return conflict(res.Code, "ticket %q is held by %q under another token than %d", name, wr.Holder, wr.Token)
	case ticket.CodeLeaseOver:
		return conflict(res.Code, "ticket %q: the lease of token %d has run out; grant it again", name, wr.Token)
	case ticket.CodeRevoked:
		return conflict(res.Code, "ticket %q was revoked by an administrator: %q can no longer renew it (or grant it again) and must stop using token %d; it frees at its server-side expiry (%d) or when released",
			name, wr.Holder, t.Token, t.ExpiryMs)
	case ticket.CodeTokenSpace:
		return s.errAnswer(Unavailable("", "token_space", "no Grant: this cluster's token epoch is full (Raft index above %d); back it up and restore it into a new epoch (docs/operations.md, Backup and restore)", ticket.MaxTokenIndex))
	case ticket.CodeFatal:
		return s.errAnswer(Unavailable("failed", "state", "the node stopped: %v", res.Err))
	}
	// NoDelta, BadExpiry: the node proposed against a Δ it no longer has.
	return s.errAnswer(Unavailable("", res.Code.String(), "refused by the state machine (%v); retry", res.Code))
}

// revokeAnswer maps a Revoke's outcome (SPEC §4): 200 with the ticket as
// GET shows it (revoked, its expiry unchanged) — also when it was revoked
// already; 404 when nobody holds it; 409 when another token holds it.
func revokeAnswer(wr Write, res ticket.Result) answer {
	switch res.Code {
	case ticket.CodeOK, ticket.CodeExisting:
		return answer{http.StatusOK, TicketFrom(res.Ticket), res.Code.String()}
	case ticket.CodeNotHeld:
		return answer{http.StatusNotFound, wire.ErrorBody{Error: "not_found", Message: fmt.Sprintf("ticket %q is not held: nothing to revoke", wr.Name)}, "not_found"}
	case ticket.CodeWrongToken:
		return conflict(res.Code, "ticket %q is held under another token than %d: not revoked", wr.Name, wr.Token)
	}
	return answer{http.StatusServiceUnavailable, wire.ErrorBody{Error: "unavailable", Reason: res.Code.String(), Message: fmt.Sprintf("revoke refused by the state machine (%v)", res.Code)}, "unavailable"}
}

// longer lifts the connection's read deadline and moves its write
// deadline past a wait of d, so the wait, not the server's timeouts, ends
// the request; the client going away still ends it at once.
func longer(w http.ResponseWriter, d time.Duration) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(d + 30*time.Second)) // socket plumbing
}

// backup streams a backup (GET /v1/cluster/backup). Once the answer has
// started, a failure can only cut it short: the client sees fewer bytes
// than Content-Length, and every reader refuses a truncated backup.
func (s *server) backup(w http.ResponseWriter, r *http.Request, bk Backuper) string {
	b, err := bk.Backup(r.Context())
	if err != nil {
		return s.fail(w, err)
	}
	defer b.State.Close()
	size := b.Header.Size()
	// A large state takes longer than the server's write timeout: allow
	// for 1 MB/s plus the usual margin.
	longer(w, time.Duration(size/(1<<20))*time.Second)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatUint(size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := wire.WriteBackup(w, b.Header, b.State); err != nil {
		s.log.Warn("backup cut short", "err", err)
		return "error"
	}
	return "ok"
}

// watch is GET /v1/tickets/{name}?wait=DURATION&index=N (SPEC §4.2).
func (s *server) watch(w http.ResponseWriter, r *http.Request, name string) string {
	wb, ok := s.b.(Watcher)
	if !ok {
		return s.fail(w, badRequest("this server does not support blocking reads"))
	}
	var (
		index uint64
		wait  time.Duration
	)
	for k, v := range r.URL.Query() {
		if len(v) != 1 {
			return s.fail(w, badRequest("query parameter %q is given %d times", k, len(v)))
		}
		switch k {
		case "index":
			n, err := strconv.ParseUint(v[0], 10, 64)
			if err != nil {
				return s.fail(w, badRequest("index %q is not a non-negative integer", v[0]))
			}
			index = n
		case "wait":
			d, err := parseWait(v[0])
			if err != nil {
				return s.fail(w, badRequest("wait %q: %v", v[0], err))
			}
			wait = d
		default:
			return s.fail(w, badRequest("unknown query parameter %q; a ticket read takes wait and index", k))
		}
	}
	ctx := r.Context()
	if wait > 0 {
		longer(w, wait)
		ctx = withCaller(ctx, r)
	}
	t, held, idx, err := wb.Watch(ctx, name, index, wait)
	if err != nil {
		return s.fail(w, err)
	}
	w.Header().Set(IndexHeader, strconv.FormatUint(idx, 10))
	if !held {
		return s.fail(w, &Error{Kind: KindNotFound, Code: "not_found", Message: fmt.Sprintf("ticket %q is not held", name)})
	}
	wt := TicketFrom(t)
	wt.ModifyIndex = idx
	writeJSON(w, http.StatusOK, wt)
	return "ok"
}

type callerKey struct{}

// withCaller marks ctx with r's caller (CallerOf).
func withCaller(ctx context.Context, r *http.Request) context.Context {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, callerKey{}, connlimit.SourceOf(net.TCPAddrFromAddrPort(ap)))
}

// CallerOf is the caller a blocking grant or watch is counted under on
// the node it called (api.max_waiters_per_caller): the client's address
// as node/api/connlimit counts sources (IPv4, IPv6 /64); "" when ctx
// carries none.
func CallerOf(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(string)
	return c
}

// parseWait reads a Go duration ("30s", "5m") or plain milliseconds,
// 0..=MaxWatchWait.
func parseWait(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, merr := strconv.ParseUint(v, 10, 32)
		if merr != nil {
			return 0, fmt.Errorf("not a duration (30s, 5m) nor milliseconds")
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d < 0 || d > MaxWatchWait {
		return 0, fmt.Errorf("outside 0..=%v", MaxWatchWait)
	}
	return d, nil
}

func conflict(c ticket.Code, format string, args ...any) answer {
	return answer{http.StatusConflict, wire.ErrorBody{Error: c.String(), Message: fmt.Sprintf(format, args...)}, c.String()}
}

// authorize checks the bearer token in constant time (hashes of equal
// length, so the comparison reveals neither content nor length).
func (s *server) authorize(r *http.Request, admin bool) *Error {
	want := s.client
	if admin {
		if s.admin == nil {
			return &Error{Kind: kindForbidden, Code: "forbidden", Message: "the admin API is disabled; set api.admin_token_file"}
		}
		want = s.admin
	}
	if want == nil {
		return nil
	}
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	got := sha256.Sum256([]byte(tok))
	match := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	if !admin && s.admin != nil {
		// The admin token also opens the client endpoints (SECURITY.md).
		match = subtle.ConstantTimeCompare(got[:], s.admin[:]) == 1 || match
	}
	if !match || !ok {
		which := "client"
		if admin {
			which = "admin"
		}
		return &Error{Kind: kindUnauthorized, Code: "unauthorized", Message: "missing or wrong " + which + " bearer token"}
	}
	return nil
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Error) {
	tooLarge := &Error{Kind: kindTooLarge, Code: "too_large", Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	if r.ContentLength >= 0 {
		// The length is known (and within limit): read exactly it, without
		// a growing buffer or a MaxBytesReader; net/http ends the body
		// there.
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, badRequest("reading the body: %v", err)
		}
		return b, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge
		}
		return nil, badRequest("reading the body: %v", err)
	}
	return b, nil
}

func noQuery(r *http.Request) *Error {
	if r.URL.RawQuery != "" {
		return badRequest("%s takes no query parameters", r.URL.Path)
	}
	return nil
}

func badRequest(format string, args ...any) *Error {
	return &Error{Kind: KindBadRequest, Code: "bad_request", Message: fmt.Sprintf(format, args...)}
}

// fail writes an error answer and returns its metrics label.
func (s *server) fail(w http.ResponseWriter, err error) string {
	a := s.errAnswer(err)
	writeJSON(w, a.status, a.body)
	return a.label
}

// errAnswer is the answer to a refusal: its status, the error body and
// the metrics label.
func (s *server) errAnswer(err error) answer {
	var e *Error
	if !errors.As(err, &e) {
		s.log.Error("api: internal error", "err", err)
		e = &Error{Code: "internal", Message: err.Error()}
	}
	status := e.status()
	body := wire.ErrorBody{Error: e.Code, Message: e.Message, Stage: e.Stage, Reason: e.Reason}
	switch status {
	case http.StatusServiceUnavailable:
		return answer{status, body, "unavailable"}
	case http.StatusInternalServerError:
		return answer{status, body, "error"}
	}
	return answer{status, body, e.Code}
}

var (
	jsonType = []string{"application/json"}
	noStore  = []string{"no-store"}
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"encoding the answer failed"}`)
	}
	h := w.Header()
	h["Content-Type"] = jsonType
	h["Cache-Control"] = noStore
	h["Content-Length"] = []string{strconv.Itoa(len(b) + 1)}
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
