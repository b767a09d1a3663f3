// Package client is the Go client of the ticketd HTTP API (SPEC §4.1).
//
// Grant and Renew return the server's answer plus a local monotonic
// Deadline: the client's own send time + the lease × (1 − 500 ppm), the
// margin covering this host's clock-rate error over a 250 s lease. That
// deadline, not any server time, is what code should trust: stop using the
// ticket's fencing token before it passes.
//
// A client takes several addresses ("http://a:7980,http://b:7980") and
// follows the cluster: it moves to the next address when one cannot
// serve, repeats only what is safe to repeat, and counts deadlines from
// an op's first send (failover.go has the rules).
//
// Hazard: Deadline carries Go's monotonic clock reading; compare it only
// with time.Now() (time.Until, Before). Serialising it strips the monotonic
// reading and leaves a wall time, which is not safe to trust.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// ClockErrorPPM is the rate error the local deadline allows for (SPEC §4).
const ClockErrorPPM = 500

// DefaultAddr is ticketd's default API address.
const DefaultAddr = "http://127.0.0.1:7980"

// dialTimeout bounds a connection attempt of the default HTTP client, so
// that an address whose host is gone (no answer at all, not even a
// refusal) costs little before the next is tried.
const dialTimeout = 3 * time.Second

// defaultTransport is http.DefaultTransport with dialTimeout, shared by
// every client made without WithHTTPClient (one pool of connections, as
// with http.DefaultTransport).
var defaultTransport = func() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	return tr
}()

// Client talks to one ticketd, or to the nodes of a cluster.
type Client struct {
	addrs []string // "scheme://host:port", in the order given
	pref  atomic.Int64
	// via[i]: the leader address i last said it forwards ticket ops to
	// (wire.LeaderHeader), nil when it served them itself; read by
	// answeredBy to find the leader's address.
	via      []atomic.Pointer[string]
	failover time.Duration
	hc       *http.Client
	token    string
	admin    string
	now      func() time.Time
	co       *coalescer // WithCoalescing; nil: one request per call

	coInFlight int
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient uses hc (e.g. with a TLS configuration). Give its
// transport a dial timeout when the client has several addresses: an
// unreachable host then costs that timeout before the next is tried.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken sends the client bearer token (api.token_file on the server).
func WithToken(tok string) Option { return func(c *Client) { c.token = tok } }

// WithAdminToken sends the admin bearer token on /v1/cluster/... calls.
func WithAdminToken(tok string) Option { return func(c *Client) { c.admin = tok } }

// WithClock replaces time.Now for send times and for how long a coalescing
// client sends calls alone after a server without POST /v1/batch (tests).
// The returned times should carry a monotonic reading, as time.Now's do.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// New returns a client for addr: one address ("http://host:port",
// "https://host:port" or "host:port", which means http) or several
// separated by commas ("http://a:7980,http://b:7980"), the nodes of one
// cluster; "" is DefaultAddr.
func New(addr string, opts ...Option) (*Client, error) {
	addrs, err := ParseAddrs(addr)
	if err != nil {
		return nil, err
	}
	c := &Client{addrs: addrs, via: make([]atomic.Pointer[string], len(addrs)), failover: DefaultFailover, hc: &http.Client{Transport: defaultTransport, Timeout: 30 * time.Second}, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	if c.coInFlight > 0 {
		c.co = &coalescer{c: c, max: c.coInFlight}
	}
	return c, nil
}

// ParseAddrs checks a list of addresses as New takes it and returns each
// as "scheme://host:port".
func ParseAddrs(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		list = DefaultAddr
	}
	var out []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("client: address list %q has an empty entry", list)
		}
		if !strings.Contains(a, "://") {
			a = "http://" + a
		}
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("client: address %q is not http(s)://HOST:PORT", a)
		}
		base := u.Scheme + "://" + u.Host
		if slices.Contains(out, base) {
			return nil, fmt.Errorf("client: address %s is listed twice", base)
		}
		out = append(out, base)
	}
	return out, nil
}

// Addrs returns the client's addresses, in the order given.
func (c *Client) Addrs() []string { return slices.Clone(c.addrs) }

// Error is an error answer from the server.
type Error struct {
	StatusCode int
	wire.ErrorBody
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("ticketd: %d %s: %s", e.StatusCode, e.ErrorBody.Error, e.Message)
	if e.Reason != "" && !strings.Contains(e.Message, e.Reason) {
		msg += " (reason: " + e.Reason + ")"
	}
	return msg
}

