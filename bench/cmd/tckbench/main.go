// Command tckbench is the performance report of issue 16 in one command:
// on loopback it starts ticketd and etcd (Debian's etcd-server), one node
// and three nodes each, fsync on for both, and drives them with
// bench/internal/load in alternating rounds:
//
//   - independent locks: 1, 16, 64 and 256 clients, each doing grant +
//     release cycles on its own name (etcd: one kept-alive session lease
//     per client, per cycle a TryLock txn put-if-absent + a delete, as its
//     concurrency package locks);
//   - contended: 64 clients on 4 names, TryGrant / TryLock (+ release when
//     acquired).
//
// For each target it measures cycles/s, p50/p99/p99.9 and the CPU seconds
// per 1,000 cycles of each server process (/proc/PID/stat), of the load
// generator and of the whole machine (/proc/stat), over exactly the
// measured window. It writes bench/report.md (tables, ratios ticketd/etcd,
// targets) with PNG plots beside it and report.json, and prints the
// summary. Every figure is a ratio measured in the same run.
//
// The other sections of issue 16 (items.go; -sections picks any of them,
// all by default): agent — the real agent vs a bare one-line TCP server
// (agentfloor.go); failover — the leader's clock going bad (a planned
// transfer, clockfailover.go) beside kill -9 of ticketd's and etcd's
// leaders (failover.go), -failover trials each; tightness — each node's
// running bound vs chrony's root distance with a real chronyd -x pair
// (tightness.go).
//
//	cd bench && go run ./cmd/tckbench                # defaults: about 6 minutes
//	go run ./cmd/tckbench -clients 64,256 -duration 20s -rounds 3 -nodes 3
//
// The load goes to each cluster's leader (found at start: etcd's
// Status, ticketd's /v1/status). Exit status: 0 ok, 1 the run failed, 2
// bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/bench/internal/load"
)

