// Package client is the Go client of the ticketd HTTP API (SPEC §4.1).
//
// Grant and Renew return the server's answer plus a local monotonic
// Deadline: the client's own send time + the lease × (1 − 500 ppm), the
// margin covering this host's clock-rate error over a 250 s lease. That
// deadline, not any server time, is what code should trust: stop using the
// ticket's fencing token before it passes.
//
// Hazard: Deadline carries Go's monotonic clock reading; compare it only
// with time.Now() (time.Until, Before). Serialising it strips the monotonic
// reading and leaves a wall time, which is not safe to trust.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tckclk/tckclk/node/api/wire"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ClockErrorPPM is the rate error the local deadline allows for (SPEC §4).
const ClockErrorPPM = 500

// DefaultAddr is ticketd's default API address.
const DefaultAddr = "http://127.0.0.1:7980"

// Client talks to one ticketd.
type Client struct {
	base  string
	hc    *http.Client
	token string
	admin string
	now   func() time.Time
	co    *coalescer // WithCoalescing; nil: one request per call

	coInFlight int
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient uses hc (e.g. with a TLS configuration).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken sends the client bearer token (api.token_file on the server).
func WithToken(tok string) Option { return func(c *Client) { c.token = tok } }

// WithAdminToken sends the admin bearer token on /v1/cluster/... calls.
func WithAdminToken(tok string) Option { return func(c *Client) { c.admin = tok } }

// WithClock replaces time.Now for send times and for how long a coalescing
// client sends calls alone after a server without POST /v1/batch (tests).
// The returned times should carry a monotonic reading, as time.Now's do.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// New returns a client for addr ("http://host:port", "https://host:port"
// or "host:port", which means http).
func New(addr string, opts ...Option) (*Client, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("client: address %q is not http(s)://HOST:PORT", addr)
	}
	c := &Client{base: u.Scheme + "://" + u.Host, hc: &http.Client{Timeout: 30 * time.Second}, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	if c.coInFlight > 0 {
		c.co = &coalescer{c: c, max: c.coInFlight}
	}
	return c, nil
}

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

// Grant asks for the ticket name for leaseS seconds (1..=250).
func (c *Client) Grant(ctx context.Context, name, holder string, leaseS int) (*Lease, error) {
	if c.co != nil {
		l := int64(leaseS)
		return c.coLease(ctx, wire.BatchOp{Op: "grant", Name: name, Holder: holder, LeaseS: &l})
	}
	return c.lease(ctx, name, "grant", wire.GrantRequest{Holder: holder, LeaseS: int64(leaseS)})
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
// down to ms) passes, then ErrHeld. A leader change ends the wait with a
// 503 (ErrNotLeader); ending ctx ends the wait on the server too, and a
// waiter that went away is never granted the ticket.
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
	return c.leaseLong(ctx, name, "grant", wire.GrantRequest{Holder: holder, LeaseS: int64(leaseS), WaitMs: ms})
}

// Renew extends the holder's lease; the token stays.
func (c *Client) Renew(ctx context.Context, name, holder string, token uint64, leaseS int) (*Lease, error) {
	if c.co != nil {
		l := int64(leaseS)
		return c.coLease(ctx, wire.BatchOp{Op: "renew", Name: name, Holder: holder, Token: &token, LeaseS: &l})
	}
	return c.lease(ctx, name, "renew", wire.RenewRequest{Holder: holder, Token: token, LeaseS: int64(leaseS)})
}

func (c *Client) lease(ctx context.Context, name, action string, body any) (*Lease, error) {
	return c.leaseVia(ctx, c.hc, name, action, body)
}

// leaseLong is lease for a request that may wait past the HTTP client's
// own timeout: ctx bounds it instead.
func (c *Client) leaseLong(ctx context.Context, name, action string, body any) (*Lease, error) {
	return c.leaseVia(ctx, c.long(), name, action, body)
}

// long is the HTTP client without its overall timeout (ctx bounds the
// requests that use it).
func (c *Client) long() *http.Client {
	hc := *c.hc
	hc.Timeout = 0
	return &hc
}

func (c *Client) leaseVia(ctx context.Context, hc *http.Client, name, action string, body any) (*Lease, error) {
	sent := c.now()
	raw, err := c.doVia(ctx, hc, http.MethodPost, ticketPath(name, action), body, false)
	if err != nil {
		return nil, err
	}
	return decodeLease(sent, action, raw)
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

// Release frees the ticket.
func (c *Client) Release(ctx context.Context, name, holder string, token uint64) (*wire.Released, error) {
	if c.co != nil {
		raw, err := c.co.do(ctx, wire.BatchOp{Op: "release", Name: name, Holder: holder, Token: &token})
		if err != nil {
			return nil, err
		}
		r := new(wire.Released)
		if err := json.Unmarshal(raw, r); err != nil {
			return nil, fmt.Errorf("client: release answer: %w", err)
		}
		return r, nil
	}
	return call[wire.Released](ctx, c, http.MethodPost, ticketPath(name, "release"), wire.ReleaseRequest{Holder: holder, Token: token}, false)
}

// Get reads one ticket (linearizable); ErrNotFound when nobody holds it.
func (c *Client) Get(ctx context.Context, name string) (*wire.Ticket, error) {
	return call[wire.Ticket](ctx, c, http.MethodGet, ticketPath(name, ""), nil, false)
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
	q := url.Values{}
	q.Set("index", strconv.FormatUint(index, 10))
	q.Set("wait", strconv.FormatInt(wait.Milliseconds(), 10))
	ctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	raw, h, err := c.doHeader(ctx, c.long(), http.MethodGet, ticketPath(name, "")+"?"+q.Encode(), nil, false)
	var idx uint64
	if h != nil {
		idx, _ = strconv.ParseUint(h.Get("X-Ticket-Index"), 10, 64)
	}
	if errors.Is(err, ErrNotFound) {
		return &Watched{Index: idx}, nil
	}
	if err != nil {
		return nil, err
	}
	t := new(wire.Ticket)
	if err := json.Unmarshal(raw, t); err != nil {
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
	return call[wire.TicketList](ctx, c, http.MethodGet, p, nil, false)
}

// Status reads /v1/status.
func (c *Client) Status(ctx context.Context) (*wire.Status, error) {
	return call[wire.Status](ctx, c, http.MethodGet, "/v1/status", nil, false)
}

// Ready reads /readyz; a node that is not ready answers an *Error (503)
// with its stage.
func (c *Client) Ready(ctx context.Context) (*wire.Health, error) {
	raw, err := c.do(ctx, http.MethodGet, "/readyz", nil, false)
	if err != nil {
		if e, ok := err.(*Error); ok && e.StatusCode == http.StatusServiceUnavailable {
			var h wire.Health
			_ = json.Unmarshal(raw, &h)
			e.Stage, e.Reason = h.Stage, h.Reason
			e.ErrorBody.Error, e.Message = "unavailable", "not ready: stage "+h.Stage
			if h.Detail != "" {
				e.Message += ": " + h.Detail
			}
		}
		return nil, err
	}
	var h wire.Health
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("client: decoding /readyz: %w", err)
	}
	return &h, nil
}

// Probe GETs path (no token) and returns the body of a 2xx answer; any
// other status is an *Error carrying the body's text. It reads health
// endpoints of any TCKCLK server: ticketd's /readyz answers JSON, the
// agent's plain text.
func (c *Client) Probe(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, nil, false)
}

// Members lists the cluster members (admin token).
func (c *Client) Members(ctx context.Context) (*wire.Members, error) {
	return call[wire.Members](ctx, c, http.MethodGet, "/v1/cluster/members", nil, true)
}

// Replace asks the leader to replace the Raft server OLD with the gossip
// member NEW (admin token); see wire.Replaced.
func (c *Client) Replace(ctx context.Context, old, repl string) (*wire.Replaced, error) {
	return call[wire.Replaced](ctx, c, http.MethodPost, "/v1/cluster/replace", wire.ReplaceRequest{Old: old, New: repl}, true)
}

func ticketPath(name, action string) string {
	p := "/v1/tickets/" + url.PathEscape(name)
	if action != "" {
		p += "/" + action
	}
	return p
}

// call does one request and decodes a 2xx answer into a T.
func call[T any](ctx context.Context, c *Client, method, path string, body any, admin bool) (*T, error) {
	raw, err := c.do(ctx, method, path, body, admin)
	if err != nil {
		return nil, err
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("client: decoding the answer of %s %s: %w", method, path, err)
	}
	return v, nil
}

// maxAnswer bounds what the client reads from a server.
const maxAnswer = 16 << 20

func (c *Client) do(ctx context.Context, method, path string, body any, admin bool) ([]byte, error) {
	raw, _, err := c.doHeader(ctx, c.hc, method, path, body, admin)
	return raw, err
}

func (c *Client) doVia(ctx context.Context, hc *http.Client, method, path string, body any, admin bool) ([]byte, error) {
	raw, _, err := c.doHeader(ctx, hc, method, path, body, admin)
	return raw, err
}

func (c *Client) doHeader(ctx context.Context, hc *http.Client, method, path string, body any, admin bool) ([]byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := c.token; admin {
		tok = c.admin
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	} else if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return raw, resp.Header, nil
	}
	return raw, resp.Header, answerError(resp.StatusCode, raw)
}

// answerError is the *Error of a non-2xx answer with body raw.
func answerError(status int, raw []byte) *Error {
	e := &Error{StatusCode: status}
	if json.Unmarshal(raw, &e.ErrorBody) != nil || e.ErrorBody.Error == "" {
		e.ErrorBody.Error = strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
		e.Message = strings.TrimSpace(string(raw))
	}
	return e
}

// Snapshot asks the node to take a Raft snapshot now (admin token).
func (c *Client) Snapshot(ctx context.Context) (*wire.SnapshotInfo, error) {
	return call[wire.SnapshotInfo](ctx, c, http.MethodPost, "/v1/cluster/snapshot", nil, true)
}
