package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/bench/internal/load"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/api/client"
)

// newEtcdFor opens the etcd side of compare mode.
func newEtcdFor(ctx context.Context, o options) (*load.Etcd, error) {
	m := load.Independent
	if o.handoff {
		m = load.Handoff
	}
	return load.NewEtcd(ctx, []string{o.etcd}, o.clients, o.wait, m, 1)
}

func compare(ctx context.Context, o options, out io.Writer) error {
	td, err := load.NewTicketdWith(o.ticketd, o.clients, load.TicketdOptions{Coalesce: o.coalesce})
	if err != nil {
		return err
	}
	defer td.Close()
	if err := td.Ready(ctx, o.wait); err != nil {
		return err
	}
	type target struct {
		name string
		c    load.Cycler
	}
	targets := []target{{"ticketd", td}}
	if o.handoff {
		targets = []target{{"ticketd", load.TicketdHandoff{Ticketd: td}}}
	}
	if o.etcd != "" {
		ed, err := newEtcdFor(ctx, o)
		if err != nil {
			return err
		}
		defer ed.Close()
		targets = []target{{"etcd", ed}, targets[0]}
	}
	var results []load.Result
	for round := 1; round <= o.rounds; round++ {
		for _, t := range targets {
			r := load.Measure(ctx, t.name, t.c, o.clients, o.warmup, o.duration, nil)
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
	pooled := map[string]load.Result{}
	for _, name := range []string{"etcd", "ticketd"} {
		var all []time.Duration
		var secs float64
		var errs int64
		for _, r := range results {
			if r.Target == name {
				all = append(all, r.Measurement...)
				secs += r.Seconds
				errs += r.Errors
			}
		}
		pooled[name] = load.Summarize(name, o.clients, all, secs, errs)
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

func firstErrOf(rs []load.Result, target string) string {
	for _, r := range rs {
		if r.Target == target && r.FirstError != "" {
			return target + ": " + r.FirstError
		}
	}
	return ""
}

// fill grants o.fill distinct tickets with lease 250 s.
func fill(ctx context.Context, o options, out io.Writer) error {
	td, err := load.NewTicketdWith(o.ticketd, o.clients, load.TicketdOptions{Coalesce: o.coalesce})
	if err != nil {
		return err
	}
	defer td.Close()
	if err := td.Ready(ctx, o.wait); err != nil {
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
				if _, err := td.C.Grant(ctx, name, "filler", 250); err != nil {
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
	td, err := load.NewTicketd(o.ticketd, 1, false)
	if err != nil {
		return err
	}
	defer td.Close()
	start := time.Now()
	if err := td.Ready(ctx, o.wait); err != nil {
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