func main() {
	if addr := os.Getenv(bareEnv); addr != "" { // the agent section's bare server (agentfloor.go)
		if err := serveBare(addr, os.Getenv(bareLineEnv)); err != nil {
			fmt.Fprintf(os.Stderr, "tckbench bare server: %v\n", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	clients          []int
	nodes            []int
	contendedClients int
	contendedNames   int
	duration, warmup time.Duration
	rounds           int
	out              string
	repo             string
	etcd             string
	keep             bool
	ticketdFlags     []string
	only             string
	profile          string
	strace           bool
	straceAll        bool
	h2c              bool
	h2cCompare       bool
	failover         int
	items            itemOptions // the agent, failover and tightness sections (items.go)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tckbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	clients := fs.String("clients", "1,16,64,256", "client counts for the independent-locks workload (comma-separated)")
	nodes := fs.String("nodes", "1,3", "cluster sizes (comma-separated, each 1 or 3)")
	fs.IntVar(&o.contendedClients, "contended-clients", 64, "clients of the contended workload (0: skip it)")
	fs.IntVar(&o.contendedNames, "contended-names", 4, "names the contended clients share")
	fs.DurationVar(&o.duration, "duration", 6*time.Second, "measured time per target per round")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured time before each measurement")
	fs.IntVar(&o.rounds, "rounds", 2, "alternating rounds per workload")
	fs.StringVar(&o.out, "out", "report.md", "the report (PNG plots and report.json beside it)")
	fs.StringVar(&o.repo, "repo", "", "the TCKCLK repository root ticketd is built from (default: found above the working directory)")
	etcdBin, _ := exec.LookPath("etcd")
	fs.StringVar(&o.etcd, "etcd", etcdBin, "the etcd binary (Debian's etcd-server)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (data, keys, logs)")
	tflags := fs.String("ticketd-flags", "", "extra ticketd flags (space-separated), e.g. for an experiment")
	fs.StringVar(&o.only, "only", "", "run only this system (etcd or ticketd): for profiling, no ratios")
	fs.StringVar(&o.profile, "profile", "", "diagnostics: give each ticketd --debug.pprof and save the leader's CPU, block and mutex profiles of every window in this directory")
	fs.BoolVar(&o.strace, "strace", false, "diagnostics: count each leader's fsyncs per Raft entry with strace (slows the servers: not for the figures)")
	fs.BoolVar(&o.h2c, "h2c", false, "experiment: ticketd clients speak HTTP/2 without TLS (the ticketd built must accept h2c)")
	fs.BoolVar(&o.h2cCompare, "h2c-compare", false, "experiment: also measure each ticketd with h2c clients, beside the HTTP/1.1 ones")
	fs.IntVar(&o.failover, "failover", 3, "failover section: trials of each kind — clock FAILED, ticketd and etcd kill -9 (the issue's figure: 20; 0: none)")
	checkItems := addItemFlags(fs, &o.items)
	fs.BoolVar(&o.straceAll, "strace-all", false, "with -strace: trace every syscall and count them per cycle (slower still)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	err := checkItems()
	if err == nil {
		o.clients, err = ints("-clients", *clients)
	}
	if err == nil {
		o.nodes, err = ints("-nodes", *nodes)
	}
	for _, n := range o.nodes {
		if err == nil && n != 1 && n != 3 {
			err = fmt.Errorf("-nodes: %d: each size must be 1 or 3", n)
		}
	}
	switch {
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.failover < 0:
		err = errors.New("-failover must be ≥ 0")
	case o.rounds < 1 || o.duration <= 0 || o.warmup < 0:
		err = errors.New("-rounds and -duration must be positive, -warmup not negative")
	case o.contendedClients < 0 || (o.contendedClients > 0 && o.contendedNames < 1):
		err = errors.New("-contended-clients must be ≥ 0 and -contended-names ≥ 1")
	case o.only != "" && o.only != "etcd" && o.only != "ticketd":
		err = fmt.Errorf("-only: %q is neither etcd nor ticketd", o.only)
	case o.only != "ticketd" && o.etcd == "" && (o.items.on("load") || o.items.failoverOf("etcd")):
		err = errors.New("-etcd: no etcd binary on PATH; install Debian's etcd-server")
	}
	if err != nil {
		fmt.Fprintf(stderr, "tckbench: %v\n", err)
		return 2
	}
	if err == nil && o.repo == "" {
		o.repo, err = findRepo()
	}
	if err != nil {
		fmt.Fprintf(stderr, "tckbench: %v\n", err)
		return 2
	}
	if *tflags != "" {
		o.ticketdFlags = strings.Fields(*tflags)
	}
	if err := bench(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "tckbench: %v\n", err)
		return 1
	}
	return 0
}

// findRepo is the nearest directory at or above the working directory
// holding deploy/cluster-keys.sh and cmd/ticketd.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "cluster-keys.sh")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cmd", "ticketd")); err == nil {
				return dir, nil
			}
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("-repo: no TCKCLK repository (deploy/cluster-keys.sh, cmd/ticketd) above the working directory")
		}
		dir = up
	}
}

