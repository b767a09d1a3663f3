package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/api/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// cycler does one lock cycle (acquire + release) for client i.
type cycler interface {
	cycle(ctx context.Context, i int) error
	close()
}

// ticketdCycler: Grant + Release on the client's own name.
type ticketdCycler struct {
	c  *client.Client
	tr *http.Transport
}

func newTicketd(url string, clients int) (*ticketdCycler, error) {
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, MaxConnsPerHost: clients * 2}
	c, err := client.New(url, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
	if err != nil {
		return nil, err
	}
	return &ticketdCycler{c: c, tr: tr}, nil
}

func (t *ticketdCycler) cycle(ctx context.Context, i int) error {
	name, holder := fmt.Sprintf("bench-c%03d", i), fmt.Sprintf("client-%03d", i)
	l, err := t.c.Grant(ctx, name, holder, 30)
	if err != nil {
		return err
	}
	_, err = t.c.Release(ctx, name, holder, l.Token)
	return err
}

func (t *ticketdCycler) close() { t.tr.CloseIdleConnections() }

// handoffName is the one ticket (and etcd lock prefix) every client
// contends for in hand-off mode.
const handoffName = "bench-handoff"

// ticketdHandoff: every client Acquires the same ticket (a blocking grant,
// first come first served on the leader) and releases it at once.
type ticketdHandoff struct{ *ticketdCycler }

func (t ticketdHandoff) cycle(ctx context.Context, i int) error {
	holder := fmt.Sprintf("client-%03d", i)
	l, err := t.c.Acquire(ctx, handoffName, holder, 30)
	if err != nil {
		return err
	}
	_, err = t.c.Release(ctx, handoffName, holder, l.Token)
	return err
}

// ready waits until /readyz answers 200.
func (t *ticketdCycler) ready(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		_, err := t.c.Ready(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("ticketd not ready after %v: %w", wait, err)
		}
		time.Sleep(5 * time.Millisecond) // readiness poll with a deadline
	}
}

// etcdCycler: the concurrency package's lock — one session (lease, kept
// alive) per client; per cycle TryLock (txn put-if-absent with the lease)
// and Unlock (delete).
type etcdCycler struct {
	cli      *clientv3.Client
	sessions []*concurrency.Session
	mutexes  []*concurrency.Mutex
}

// newEtcd opens one session per client; with handoff every client's
// mutex is on the same prefix (one contended lock), else on its own.
func newEtcd(ctx context.Context, endpoint string, clients int, wait time.Duration, handoff bool) (*etcdCycler, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	e := &etcdCycler{cli: cli}
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
			e.close()
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		e.sessions = append(e.sessions, s)
		prefix := fmt.Sprintf("/bench/c%03d", i)
		if handoff {
			prefix = "/bench/" + handoffName
		}
		e.mutexes = append(e.mutexes, concurrency.NewMutex(s, prefix))
	}
	return e, nil
}

