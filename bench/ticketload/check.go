package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/safety"
	"github.com/tckclk/tckclk/safety/workload"
)

// checkUsage is the check mode's help text.
const checkUsage = `ticketload check --addrs A,B,C [--duration 10m] [--tickets 8] [--prefix P]

Runs the safety workload against a live cluster (clients grant, renew and
release a few hot and many cold tickets named P..., write to an in-memory
fencing register with each grant's token) and checks the history: a
porcupine model per ticket, no two holders at once by their client-side
deadlines, tokens increasing, no stale write accepted, no expiry moved
except by Renew. Prints ops checked, unknown outcomes and violations; on a
violation writes porcupine's HTML and the history JSON (--out) and exits 1.
`

var prefixGrammar = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,100}$`)

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ticketload check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage); fs.PrintDefaults() }
	addrs := fs.String("addrs", "", "comma-separated ticketd API addresses (every node of the cluster)")
	duration := fs.Duration("duration", time.Minute, "how long the workload runs")
	tickets := fs.Int("tickets", 8, "tickets used (a quarter of them hot, at least one)")
	prefix := fs.String("prefix", "", "ticket name prefix (default safety-check-<unix time>-), keeps the check's tickets apart from real ones")
	clients := fs.Int("clients", 6, "concurrent clients")
	lease := fs.Int("lease", 2, "lease asked for, seconds (1..=250)")
	seed := fs.Uint64("seed", 0, "seed of the clients' choices (0: from the clock)")
	out := fs.String("out", "", "directory for the HTML and JSON written on a violation (default a new temporary directory)")
	timeout := fs.Duration("check-timeout", time.Minute, "porcupine's search limit per ticket (running out is a failure)")
	tokenFile := fs.String("token-file", "", "API bearer token file, if the cluster requires one")
	rotate := fs.Duration("rotate", 30*time.Second, "move to fresh tickets this often, so each ticket's history stays small enough to check (0: never)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *prefix == "" {
		*prefix = fmt.Sprintf("safety-check-%d-", time.Now().Unix())
	}
	var list []string
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "ticketload check: unexpected argument %q\n", fs.Arg(0))
		return 2
	case len(list) == 0:
		fmt.Fprintln(stderr, "ticketload check: --addrs is required")
		return 2
	case *duration <= 0 || *tickets < 1 || *clients < 1:
		fmt.Fprintln(stderr, "ticketload check: --duration, --tickets and --clients must be positive")
		return 2
	case *lease < 1 || *lease > 250:
		fmt.Fprintf(stderr, "ticketload check: --lease %d is not 1..=250\n", *lease)
		return 2
	case !prefixGrammar.MatchString(*prefix):
		fmt.Fprintf(stderr, "ticketload check: --prefix %q: a ticket name is [A-Za-z0-9][A-Za-z0-9._:-]*\n", *prefix)
		return 2
	}
	var opts []client.Option
	if *tokenFile != "" {
		tok, err := secret.ReadFileRaw(*tokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "ticketload check: --token-file: %v\n", err)
			return 2
		}
		opts = append(opts, client.WithToken(string(tok)))
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	opts = append(opts, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
	var targets []workload.Target
	for _, a := range list {
		c, err := client.New(a, opts...)
		if err != nil {
			fmt.Fprintf(stderr, "ticketload check: --addrs: %v\n", err)
			return 2
		}
		targets = append(targets, workload.Target{Name: a, Client: c})
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	wc := workload.Config{Targets: targets, Clients: *clients, LeaseS: *lease, Seed: *seed, Prefix: *prefix, Rotate: *rotate}
	res, err := check(ctx, wc, *duration, *tickets, safety.Config{OutDir: *out, Timeout: *timeout}, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "ticketload check: %v\n", err)
		return 1
	}
	if !res.OK() {
		return 1
	}
	return 0
}

func check(ctx context.Context, wc workload.Config, d time.Duration, tickets int, cc safety.Config, stdout io.Writer) (*safety.Result, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := wc.Targets[0].Client.Status(sctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", wc.Targets[0].Name, err)
	}
	wc.Hot = max(1, tickets/4)
	wc.Cold = max(1, tickets-wc.Hot)
	h := safety.NewHistory(st.DeltaMs)
	w, err := workload.New(wc, h)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "check: %d nodes, Δ %d ms, %d clients, %d hot + %d cold tickets named %s*, lease %d s, seed %d, for %v\n",
		len(wc.Targets), st.DeltaMs, wc.Clients, wc.Hot, wc.Cold, wc.Prefix, wc.LeaseS, wc.Seed, d)
	rctx, cancel := context.WithTimeout(ctx, d)
	w.Run(rctx)
	cancel()
	res, err := safety.Check(h, cc)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(stdout, res.Summary())
	for _, v := range res.Violations {
		fmt.Fprintln(stdout, "violation:", v)
	}
	return res, nil
}
