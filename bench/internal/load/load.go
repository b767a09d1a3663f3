// Package load is the closed-loop load generator shared by bench/'s
// commands (ticketload, tckbench): lock cyclers for ticketd and etcd, a
// measurement loop and its latency summary.
//
// A ticketd cycle is Grant (lease 30 s) + Release over the HTTP API, one
// request per op or, with TicketdOptions.Coalesce, batched with the other
// clients' concurrent ops (POST /v1/batch). An
// etcd cycle is what its concurrency package does for a lock: one session
// lease per client, kept alive, then per cycle Mutex.TryLock (a txn
// put-if-absent of the key with that lease) + Mutex.Unlock (a delete).
package load

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Cycler does one lock cycle (acquire + release) for client i.
type Cycler interface {
	Cycle(ctx context.Context, i int) error
	Close()
}

// ErrBusy is a contended cycle's answer when another client holds the
// lock: an attempt that completed without acquiring (not an error).
var ErrBusy = errors.New("load: lock held by another client")

// Ticketd does Grant + Release on the client's own name.
type Ticketd struct {
	C  *client.Client
	tr *http.Transport
	// spread: client i's own multi-address client (TicketdOptions.Spread);
	// empty: every client uses C.
	spread []*client.Client
}

// NewTicketd makes a client for url with a connection pool sized for
// clients (connections are kept alive and reused). With h2c it speaks
// HTTP/2 without TLS (prior knowledge) instead of HTTP/1.1: every client
// multiplexed over a few connections, as gRPC does for etcd (an
// experiment; the server must accept h2c).
func NewTicketd(url string, clients int, h2c bool) (*Ticketd, error) {
	return NewTicketdWith(url, clients, TicketdOptions{H2C: h2c})
}

// DefaultCoalesce is the batches in flight of the coalescing ticketd
// client the load tools use by default (coalescing measured ahead of one
// request per op, and 1–2 in flight ahead of 4–8 at 3 nodes:
// bench/findings.md).
const DefaultCoalesce = 2

// TicketdOptions choose how the ticketd clients talk to the server.
type TicketdOptions struct {
	// H2C: HTTP/2 without TLS (an experiment; see NewTicketd).
	H2C bool
	// Coalesce > 0: every client shares one coalescing Go client
	// (client.WithCoalescing(Coalesce)): concurrent calls travel together
	// as POST /v1/batch requests, at most Coalesce in flight, as etcd's
	// clients share one gRPC connection. 0: one HTTP request per op.
	Coalesce int
	// Spread, when set, is every node's URL: client i gets a multi-address
	// Go client of its own (client.New with every URL, as a deployment's
	// clients are configured) whose list starts at node i mod len(Spread),
	// so the load arrives at every node, as from clients spread over a
	// cluster; where it goes next is the Go client's own choice (SPEC
	// §4.1). With Coalesce the one shared client lists every node from the
	// first. The url argument is then ignored.
	Spread []string
}

// NewTicketdWith is NewTicketd with options.
func NewTicketdWith(url string, clients int, o TicketdOptions) (*Ticketd, error) {
	h2c := o.H2C
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, MaxConnsPerHost: clients * 2}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
		tr.MaxConnsPerHost = 0
	}
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second})}
	if o.Coalesce > 0 {
		opts = append(opts, client.WithCoalescing(o.Coalesce))
	}
	if len(o.Spread) > 0 {
		url = strings.Join(o.Spread, ",")
	}
	c, err := client.New(url, opts...)
	if err != nil {
		return nil, err
	}
	t := &Ticketd{C: c, tr: tr}
	if len(o.Spread) > 0 && o.Coalesce == 0 {
		for i := range clients {
			k := i % len(o.Spread)
			ci, err := client.New(strings.Join(append(slices.Clone(o.Spread[k:]), o.Spread[:k]...), ","), opts...)
			if err != nil {
				return nil, err
			}
			t.spread = append(t.spread, ci)
		}
	}
	return t, nil
}

// Client is client i's Go client.
func (t *Ticketd) Client(i int) *client.Client {
	if i < len(t.spread) {
		return t.spread[i]
	}
	return t.C
}