func (e *etcdCycler) cycle(ctx context.Context, i int) error {
	m := e.mutexes[i]
	if err := m.TryLock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

// etcdHandoff: every client Locks the same Mutex prefix (it queues on
// the key before it) and Unlocks at once.
type etcdHandoff struct{ *etcdCycler }

func (e etcdHandoff) cycle(ctx context.Context, i int) error {
	m := e.mutexes[i]
	if err := m.Lock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

func (e *etcdCycler) close() {
	for _, s := range e.sessions {
		s.Close()
	}
	e.cli.Close()
}

// result of one measured run.
type result struct {
	Target      string  `json:"target"`
	Round       int     `json:"round"`
	Clients     int     `json:"clients"`
	Cycles      int     `json:"cycles"`
	Errors      int64   `json:"errors"`
	Seconds     float64 `json:"seconds"`
	CyclesPerS  float64 `json:"cycles_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	FirstError  string  `json:"first_error,omitempty"`
	MaxMs       float64 `json:"max_ms"`
	MeanMs      float64 `json:"mean_ms"`
	measurement []time.Duration
}

// measure runs clients in a closed loop for warmup (unrecorded) then d.
// At the end every client finishes the cycle it is in (nothing is
// cancelled mid-request, so neither server sees aborted calls).
func measure(ctx context.Context, target string, c cycler, clients int, warmup, d time.Duration) result {
	var recording, stop atomic.Bool
	var errs atomic.Int64
	var firstErr atomic.Pointer[string]
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				start := time.Now()
				err := c.cycle(context.WithoutCancel(ctx), i)
				took := time.Since(start)
				if !recording.Load() {
					continue
				}
				if err != nil {
					if errs.Add(1) == 1 {
						s := err.Error()
						firstErr.Store(&s)
					}
					continue
				}
				lats[i] = append(lats[i], took)
			}
		}()
	}
	time.Sleep(warmup) // load generator pacing, not synchronisation
	recording.Store(true)
	start := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	recording.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	r := summarize(target, clients, all, elapsed.Seconds(), errs.Load())
	if p := firstErr.Load(); p != nil {
		r.FirstError = *p
	}
	return r
}

// summarize sorts the cycle latencies and computes the figures.
func summarize(target string, clients int, all []time.Duration, secs float64, errs int64) result {
	slices.Sort(all)
	r := result{Target: target, Clients: clients, Cycles: len(all), Errors: errs, Seconds: secs, measurement: all}
	if len(all) == 0 {
		return r
	}
	r.CyclesPerS = float64(len(all)) / secs
	r.P50Ms = ms(all[len(all)*50/100])
	r.P99Ms = ms(all[min(len(all)-1, len(all)*99/100)])
	r.MaxMs = ms(all[len(all)-1])
	var sum time.Duration
	for _, x := range all {
		sum += x
	}
	r.MeanMs = ms(sum / time.Duration(len(all)))
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func compare(ctx context.Context, o options, out io.Writer) error {
	td, err := newTicketd(o.ticketd, o.clients)
	if err != nil {
		return err
	}
	defer td.close()
	if err := td.ready(ctx, o.wait); err != nil {
		return err
	}
	type target struct {
		name string
		c    cycler
	}
	targets := []target{{"ticketd", td}}
	if o.handoff {
		targets = []target{{"ticketd", ticketdHandoff{td}}}
	}
	if o.etcd != "" {
		ed, err := newEtcd(ctx, o.etcd, o.clients, o.wait, o.handoff)
		if err != nil {
			return err
		}
		defer ed.close()
		targets = []target{{"etcd", ed}, targets[0]}
		if o.handoff {
			targets[0].c = etcdHandoff{ed}
		}
	}
	var results []result
	for round := 1; round <= o.rounds; round++ {
		for _, t := range targets {
			r := measure(ctx, t.name, t.c, o.clients, o.warmup, o.duration)
			r.Round = round
			results = append(results, r)
			if o.jsonOut {
				printJSON(out, r)
			} else {
				fmt.Fprintf(out, "round %d %-8s %6d cycles in %5.1fs  %8.1f cycles/s  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  errors %d %s\n",
					round, t.name, r.Cycles, r.Seconds, r.CyclesPerS, r.P50Ms, r.P99Ms, r.MaxMs, r.Errors, r.FirstError)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if o.etcd == "" {
		return nil
	}
	// Pool every round per target, then compare.
	pooled := map[string]result{}
	for _, name := range []string{"etcd", "ticketd"} {
		var all []time.Duration
		var secs float64
		var errs int64
		for _, r := range results {
			if r.Target == name {
				all = append(all, r.measurement...)
				secs += r.Seconds
				errs += r.Errors
			}
		}
		pooled[name] = summarize(name, o.clients, all, secs, errs)
	}
	e, t := pooled["etcd"], pooled["ticketd"]
	if e.Cycles == 0 || t.Cycles == 0 {
		return fmt.Errorf("no completed cycles (etcd %d, ticketd %d): %s %s", e.Cycles, t.Cycles, firstErrOf(results, "etcd"), firstErrOf(results, "ticketd"))
	}
	summary := map[string]any{
		"mode": mode(o), "clients": o.clients, "rounds": o.rounds, "seconds_per_round": o.duration.Seconds(),
		"etcd_cycles_per_s": e.CyclesPerS, "etcd_p50_ms": e.P50Ms, "etcd_p99_ms": e.P99Ms,
		"ticketd_cycles_per_s": t.CyclesPerS, "ticketd_p50_ms": t.P50Ms, "ticketd_p99_ms": t.P99Ms,
		"throughput_ratio": t.CyclesPerS / e.CyclesPerS, "p50_ratio": t.P50Ms / e.P50Ms, "p99_ratio": t.P99Ms / e.P99Ms,
		"target_throughput_met": t.CyclesPerS >= e.CyclesPerS, "target_p99_met": t.P99Ms <= e.P99Ms,
		"errors": e.Errors + t.Errors,
	}
	if o.jsonOut {
		printJSON(out, summary)
		return nil
	}
	fmt.Fprintf(out, "\n%s, pooled over %d rounds × %v, %d clients each:\n", mode(o), o.rounds, o.duration, o.clients)
	fmt.Fprintf(out, "  etcd     %8.1f cycles/s  p50 %7.2f ms  p99 %7.2f ms\n", e.CyclesPerS, e.P50Ms, e.P99Ms)
	fmt.Fprintf(out, "  ticketd  %8.1f cycles/s  p50 %7.2f ms  p99 %7.2f ms\n", t.CyclesPerS, t.P50Ms, t.P99Ms)
	fmt.Fprintf(out, "  ratio ticketd/etcd: throughput %.2f× (target ≥ 1.0: %s), p50 %.2f×, p99 %.2f× (target ≤ 1.0: %s)\n",
		t.CyclesPerS/e.CyclesPerS, met(t.CyclesPerS >= e.CyclesPerS), t.P50Ms/e.P50Ms, t.P99Ms/e.P99Ms, met(t.P99Ms <= e.P99Ms))
	return nil
}

// mode names what a cycle is.
func mode(o options) string {
	if o.handoff {
		return "hand-off (one contended lock: blocking acquire + release; a cycle's time is its wait)"
	}
	return "independent locks (try-acquire + release on each client's own name)"
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func firstErrOf(rs []result, target string) string {
	for _, r := range rs {
		if r.Target == target && r.FirstError != "" {
			return target + ": " + r.FirstError
		}
	}
	return ""
}

// fill grants o.fill distinct tickets with lease 250 s.
func fill(ctx context.Context, o options, out io.Writer) error {
	td, err := newTicketd(o.ticketd, o.clients)
	if err != nil {
		return err
	}
	defer td.close()
	if err := td.ready(ctx, o.wait); err != nil {
		return err
	}
	var next atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Pointer[string]
	start := time.Now()
	var wg sync.WaitGroup
	for range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(o.fill) {
					return
				}
				name := fmt.Sprintf("fill-%08d", i)
				if _, err := td.c.Grant(ctx, name, "filler", 250); err != nil {
					if errs.Add(1) == 1 {
						s := err.Error()
						firstErr.Store(&s)
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	r := map[string]any{"granted": int64(o.fill) - errs.Load(), "errors": errs.Load(), "seconds": took.Seconds(),
		"grants_per_s": float64(int64(o.fill)-errs.Load()) / took.Seconds()}
	if p := firstErr.Load(); p != nil {
		r["first_error"] = *p
	}
	if o.jsonOut {
		printJSON(out, r)
	} else {
		fmt.Fprintf(out, "filled %d tickets in %.1fs (%.0f grants/s), %d errors\n", r["granted"], took.Seconds(), r["grants_per_s"], errs.Load())
	}
	if errs.Load() > 0 {
		return fmt.Errorf("%d grants failed, first: %s", errs.Load(), *firstErr.Load())
	}
	return ctx.Err()
}

// awaitReady prints how long ticketd took to answer /readyz 200.
func awaitReady(ctx context.Context, o options, out io.Writer) error {
	td, err := newTicketd(o.ticketd, 1)
	if err != nil {
		return err
	}
	defer td.close()
	start := time.Now()
	if err := td.ready(ctx, o.wait); err != nil {
		return err
	}
	took := time.Since(start)
	if o.jsonOut {
		printJSON(out, map[string]any{"ready_after_ms": took.Milliseconds()})
	} else {
		fmt.Fprintf(out, "ready after %v\n", took.Round(time.Millisecond))
	}
	return nil
}

// snapshot asks ticketd for a Raft snapshot and prints what it took.
func snapshot(ctx context.Context, o options, out io.Writer) error {
	if o.adminToken == "" {
		return fmt.Errorf("-snapshot needs -admin-token-file")
	}
	tok, err := secret.ReadFileRaw(o.adminToken)
	if err != nil {
		return err
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := client.New(o.ticketd, client.WithAdminToken(string(tok)), client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Minute}))
	if err != nil {
		return err
	}
	s, err := c.Snapshot(ctx)
	if err != nil {
		return err
	}
	if o.jsonOut {
		printJSON(out, s)
	} else {
		fmt.Fprintf(out, "snapshot %s: index %d, %d tickets, %d bytes, took %d ms\n", s.ID, s.Index, s.Tickets, s.SizeBytes, s.DurationMs)
	}
	return nil
}