// Is matches on the error code: errors.Is(err, client.ErrHeld).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.ErrorBody.Error == e.ErrorBody.Error && (t.StatusCode == 0 || t.StatusCode == e.StatusCode)
}

// Sentinels for errors.Is.
var (
	ErrHeld        = &Error{ErrorBody: wire.ErrorBody{Error: "held"}}
	ErrNotFound    = &Error{ErrorBody: wire.ErrorBody{Error: "not_found"}}
	ErrNotHeld     = &Error{ErrorBody: wire.ErrorBody{Error: "not_held"}}
	ErrWrongHolder = &Error{ErrorBody: wire.ErrorBody{Error: "wrong_holder"}}
	ErrWrongToken  = &Error{ErrorBody: wire.ErrorBody{Error: "wrong_token"}}
	ErrLeaseOver   = &Error{ErrorBody: wire.ErrorBody{Error: "lease_over"}}
	// ErrRevoked: an administrator revoked the ticket (SPEC §4); its holder
	// can no longer renew it and must stop using the token.
	ErrRevoked     = &Error{ErrorBody: wire.ErrorBody{Error: "revoked"}}
	ErrUnavailable = &Error{ErrorBody: wire.ErrorBody{Error: "unavailable"}}
	ErrBadRequest  = &Error{ErrorBody: wire.ErrorBody{Error: "bad_request"}}
	ErrNotLeader   = &Error{ErrorBody: wire.ErrorBody{Error: "not_leader"}}
	// ErrTooManyWaiters and ErrTooManyWatchers: the node's cap on blocking
	// grants or reads is reached (429); retry later.
	ErrTooManyWaiters  = &Error{ErrorBody: wire.ErrorBody{Error: "too_many_waiters"}}
	ErrTooManyWatchers = &Error{ErrorBody: wire.ErrorBody{Error: "too_many_watchers"}}
)

// Lease is a granted or renewed ticket as this client holds it.
type Lease struct {
	wire.Grant
	// SentAt is when this client sent the request (monotonic); for a
	// blocking grant, that plus the time it waited on the leader
	// (WaitedMs × (1 − 500 ppm)): the earliest instant the grant can have
	// been made.
	SentAt time.Time
	// Deadline is SentAt + the remaining lease × (1 − 500 ppm): trust the
	// ticket only before it (time.Now().Before(l.Deadline)).
	Deadline time.Time
}

// LocalDeadline is sent + remainingMs × (1 − ClockErrorPPM/10^6), rounded
// towards sent.
func LocalDeadline(sent time.Time, remainingMs uint64) time.Time {
	d := time.Duration(remainingMs) * time.Millisecond
	margin := (d*ClockErrorPPM + 999_999) / 1_000_000
	return sent.Add(d - margin)
}

// Grant asks for the ticket name for leaseS seconds (1..=250). Sent
// again after a lost answer (SPEC §4.1), a repeat by the same holder
// returns the current grant without extending it; the deadline counts from
// the first send.
func (c *Client) Grant(ctx context.Context, name, holder string, leaseS int) (*Lease, error) {
	if c.co != nil {
		l := int64(leaseS)
		return c.coLease(ctx, wire.BatchOp{Op: "grant", Name: name, Holder: holder, LeaseS: &l})
	}
	return c.lease(ctx, c.hc, name, "grant", wire.GrantRequest{Holder: holder, LeaseS: int64(leaseS)}, nil)
}

// TryGrant is Grant: it answers at once, ErrHeld when another holder has
// the ticket.
func (c *Client) TryGrant(ctx context.Context, name, holder string, leaseS int) (*Lease, error) {
	return c.Grant(ctx, name, holder, leaseS)
}

// MaxWait is the longest wait of GrantWait (the server's wait_ms bound).
const MaxWait = 300 * time.Second

// GrantWait is a blocking grant (SPEC §4.2): the leader queues it first
// come, first served until the ticket is free or wait (≤ MaxWait, rounded
// down to ms) passes, then ErrHeld. A leader change ends the wait on the
// server with a 503; the client then asks again (the next address, for
// what is left of wait). Ending ctx ends the wait on the server too, and
// a waiter that went away is never granted the ticket.
func (c *Client) GrantWait(ctx context.Context, name, holder string, leaseS int, wait time.Duration) (*Lease, error) {
	if wait < 0 || wait > MaxWait {
		return nil, fmt.Errorf("client: wait %v is outside 0..=%v", wait, MaxWait)
	}
	ms := wait.Milliseconds()
	if ms == 0 {
		return c.Grant(ctx, name, holder, leaseS)
	}
	ctx, cancel := context.WithTimeout(ctx, wait+30*time.Second) // the server answers by wait
	defer cancel()
	redo := func(elapsed time.Duration) (string, []byte) {
		left := max(ms-elapsed.Milliseconds(), 0)
		return ticketPath(name, "grant"), mustJSON(wire.GrantRequest{Holder: holder, LeaseS: int64(leaseS), WaitMs: left})
	}
	return c.lease(ctx, c.long(), name, "grant", wire.GrantRequest{Holder: holder, LeaseS: int64(leaseS), WaitMs: ms}, redo)
}

