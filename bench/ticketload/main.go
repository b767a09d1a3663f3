// Command ticketload is the benchmark load tool of bench/ (DESIGN:
// benchmarks print ratios against a baseline run in the same process).
//
// Compare mode drives a single-node ticketd and a single-member etcd with
// the same number of concurrent clients, each doing lock cycles on its own
// name, in alternating rounds, and prints cycles/s, p50 and p99 for both and
// the ratios ticketd/etcd:
//
//	ticketload -ticketd http://127.0.0.1:7980 -etcd 127.0.0.1:2379 -clients 64 -duration 20s -rounds 2
//
// A ticketd cycle is Grant (lease 30 s) + Release over the HTTP API; the
// clients share one coalescing Go client (concurrent ops travel together
// as POST /v1/batch, -coalesce batches in flight; -coalesce 0: one HTTP
// request per op). An
// etcd cycle is what its concurrency package does for a lock: one session
// lease per client, kept alive, then per cycle Mutex.TryLock (a txn
// put-if-absent of the key with that lease) + Mutex.Unlock (a delete).
//
// With -handoff every client contends for one lock instead: a ticketd
// cycle is client.Acquire (a blocking grant, first come first served on
// the leader) + Release, an etcd cycle concurrency.Mutex.Lock (queued on
// the revision before it) + Unlock; cycles/s is hand-offs/s:
//
//	ticketload -ticketd http://127.0.0.1:7980 -etcd 127.0.0.1:2379 -clients 64 -handoff
//
// Without -etcd it measures ticketd alone (no ratio: for profiling).
//
// Fill mode grants N distinct tickets (lease 250 s) as fast as it can and
// reports the rate:
//
//	ticketload -ticketd http://127.0.0.1:7980 -fill 1000000 -clients 128
//
// Two helper modes serve bench scripts: -await-ready waits for ticketd's
// /readyz and prints how long that took (restart time); -snapshot asks for
// a Raft snapshot (admin token) and prints its index, size and duration.
//
// Check mode runs the safety workload and checker against a live cluster
// (package safety; see check.go):
//
//	ticketload check --addrs A,B,C --duration 10m --tickets 8 --prefix P
//
// Exit status: 0 ok, 1 the run failed, 2 bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/tckclk/tckclk/bench/internal/load"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	ticketd, etcd string
	clients       int
	duration      time.Duration
	warmup        time.Duration
	rounds        int
	fill          int
	jsonOut       bool
	wait          time.Duration
	awaitReady    bool
	snapshot      bool
	adminToken    string
	handoff       bool
	coalesce      int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check" {
		return runCheck(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("ticketload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.ticketd, "ticketd", "", "ticketd API URL")
	fs.StringVar(&o.etcd, "etcd", "", "etcd client endpoint HOST:PORT (compare mode)")
	fs.IntVar(&o.clients, "clients", 64, "concurrent clients")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured time per target per round")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured time before each measurement")
	fs.IntVar(&o.rounds, "rounds", 2, "alternating rounds per target (compare mode)")
	fs.IntVar(&o.fill, "fill", 0, "fill mode: grant this many distinct tickets")
	fs.BoolVar(&o.jsonOut, "json", false, "print results as JSON lines")
	fs.DurationVar(&o.wait, "wait", 30*time.Second, "how long to wait for the targets to be ready")
	fs.BoolVar(&o.awaitReady, "await-ready", false, "only wait for ticketd's /readyz and print how long it took")
	fs.BoolVar(&o.snapshot, "snapshot", false, "only take a snapshot (needs -admin-token-file) and print it")
	fs.StringVar(&o.adminToken, "admin-token-file", "", "admin token file (for -snapshot)")
	fs.IntVar(&o.coalesce, "coalesce", load.DefaultCoalesce, "ticketd: batches in flight of the coalescing client shared by all clients (POST /v1/batch); 0: one HTTP request per op")
	fs.BoolVar(&o.handoff, "handoff", false, "compare mode on one contended lock: ticketd Acquire vs etcd concurrency.Mutex.Lock")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "ticketload: unexpected argument %q\n", fs.Arg(0))
		return 2
	case o.ticketd == "":
		fmt.Fprintln(stderr, "ticketload: -ticketd URL is required")
		return 2
	case o.clients < 1 || o.rounds < 1 || o.duration <= 0:
		fmt.Fprintln(stderr, "ticketload: -clients, -rounds and -duration must be positive")
		return 2
	case o.coalesce < 0:
		fmt.Fprintln(stderr, "ticketload: -coalesce must be ≥ 0")
		return 2
	}
	var err error
	switch {
	case o.awaitReady:
		err = awaitReady(ctx, o, stdout)
	case o.snapshot:
		err = snapshot(ctx, o, stdout)
	case o.fill > 0:
		err = fill(ctx, o, stdout)
	default:
		err = compare(ctx, o, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ticketload: %v\n", err)
		return 1
	}
	return 0
}

func printJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(w, string(b))
}