// Cycle grants and releases client i's own ticket.
func (t *Ticketd) Cycle(ctx context.Context, i int) error {
	name, holder := fmt.Sprintf("bench-c%03d", i), fmt.Sprintf("client-%03d", i)
	c := t.Client(i)
	l, err := c.Grant(ctx, name, holder, 30)
	if err != nil {
		return err
	}
	_, err = c.Release(ctx, name, holder, l.Token)
	return err
}

// Close drops the idle connections.
func (t *Ticketd) Close() { t.tr.CloseIdleConnections() }

// Ready waits until /readyz answers 200.
func (t *Ticketd) Ready(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		_, err := t.C.Ready(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("ticketd not ready after %v: %w", wait, err)
		}
		time.Sleep(5 * time.Millisecond) // readiness poll with a deadline
	}
}

// HandoffName is the one ticket (and etcd lock prefix) every client
// contends for in hand-off mode.
const HandoffName = "bench-handoff"

// TicketdHandoff: every client Acquires the same ticket (a blocking grant,
// first come first served on the leader) and releases it at once.
type TicketdHandoff struct{ *Ticketd }

// Cycle acquires (waiting) and releases the hand-off ticket.
func (t TicketdHandoff) Cycle(ctx context.Context, i int) error {
	holder := fmt.Sprintf("client-%03d", i)
	c := t.Client(i)
	l, err := c.Acquire(ctx, HandoffName, holder, 30)
	if err != nil {
		return err
	}
	_, err = c.Release(ctx, HandoffName, holder, l.Token)
	return err
}

// TicketdContended: client i TryGrants ticket i mod Names and, when it
// got it, releases it; a held ticket is ErrBusy.
type TicketdContended struct {
	*Ticketd
	Names int
}

// Cycle tries the shared ticket once.
func (t TicketdContended) Cycle(ctx context.Context, i int) error {
	name, holder := fmt.Sprintf("bench-shared-%d", i%t.Names), fmt.Sprintf("client-%03d", i)
	c := t.Client(i)
	l, err := c.TryGrant(ctx, name, holder, 30)
	if errors.Is(err, client.ErrHeld) {
		return ErrBusy
	}
	if err != nil {
		return err
	}
	_, err = c.Release(ctx, name, holder, l.Token)
	return err
}

// Mode says which lock pattern a cycle is.
type Mode int

// The modes.
const (
	Independent Mode = iota // each client its own lock
	Handoff                 // one lock, blocking acquire
	Contended               // a few locks, try-acquire
)

// Etcd is the concurrency package's lock: one session (lease, kept alive)
// per client; per cycle TryLock (txn put-if-absent with the lease) and
// Unlock (delete).
type Etcd struct {
	cli      *clientv3.Client
	sessions []*concurrency.Session
	mutexes  []*concurrency.Mutex
	mode     Mode
}

// NewEtcd opens one session per client on endpoints (with several, etcd's
// client balances its requests over them round-robin, so followers serve
// and forward their share). Independent: each
// client's mutex on its own prefix; Handoff: all on one; Contended:
// client i on prefix i mod names.
func NewEtcd(ctx context.Context, endpoints []string, clients int, wait time.Duration, mode Mode, names int) (*Etcd, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	e := &Etcd{cli: cli, mode: mode}
	deadline := time.Now().Add(wait)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(pctx, "/bench/ready-probe")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cli.Close()
			return nil, fmt.Errorf("etcd not ready after %v: %w", wait, err)
		}
	}
	for i := range clients {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(60), concurrency.WithContext(ctx))
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		e.sessions = append(e.sessions, s)
		prefix := fmt.Sprintf("/bench/c%03d", i)
		switch mode {
		case Handoff:
			prefix = "/bench/" + HandoffName
		case Contended:
			prefix = fmt.Sprintf("/bench/shared-%d", i%max(names, 1))
		}
		e.mutexes = append(e.mutexes, concurrency.NewMutex(s, prefix))
	}
	return e, nil
}