// Renew extends the holder's lease; the token stays. Sent again after a
// lost answer, a repeat renews from a later instant on the leader, while
// the deadline still counts from the first send.
func (c *Client) Renew(ctx context.Context, name, holder string, token uint64, leaseS int) (*Lease, error) {
	if c.co != nil {
		l := int64(leaseS)
		return c.coLease(ctx, wire.BatchOp{Op: "renew", Name: name, Holder: holder, Token: &token, LeaseS: &l})
	}
	return c.lease(ctx, c.hc, name, "renew", wire.RenewRequest{Holder: holder, Token: token, LeaseS: int64(leaseS)}, nil)
}

// long is the HTTP client without its overall timeout (ctx bounds the
// requests that use it).
func (c *Client) long() *http.Client {
	hc := *c.hc
	hc.Timeout = 0
	return &hc
}

// lease sends a grant or renew (repeatable) through hc; the deadline
// counts from now, before the first send.
func (c *Client) lease(ctx context.Context, hc *http.Client, name, action string, body any, redo func(time.Duration) (string, []byte)) (*Lease, error) {
	sent := c.now()
	r := c.send(ctx, &call{method: http.MethodPost, path: ticketPath(name, action), body: mustJSON(body), hc: hc, repeatable: true, redo: redo, skip: -1})
	if r.err != nil {
		return nil, repeatRefused(action, r)
	}
	return decodeLease(sent, action, r.raw)
}

// repeatRefused is a grant's or renew's error: a refusal (409) of a repeat
// sent after a lost answer does not say what the lost send did — it may
// have granted or renewed before the ticket was revoked, released, run
// out or granted to another (the repeat of a grant revoked in between is
// a 409 revoked) — so it is that 409 with the outcome unknown, as for
// Release.
func repeatRefused(action string, r reply) error {
	var e *Error
	if r.uncertain && errors.As(r.err, &e) && e.StatusCode == http.StatusConflict && !errors.Is(r.err, ErrOutcomeUnknown) {
		return fmt.Errorf("%w: a repeat of the %s after a lost answer was refused: %w", ErrOutcomeUnknown, action, r.err)
	}
	return r.err
}