// ints parses a comma-separated list of positive integers.
func ints(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive integer", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// workload is one row group of the report.
type workload struct {
	name    string // "independent" or "contended"
	clients int
	mode    load.Mode
}

// measured is one target's pooled figures for one workload.
type measured struct {
	Workload string      `json:"workload"`
	Target   string      `json:"target"`
	System   string      `json:"system"`
	Nodes    int         `json:"nodes"`
	Result   load.Result `json:"result"`
	CPU      cpuUse      `json:"cpu"`
	Diag     *diag       `json:"diag,omitempty"`
	Leader   int         `json:"leader"` // index of the leader in CPU.Procs
}

func bench(ctx context.Context, o options, stdout, stderr io.Writer) error {
	dir, err := os.MkdirTemp("", "tckbench.")
	if err != nil {
		return err
	}
	e := &env{dir: dir, bin: filepath.Join(dir, "bin"), repo: o.repo, etcd: o.etcd}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		return err
	}
	defer func() {
		e.stopAll()
		if o.keep {
			fmt.Fprintf(stderr, "tckbench: data, keys and logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	if err := e.build(); err != nil {
		return err
	}
	meta := runMeta(o)
	fmt.Fprintf(stdout, "tckbench: %s\n", meta.Machine)
	fmt.Fprintf(stdout, "tckbench: starting servers (data in %s)\n", dir)
	var servers []*server
	for _, n := range o.nodes {
		if !o.items.on("load") && (n != 3 || o.failover == 0) {
			continue // without the load only the kill -9 failover needs these
		}
		for _, sys := range []string{"etcd", "ticketd"} {
			if (o.only != "" && o.only != sys) || (!o.items.on("load") && !o.items.failoverOf(sys)) {
				continue
			}
			var s *server
			var err error
			if sys == "etcd" {
				s, err = e.startEtcd(ctx, n)
			} else {
				s, err = e.startTicketd(ctx, n, o.ticketdFlags, o.profile != "")
			}
			if err != nil {
				return withLogs(err, e)
			}
			fmt.Fprintf(stdout, "tckbench: %s up, leader at %s\n", s.label, s.endpoint)
			servers = append(servers, s)
			if sys == "ticketd" && o.h2cCompare {
				h := *s
				h.label, h.system, h.h2c = s.label+" h2c", "ticketd-h2c", true
				servers = append(servers, &h)
			}
		}
	}
	var works []workload
	for _, c := range o.clients {
		if o.items.on("load") {
			works = append(works, workload{"independent", c, load.Independent})
		}
	}
	if o.contendedClients > 0 && o.items.on("load") {
		works = append(works, workload{"contended", o.contendedClients, load.Contended})
	}
	var all []measured
	for _, w := range works {
		ms, err := runWorkload(ctx, o, w, servers, stdout)
		if err != nil {
			return withLogs(err, e)
		}
		all = append(all, ms...)
	}
	var fos []failoverResult
	for _, s := range servers {
		if o.failover > 0 && s.nodes == 3 && !s.h2c && o.items.failoverOf(s.system) {
			fos = append(fos, failover(ctx, e, s, o.failover, stdout))
		}
	}
	e.stopAll() // the load clusters: idle, they would only add noise below
	items, err := runItems(ctx, e, o, stdout)
	if err != nil {
		return withLogs(err, e)
	}
	meta.LoadAfter = loadavg()
	if err := writeReport(o, meta, all, fos, items); err != nil {
		return err
	}
	printSummary(stdout, o, all, fos, items)
	fmt.Fprintf(stdout, "tckbench: wrote %s\n", o.out)
	return nil
}

// runWorkload measures every server for w in alternating rounds and
// pools each one's rounds.
func runWorkload(ctx context.Context, o options, w workload, servers []*server, stdout io.Writer) ([]measured, error) {
	cyclers := make([]load.Cycler, len(servers))
	defer func() {
		for _, c := range cyclers {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i, s := range servers {
		c, err := cyclerFor(ctx, s, w, o.contendedNames, o.h2c || s.h2c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.label, err)
		}
		cyclers[i] = c
	}
	pooled := make([]measured, len(servers))
	var lat = make([][]time.Duration, len(servers))
	for round := 1; round <= o.rounds; round++ {
		for i, s := range servers {
			var pids []int
			for _, p := range s.procs {
				pids = append(pids, p.pid())
			}
			var use cpuUse
			var werr error
			var d diag
			diagnose := o.strace || (o.profile != "" && s.system == "ticketd")
			window := func() func() {
				endDiag := func() error { return nil }
				if diagnose {
					tag := fmt.Sprintf("%s-%d-%s%d-r%d", w.name, w.clients, s.system, s.nodes, round)
					endDiag = startDiag(ctx, o, s, tag, &d)
				}
				a, err := sampleCPU(pids)
				if err != nil {
					werr = err
					return func() {}
				}
				return func() {
					b, err := sampleCPU(pids)
					if err != nil {
						werr = err
						return
					}
					use.add(a, b)
					werr = endDiag()
				}
			}
			r := load.Measure(ctx, s.label, cyclers[i], w.clients, o.warmup, o.duration, window)
			if werr != nil {
				return nil, fmt.Errorf("%s: CPU counters or diagnostics: %w", s.label, werr)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fmt.Fprintf(stdout, "%-11s %3d clients round %d  %-10s %8.1f cycles/s  p50 %7.2f  p99 %7.2f  p99.9 %7.2f ms  server %.3f s/1k  errors %d %s\n",
				w.name, w.clients, round, s.label, r.CyclesPerS, r.P50Ms, r.P99Ms, r.P999Ms, 1000*use.server()/float64(max(r.Cycles, 1)), r.Errors, r.FirstError)
			p := &pooled[i]
			if diagnose {
				if p.Diag == nil {
					p.Diag = &diag{}
				}
				p.Diag.Fsyncs += d.Fsyncs
				p.Diag.Entries += d.Entries
				p.Diag.Profiles = append(p.Diag.Profiles, d.Profiles...)
				p.Diag.Strace += d.Strace
				p.Diag.Syscalls += d.Syscalls
				if p.Diag.Fsyncs > 0 {
					p.Diag.EntriesPerSyn = float64(p.Diag.Entries) / float64(p.Diag.Fsyncs)
				}
				fmt.Fprintf(stdout, "            diagnostics: %d Raft entries, %d fsyncs on the leader (%.2f entries per fsync), %d syscalls (%.1f per cycle), %d profiles\n",
					d.Entries, d.Fsyncs, d.EntriesPerSyn, d.Syscalls, float64(d.Syscalls)/float64(max(r.Cycles, 1)), len(d.Profiles))
			}
			p.Workload, p.Target, p.System, p.Nodes, p.Leader = w.name, s.label, s.system, s.nodes, s.leader
			lat[i] = append(lat[i], r.Measurement...)
			p.Result.Seconds += r.Seconds
			p.Result.Errors += r.Errors
			p.Result.Acquired += r.Acquired
			if p.Result.FirstError == "" {
				p.Result.FirstError = r.FirstError
			}
			p.CPU.add(cpuSample{procs: make([]float64, len(use.Procs))}, cpuSample{procs: use.Procs, self: use.Client, busy: use.Busy, total: use.Total})
		}
	}
	for i := range pooled {
		p := &pooled[i]
		acq, secs, errs, first := p.Result.Acquired, p.Result.Seconds, p.Result.Errors, p.Result.FirstError
		p.Result = load.Summarize(p.Target, w.clients, lat[i], secs, errs)
		p.Result.Acquired, p.Result.FirstError = acq, first
		p.Result.Measurement = nil
		if p.Result.Cycles == 0 {
			return nil, fmt.Errorf("%s, %s %d clients: no completed cycles: %s", p.Target, w.name, w.clients, first)
		}
	}
	return pooled, nil
}

func cyclerFor(ctx context.Context, s *server, w workload, names int, h2c bool) (load.Cycler, error) {
	if s.system == "etcd" {
		return load.NewEtcd(ctx, []string{s.endpoint}, w.clients, 30*time.Second, w.mode, names)
	}
	t, err := load.NewTicketd(s.endpoint, w.clients, h2c)
	if err != nil {
		return nil, err
	}
	if err := t.Ready(ctx, 30*time.Second); err != nil {
		t.Close()
		return nil, err
	}
	if w.mode == load.Contended {
		return load.TicketdContended{Ticketd: t, Names: names}, nil
	}
	return t, nil
}

// withLogs appends the tail of every server log to err.
func withLogs(err error, e *env) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%v", err)
	for _, p := range e.procs {
		data, _ := os.ReadFile(p.log)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "\n--- %s (%s):\n%s", p.name, p.log, strings.Join(lines[max(0, len(lines)-5):], "\n"))
	}
	return errors.New(b.String())
}

// meta describes the run: machine, versions, load.
type meta struct {
	Machine    string `json:"machine"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	Started    string `json:"started"`
	Args       string `json:"args"`
}

func runMeta(o options) meta {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, cpu, _ = strings.Cut(l, ": ")
				break
			}
		}
	}
	ev := "no etcd"
	if o.etcd != "" {
		if out, err := exec.Command(o.etcd, "--version").Output(); err == nil {
			ev, _, _ = strings.Cut(string(out), "\n")
		}
	}
	gv, _ := exec.Command("go", "version").Output()
	return meta{
		Machine:    fmt.Sprintf("%s, %d CPUs (%s), %s, %s", hostKernel(), numCPU(), cpu, ev, strings.TrimSpace(string(gv))),
		LoadBefore: loadavg(),
		Started:    time.Now().UTC().Format(time.RFC3339),
		Args:       strings.Join(os.Args[1:], " "),
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func hostKernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return "Linux " + strings.TrimSpace(string(b))
}