// Cycle locks (TryLock; Lock in hand-off mode) and unlocks client i's mutex.
func (e *Etcd) Cycle(ctx context.Context, i int) error {
	m := e.mutexes[i]
	var err error
	if e.mode == Handoff {
		err = m.Lock(ctx)
	} else {
		err = m.TryLock(ctx)
	}
	if errors.Is(err, concurrency.ErrLocked) {
		return ErrBusy
	}
	if err != nil {
		return err
	}
	return m.Unlock(ctx)
}

// Close ends the sessions (revoking their leases) and the client.
func (e *Etcd) Close() {
	for _, s := range e.sessions {
		s.Close()
	}
	e.cli.Close()
}

// Result of one measured run. Cycles counts completed attempts (in
// contended mode Acquired of them got the lock; the rest were ErrBusy);
// latencies are over every completed attempt.
type Result struct {
	Target      string          `json:"target"`
	Round       int             `json:"round"`
	Clients     int             `json:"clients"`
	Cycles      int             `json:"cycles"`
	Acquired    int64           `json:"acquired"`
	Errors      int64           `json:"errors"`
	Seconds     float64         `json:"seconds"`
	CyclesPerS  float64         `json:"cycles_per_s"`
	P50Ms       float64         `json:"p50_ms"`
	P99Ms       float64         `json:"p99_ms"`
	P999Ms      float64         `json:"p999_ms"`
	FirstError  string          `json:"first_error,omitempty"`
	MaxMs       float64         `json:"max_ms"`
	MeanMs      float64         `json:"mean_ms"`
	Measurement []time.Duration `json:"-"`
}

// Measure runs clients in a closed loop for warmup (unrecorded) then d.
// At the end every client finishes the cycle it is in (nothing is
// cancelled mid-request, so neither server sees aborted calls). window,
// when not nil, is called as recording starts and the function it
// returns as recording stops (to sample CPU counters over exactly the
// measured time).
func Measure(ctx context.Context, target string, c Cycler, clients int, warmup, d time.Duration, window func() func()) Result {
	var recording, stop atomic.Bool
	var errs, acquired atomic.Int64
	var firstErr atomic.Pointer[string]
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				start := time.Now()
				err := c.Cycle(context.WithoutCancel(ctx), i)
				took := time.Since(start)
				if !recording.Load() {
					continue
				}
				if err != nil && !errors.Is(err, ErrBusy) {
					if errs.Add(1) == 1 {
						s := err.Error()
						firstErr.Store(&s)
					}
					continue
				}
				if err == nil {
					acquired.Add(1)
				}
				lats[i] = append(lats[i], took)
			}
		}()
	}
	time.Sleep(warmup) // load generator pacing, not synchronisation
	end := func() {}
	if window != nil {
		end = window()
	}
	recording.Store(true)
	start := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	recording.Store(false)
	elapsed := time.Since(start)
	end()
	stop.Store(true)
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	r := Summarize(target, clients, all, elapsed.Seconds(), errs.Load())
	r.Acquired = acquired.Load()
	if p := firstErr.Load(); p != nil {
		r.FirstError = *p
	}
	return r
}

// Summarize sorts the cycle latencies and computes the figures.
func Summarize(target string, clients int, all []time.Duration, secs float64, errs int64) Result {
	slices.Sort(all)
	r := Result{Target: target, Clients: clients, Cycles: len(all), Acquired: int64(len(all)), Errors: errs, Seconds: secs, Measurement: all}
	if len(all) == 0 {
		return r
	}
	r.CyclesPerS = float64(len(all)) / secs
	r.P50Ms = MS(Quantile(all, 0.50))
	r.P99Ms = MS(Quantile(all, 0.99))
	r.P999Ms = MS(Quantile(all, 0.999))
	r.MaxMs = MS(all[len(all)-1])
	var sum time.Duration
	for _, x := range all {
		sum += x
	}
	r.MeanMs = MS(sum / time.Duration(len(all)))
	return r
}

// Quantile of sorted (nearest rank, rounding down), 0 when empty.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*q))]
}

// MS is d in milliseconds (µs resolution).
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