// decodeLease reads a grant or renew answer sent at sent.
func decodeLease(sent time.Time, action string, raw []byte) (*Lease, error) {
	// remaining_ms may be absent (another server): then the SPEC's lease.
	var g struct {
		wire.Grant
		RemainingMs *uint64 `json:"remaining_ms"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("client: %s answer: %w", action, err)
	}
	remaining := uint64(g.LeaseS) * 1000
	if g.RemainingMs != nil {
		remaining = min(remaining, *g.RemainingMs)
		g.Grant.RemainingMs = *g.RemainingMs
	}
	// A blocking grant was made at least WaitedMs (by the leader's clock,
	// which may run fast by the same rate error) after this client sent it.
	start := LocalDeadline(sent, g.WaitedMs)
	return &Lease{Grant: g.Grant, SentAt: start, Deadline: LocalDeadline(start, remaining)}, nil
}

// Release frees the ticket. It is sent again after a lost answer (SPEC
// §4.1). A repeat that finds the ticket free (409 not_held: the first send
// released it, or the lease had run out) is the success the caller asked
// for and returns Released true. A repeat that finds it held under another
// token or holder (wrong_token, wrong_holder: released by the first send
// and granted again since, or this token was void before) returns that
// 409 wrapped with ErrOutcomeUnknown: this token holds nothing, but
// whether this release freed it is not known.
func (c *Client) Release(ctx context.Context, name, holder string, token uint64) (*wire.Released, error) {
	var r reply
	if c.co != nil {
		r = c.co.do(ctx, wire.BatchOp{Op: "release", Name: name, Holder: holder, Token: &token})
	} else {
		r = c.send(ctx, &call{method: http.MethodPost, path: ticketPath(name, "release"), body: mustJSON(wire.ReleaseRequest{Holder: holder, Token: token}),
			hc: c.hc, repeatable: true, skip: -1})
	}
	if r.err != nil {
		switch {
		case r.uncertain && errors.Is(r.err, ErrNotHeld):
			return &wire.Released{Name: name, Holder: holder, Token: token, Released: true}, nil
		case r.uncertain && (errors.Is(r.err, ErrWrongToken) || errors.Is(r.err, ErrWrongHolder)):
			return nil, fmt.Errorf("%w: a repeat of the release found %q held under another grant: %w", ErrOutcomeUnknown, name, r.err)
		}
		return nil, r.err
	}
	out := new(wire.Released)
	if err := json.Unmarshal(r.raw, out); err != nil {
		return nil, fmt.Errorf("client: release answer: %w", err)
	}
	return out, nil
}

// Revoke revokes the ticket name (admin token; SPEC §4): its holder can no
// longer renew it, and it frees at its current server-side expiry, never
// earlier. token ≠ 0 revokes only that grant (409 ErrWrongToken for
// another); 0 revokes whoever holds it. It answers the ticket as Get shows
// it, Revoked set; ErrNotFound when nobody holds it. A revoke of a revoked
// ticket answers it again, so a Revoke with a token is sent again when
// its answer is lost; one without a token is not (the ticket may have
// been granted again in between): ErrOutcomeUnknown.
func (c *Client) Revoke(ctx context.Context, name string, token uint64) (*wire.Ticket, error) {
	var body []byte
	if token != 0 {
		body = mustJSON(wire.RevokeRequest{Token: token})
	}
	path := ticketPath(name, "revoke")
	return decode[wire.Ticket](http.MethodPost, path, c.send(ctx, &call{method: http.MethodPost, path: path, body: body, admin: true, hc: c.hc, repeatable: token != 0, skip: -1}))
}

// Get reads one ticket (linearizable); ErrNotFound when nobody holds it.
func (c *Client) Get(ctx context.Context, name string) (*wire.Ticket, error) {
	return get[wire.Ticket](ctx, c, ticketPath(name, ""), false)
}

// MaxWatchWait is the longest wait of Watch (SPEC §4.2).
const MaxWatchWait = 5 * time.Minute

// Watched is a watch's answer: the ticket (nil when nobody holds it) and
// its modify index, to pass to the next Watch.
type Watched struct {
	Ticket *wire.Ticket
	Index  uint64
}

// Watch is a blocking read (SPEC §4.2, Consul's blocking query): it
// answers when the ticket's modify index is above index or wait (≤ 5 min)
// passes, with the current state and its index. Index 0 answers at once.
// A wake-up may come without a change the caller cares about: compare.
func (c *Client) Watch(ctx context.Context, name string, index uint64, wait time.Duration) (*Watched, error) {
	if wait < 0 || wait > MaxWatchWait {
		return nil, fmt.Errorf("client: wait %v is outside 0..=%v", wait, MaxWatchWait)
	}
	path := func(elapsed time.Duration) (string, []byte) {
		q := url.Values{}
		q.Set("index", strconv.FormatUint(index, 10))
		q.Set("wait", strconv.FormatInt(max(wait-elapsed, 0).Milliseconds(), 10))
		return ticketPath(name, "") + "?" + q.Encode(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	p, _ := path(0)
	r := c.send(ctx, &call{method: http.MethodGet, path: p, hc: c.long(), repeatable: true, redo: path, skip: -1})
	var idx uint64
	if r.h != nil {
		idx, _ = strconv.ParseUint(r.h.Get("X-Ticket-Index"), 10, 64)
	}
	if errors.Is(r.err, ErrNotFound) {
		return &Watched{Index: idx}, nil
	}
	if r.err != nil {
		return nil, r.err
	}
	t := new(wire.Ticket)
	if err := json.Unmarshal(r.raw, t); err != nil {
		return nil, fmt.Errorf("client: decoding a watch answer: %w", err)
	}
	return &Watched{Ticket: t, Index: max(idx, t.ModifyIndex)}, nil
}

// List reads tickets whose names start with prefix (limit 0: the server's
// default).
func (c *Client) List(ctx context.Context, prefix string, limit int) (*wire.TicketList, error) {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	p := "/v1/tickets"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return get[wire.TicketList](ctx, c, p, false)
}

// Status reads /v1/status of the first address that answers.
func (c *Client) Status(ctx context.Context) (*wire.Status, error) {
	return get[wire.Status](ctx, c, "/v1/status", false)
}

// Ready reads /readyz; a node that is not ready answers an *Error (503)
// with its stage. With several addresses it is the first one that
// answers (an unreachable one is skipped): probe each address with a
// client of its own to judge each node.
func (c *Client) Ready(ctx context.Context) (*wire.Health, error) {
	r := c.send(ctx, &call{method: http.MethodGet, path: "/readyz", hc: c.hc, repeatable: true, probe: true, skip: -1})
	if r.err != nil {
		// Only a bare *Error is the answer r.raw holds; a wrapped one (no
		// address could serve) comes with no body to read the stage from.
		if e, ok := r.err.(*Error); ok && e.StatusCode == http.StatusServiceUnavailable { //nolint:errorlint // see above
			var h wire.Health
			_ = json.Unmarshal(r.raw, &h)
			e.Stage, e.Reason = h.Stage, h.Reason
			e.ErrorBody.Error, e.Message = "unavailable", "not ready: stage "+h.Stage
			if h.Detail != "" {
				e.Message += ": " + h.Detail
			}
		}
		return nil, r.err
	}
	var h wire.Health
	if err := json.Unmarshal(r.raw, &h); err != nil {
		return nil, fmt.Errorf("client: decoding /readyz: %w", err)
	}
	return &h, nil
}

// Probe GETs path (no token) and returns the body of a 2xx answer; any
// other status is an *Error carrying the body's text. It reads health
// endpoints of any TCKCLK server: ticketd's /readyz answers JSON, the
// agent's plain text. With several addresses, as Ready.
func (c *Client) Probe(ctx context.Context, path string) ([]byte, error) {
	r := c.send(ctx, &call{method: http.MethodGet, path: path, hc: c.hc, repeatable: true, probe: true, skip: -1})
	return r.raw, r.err
}

// Members lists the cluster members (admin token).
func (c *Client) Members(ctx context.Context) (*wire.Members, error) {
	return get[wire.Members](ctx, c, "/v1/cluster/members", true)
}

// Replace asks the leader to replace the Raft server OLD with the gossip
// member NEW (admin token); see wire.Replaced. Only the leader takes it:
// with several addresses the client finds it (a follower answers
// not_leader). A lost answer is not sent again (ErrOutcomeUnknown).
func (c *Client) Replace(ctx context.Context, old, repl string) (*wire.Replaced, error) {
	return post[wire.Replaced](ctx, c, "/v1/cluster/replace", wire.ReplaceRequest{Old: old, New: repl}, true)
}

// Snapshot asks the node to take a Raft snapshot now (admin token).
func (c *Client) Snapshot(ctx context.Context) (*wire.SnapshotInfo, error) {
	return post[wire.SnapshotInfo](ctx, c, "/v1/cluster/snapshot", nil, true)
}

func ticketPath(name, action string) string {
	p := "/v1/tickets/" + url.PathEscape(name)
	if action != "" {
		p += "/" + action
	}
	return p
}

// get reads path (repeatable) and decodes a 2xx answer into a T.
func get[T any](ctx context.Context, c *Client, path string, admin bool) (*T, error) {
	return decode[T](http.MethodGet, path, c.send(ctx, &call{method: http.MethodGet, path: path, admin: admin, hc: c.hc, repeatable: true, skip: -1}))
}

// post sends an admin write, never twice after a lost answer, and decodes
// a 2xx answer into a T.
func post[T any](ctx context.Context, c *Client, path string, body any, admin bool) (*T, error) {
	var b []byte
	if body != nil {
		b = mustJSON(body)
	}
	return decode[T](http.MethodPost, path, c.send(ctx, &call{method: http.MethodPost, path: path, body: b, admin: admin, hc: c.hc, skip: -1}))
}

func decode[T any](method, path string, r reply) (*T, error) {
	if r.err != nil {
		return nil, r.err
	}
	v := new(T)
	if err := json.Unmarshal(r.raw, v); err != nil {
		return nil, fmt.Errorf("client: decoding the answer of %s %s: %w", method, path, err)
	}
	return v, nil
}

// mustJSON encodes a request body. It cannot fail: the wire request types
// hold strings and integers only.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("client: encoding %T: %v", v, err))
	}
	return b
}

// maxAnswer bounds what the client reads from a server.
const maxAnswer = 16 << 20

// answerError is the *Error of a non-2xx answer with body raw.
func answerError(status int, raw []byte) *Error {
	e := &Error{StatusCode: status}
	if json.Unmarshal(raw, &e.ErrorBody) != nil || e.ErrorBody.Error == "" {
		e.ErrorBody.Error = strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
		e.Message = strings.TrimSpace(string(raw))
	}
	return e
}
