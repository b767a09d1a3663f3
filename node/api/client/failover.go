package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// Several addresses (SPEC §4.1). A client made with a list of addresses
// sends each op to the address that answered last and moves to the next
// one when an address cannot serve it:
//
//   - it could not be reached, or the request never left (connection
//     refused, DNS, TLS, a dial timeout): nothing was applied;
//   - it answered 503 not_leader, or 503 unavailable with a readiness
//     stage (starting, clock_check, raft, replay, uniform, stopping,
//     failed, removed, hold_off, …): the node refused before doing anything;
//   - the request was sent and its answer lost (a reset, a timeout, 503
//     unavailable without a stage, e.g. unknown_outcome): the op may have
//     been applied. Grant (by the same holder: a repeat returns the current
//     grant, never extends it), Renew and Release (they carry the token),
//     batches of those and reads are sent again; anything else (the admin
//     calls) is not, and the caller is told the outcome is unknown
//     (ErrOutcomeUnknown).
//
// Every other answer (2xx, 4xx, other statuses) is the op's answer, from
// whichever address gave it. When no address could serve, the client goes
// round them again after a short back-off, for as long as ctx and the
// failover budget (WithFailover, counted from the op's first send) allow,
// as long as one of them might serve soon (an election, a restart); a
// round in which every address said it will not serve soon (FAILED, a
// hold-off, a Δ mismatch, removed) ends it. Local deadlines always count from the
// op's first send (SPEC §4), so a repeat never extends what the caller may
// trust. If an op that may have been applied never got an answer, its
// error matches ErrOutcomeUnknown.

// DefaultFailover is how long after an op's first send a client keeps
// going round its addresses while none of them can serve.
const DefaultFailover = 10 * time.Second

// WithFailover sets how long after an op's first send the client keeps
// going round its addresses, with back-off, while every one is unreachable
// or answers that it cannot serve now (no leader during an election, a
// node restarting). ctx bounds it too. 0: each address is tried once.
func WithFailover(d time.Duration) Option {
	return func(c *Client) { c.failover = max(d, 0) }
}

// ErrOutcomeUnknown is matched (errors.Is) by the error of an op that was
// sent, may have been applied, and got no answer: read the ticket before
// acting on it.
var ErrOutcomeUnknown = errors.New("client: outcome unknown: the request was sent and its answer lost, it may have been applied")

// Back-off between rounds over the addresses: doubling from the first to
// the cap, each wait drawn from [d/2, d).
const (
	roundFirst = 20 * time.Millisecond
	roundCap   = 500 * time.Millisecond
)

// verdict is what one attempt at one address says about the op.
type verdict int

const (
	// answered: the op's answer (2xx, or a refusal of the op itself).
	answered verdict = iota
	// moveOn: this address cannot serve now and nothing was applied.
	moveOn
	// notSoon: as moveOn, and this address will not serve soon (FAILED,
	// hold-off, Δ mismatch): no reason for another round on its account.
	notSoon
	// unknown: the op was sent and may have been applied.
	unknown
)

// classify judges an attempt's error; sent says whether the whole
// request was written.
func classify(err error, sent bool) verdict {
	if err == nil {
		return answered
	}
	var e *Error
	if !errors.As(err, &e) {
		if sent {
			return unknown
		}
		return moveOn
	}
	if e.StatusCode != http.StatusServiceUnavailable {
		return answered
	}
	switch {
	case e.ErrorBody.Error == "not_leader":
		return moveOn
	case e.ErrorBody.Error != "unavailable", e.Reason == "unknown_outcome", e.Stage == "":
		// Not ticketd's own refusal (a proxy's 503), or one that came
		// after a proposal (raft, timeout, state machine): maybe applied.
		return unknown
	case e.Stage == "failed", e.Stage == "removed", e.Stage == "hold_off", e.Reason == "delta_mismatch":
		return notSoon
	}
	return moveOn
}

// call is one logical request, sent to one address or several.
type call struct {
	method, path string
	body         []byte // nil: none
	admin        bool
	hc           *http.Client
	// repeatable: sending it again after an attempt whose outcome is
	// unknown is safe (reads, Grant, Renew, Release, their batches).
	repeatable bool
	// redo, when set, gives path and body for a later attempt, elapsed
	// after the first send (a blocking grant's or a watch's wait shrinks).
	redo func(elapsed time.Duration) (path string, body []byte)
	// probe: any answer is the answer (a 503 from /readyz is what the
	// caller asked for); only an unreachable address is skipped, once.
	probe bool
	// skip is an address (index) the first round leaves out, -1 none: a
	// batch carrying this op just failed there. uncertain and cause are
	// that batch's: whether it may have been applied, and its error (the
	// answer if nothing else is tried).
	skip      int
	uncertain bool
	cause     error
}

// reply is what send returns: the last answer's body and header, its
// error, and whether an earlier attempt may have applied the op.
type reply struct {
	raw       []byte
	h         http.Header
	err       error
	uncertain bool
}

// preferred is the address to try first: the last that answered.
func (c *Client) preferred() int { return int(c.pref.Load()) % len(c.addrs) }

// worked makes address i the preferred one.
func (c *Client) worked(i int) { c.pref.Store(int64(i)) }

// answeredBy records that address i answered with header h: it becomes
// the preferred one, unless its answer says it forwarded the op to a
// leader (wire.LeaderHeader). Then the preference moves on to the next
// address not known to forward to that same leader — the leader itself
// answers without the header and keeps the preference — so a client
// with several addresses settles on the leader's within a few calls and
// saves every later op the forwarding hop. When every address is known
// to forward to that leader (the leader's own address is not in the
// list) the preference stays.
func (c *Client) answeredBy(i int, h http.Header) {
	n := len(c.addrs)
	leader := ""
	if n > 1 && h != nil {
		leader = h.Get(wire.LeaderHeader)
	}
	if leader == "" {
		if n > 1 {
			c.via[i].Store(nil)
		}
		c.worked(i)
		return
	}
	if p := c.via[i].Load(); p == nil || *p != leader {
		c.via[i].Store(&leader)
	}
	for k := 1; k < n; k++ {
		j := (i + k) % n
		if p := c.via[j].Load(); p == nil || *p != leader {
			// Unless another call has moved the preference already.
			c.pref.CompareAndSwap(int64(i), int64(j))
			return
		}
	}
	c.worked(i)
}

// failed moves the preference past address i, unless another call has
// already moved it.
func (c *Client) failed(i int) { c.pref.CompareAndSwap(int64(i), int64((i+1)%len(c.addrs))) }

// send runs cl against the addresses (see the rules above).
func (c *Client) send(ctx context.Context, cl *call) reply {
	n := len(c.addrs)
	start := time.Now()
	b := backoff{first: roundFirst, cap: roundCap}
	last, uncertain := cl.cause, cl.uncertain
	var fails []string
	for round := 0; ; round++ {
		from := c.preferred()
		tried, again := 0, false
		fails = fails[:0]
		for k := range n {
			i := (from + k) % n
			if round == 0 && i == cl.skip {
				continue
			}
			path, body := cl.path, cl.body
			if cl.redo != nil && (tried > 0 || round > 0 || cl.skip >= 0) {
				path, body = cl.redo(time.Since(start))
			}
			tried++
			raw, h, err, sent := c.attempt(ctx, cl.hc, c.addrs[i], cl.method, path, body, cl.admin)
			v := classify(err, sent)
			if cl.probe && v != moveOn {
				v = answered
			}
			if v == answered {
				c.answeredBy(i, h)
				return reply{raw: raw, h: h, err: err, uncertain: uncertain}
			}
			c.failed(i)
			if v == unknown {
				if !cl.repeatable {
					return reply{err: fmt.Errorf("%w: %w", ErrOutcomeUnknown, err), uncertain: true}
				}
				uncertain = true
			}
			if ctx.Err() != nil {
				// This attempt was cut short by ctx: the one before says more.
				if last == nil {
					last = err
				}
				return reply{err: ended(ctx, last, uncertain || sent), uncertain: uncertain || sent}
			}
			last = err
			fails = append(fails, c.addrs[i]+": "+brief(err))
			again = again || v != notSoon
		}
		elapsed := time.Since(start)
		if cl.probe || (tried > 0 && !again) || elapsed >= c.failover {
			break
		}
		if err := sleep(ctx, min(b.next(), c.failover-elapsed)); err != nil {
			return reply{err: ended(ctx, last, uncertain), uncertain: uncertain}
		}
	}
	err := last
	if n > 1 && len(fails) > 0 {
		err = fmt.Errorf("client: %s %s: no address could serve it (%s): %w", cl.method, cl.path, strings.Join(fails, "; "), last)
	}
	if uncertain {
		err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return reply{err: err, uncertain: uncertain}
}

// ended is the error of an op whose ctx ended: ctx's, the last attempt's,
// and ErrOutcomeUnknown when a send may have been applied.
func ended(ctx context.Context, last error, uncertain bool) error {
	err := ctx.Err()
	if last != nil && !errors.Is(last, err) {
		err = fmt.Errorf("%w (last error: %w)", err, last)
	}
	if uncertain {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}

// brief is an attempt's failure in a few words, for the list of addresses
// tried.
func brief(err error) string {
	var e *Error
	if errors.As(err, &e) {
		s := fmt.Sprintf("%d %s", e.StatusCode, e.ErrorBody.Error)
		if e.Stage != "" {
			s += " stage " + e.Stage
		}
		if e.Reason != "" && e.Reason != e.Stage {
			s += " (" + e.Reason + ")"
		}
		return s
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:] // "connection refused", "EOF", without the URL
	}
	return msg
}

// attempt sends one request to base and reads the answer: its body and
// header, an *Error for a non-2xx status, and whether the whole request
// was written (a request that never left cannot have been applied).
func (c *Client) attempt(ctx context.Context, hc *http.Client, base, method, path string, body []byte, admin bool) (raw []byte, h http.Header, err error, sent bool) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, base+path, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err), false
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok := c.token
	if admin {
		tok = c.admin
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: %w", method, path, err), wrote.Load()
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err), true
	}
	if resp.StatusCode/100 == 2 {
		return raw, resp.Header, nil, true
	}
	return raw, resp.Header, answerError(resp.StatusCode, raw), true
}
