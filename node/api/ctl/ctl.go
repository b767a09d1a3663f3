package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// Env is what one run of ticketctl sees of its process.
type Env struct {
	Stdout, Stderr io.Writer
	// Stdin is what `run` gives its command (nil: nothing).
	Stdin io.Reader
	// Getenv is os.LookupEnv (TICKETCTL_ADDR, TICKETCTL_HOLDER).
	Getenv func(string) (string, bool)
	// Now is time.Now; its readings must carry a monotonic clock.
	Now func() time.Time
	// ReadSecret reads a bearer token file (the command passes a reader
	// that refuses group- or world-readable files).
	ReadSecret func(path string) ([]byte, error)
	// Version is what --version prints.
	Version string
}

// Exit codes of SPEC §8.
const (
	ExitOK         = 0
	ExitFailed     = 1 // the server refused, or could not be reached
	ExitUsage      = 2
	envAddr        = "TICKETCTL_ADDR"
	envHolder      = "TICKETCTL_HOLDER"
	maxLeaseS      = 250
	defaultTimeout = 10 * time.Second
)

const usage = `usage: ticketctl [global flags] COMMAND [ARGS] [flags]
       ticketctl --version | --help

commands:
  grant NAME --holder H --lease SECONDS     take a ticket (1..=250 s)
  renew NAME --token N --lease SECONDS      renew your ticket (needs --holder or TICKETCTL_HOLDER)
  release NAME --token N                    release your ticket (needs --holder or TICKETCTL_HOLDER)
  get NAME                                  show one ticket
  revoke NAME [--token N]                   revoke a ticket (admin token): its holder can no
                                            longer renew it; it frees at its server expiry
                                            (--token: only that grant; default: the one held now)
  list [--prefix P] [--limit N]             list tickets
  status                                    node status
  cluster                                   cluster members (admin token)
  cluster replace OLD --with NEW [--wait D] retire OLD, NEW takes its place; waits
                                            (default 60s, 0: not) until NEW is a voter
  cluster health [--wait D] [--voters N]    every voter and standby (gossip, clock, last
                                            Raft contact, log lag); exit 0 only when the
                                            cluster is healthy and tolerates the most
                                            failures its voters allow ((voters−1)/2) and
                                            has at least N voters; --wait: poll until then
                                            (client token; between nodes of a rolling restart)
  snapshot save FILE                        a backup of the cluster's state (admin token; SPEC §3.4):
                                            the leader's consistent snapshot, checked as it
                                            arrives (length, SHA-256), written to FILE atomically
                                            (mode 0600); ticketd restore --from-snapshot FILE
                                            builds a new cluster from it (--timeout bounds it)
  health                                    exit 0 only when --addr's /readyz answers 2xx
                                            (ticketd or tckclk-agent --http; container probes)
  wait NAME [--wait D]                      block until nobody holds the ticket
  watch NAME [--wait D]                     print the ticket at each change (until D, or ^C)
  run NAME --holder H --lease SECONDS [--wait D] [--grace D] -- CMD ARGS…
                                            hold the ticket while CMD runs (below)

global flags (anywhere on the line):
  --addr URL[,URL…]      ticketd API (default $TICKETCTL_ADDR or http://127.0.0.1:7980);
                         several: the nodes of a cluster, tried in turn for up to
                         --timeout when one cannot serve (down, no leader, not ready)
  --json                 print the server's JSON answer; grant and renew add the
                         local deadline (local_deadline_in_ms, local_deadline_unix_ms)
  --token-file F         client bearer token (api.token_file), mode 0600
  --admin-token-file F   admin bearer token (api.admin_token_file), for cluster, revoke and snapshot
  --ca-file F            CA for an https API; --cert-file F --key-file F: client certificate
  --timeout D            request timeout, a Go duration (default 10s)
  --version              print the version and exit

Numbers are plain decimal (no sign, leading zero or base prefix). Trust a
ticket until its local deadline only: ticketctl's send time + the lease ×
(1 − 500 ppm), never the server's expiry.

run: waits up to --wait (default: not at all) for the ticket, then runs CMD
with TICKET_NAME, TICKET_HOLDER, TICKET_TOKEN (the fencing token: send it
with every write) and TICKET_DEADLINE_UNIX_MS (the first local deadline) in
its environment, renewing at a third of the lease. When the local deadline
comes within --grace (less than half the lease; default 5s, or a quarter
of a lease under 20s) without a successful renew, or at once when a renew
is refused (the ticket was revoked, or is no longer ours), CMD's process
group gets SIGTERM, and SIGKILL shortly before the deadline, so it is gone
before anyone else can get the ticket.
The ticket is released when CMD exits.

exit status:
  0  ok
  1  the server refused (held, wrong token, revoked, not found, unavailable)
     or could not be reached
  2  bad usage
  run: CMD's exit status (128 + N when a signal N ended it), or 75 when the
     ticket could not be had or was lost while CMD ran
`

// Main runs ticketctl with args (without the program name) and returns its
// exit status.
func Main(ctx context.Context, args []string, env Env) int {
	g := &globals{addr: client.DefaultAddr, timeout: defaultTimeout}
	if v, ok := env.Getenv(envAddr); ok && v != "" {
		g.addr = v
	}
	gfs := flag.NewFlagSet("ticketctl", flag.ContinueOnError)
	gfs.SetOutput(io.Discard)
	g.bind(gfs)
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(env.Stdout, usage)
			return ExitOK
		}
		fmt.Fprintf(env.Stderr, "ticketctl: %s\n%s", describeFlagError(err), usage)
		return ExitUsage
	}
	if g.version {
		fmt.Fprintln(env.Stdout, env.Version)
		return ExitOK
	}
	if gfs.NArg() == 0 {
		fmt.Fprint(env.Stderr, usage)
		return ExitUsage
	}
	cmd, rest := gfs.Arg(0), gfs.Args()[1:]
	if cmd == "run" {
		return runMain(ctx, g, rest, env) // its own exit statuses: CMD's, 75
	}
	err := dispatch(ctx, g, cmd, rest, env)
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(env.Stdout, usage)
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "ticketctl %s: %v\n(ticketctl --help for usage)\n", cmd, err)
		return ExitUsage
	}
	var ce *client.Error
	if g.json && errors.As(err, &ce) {
		printJSON(env.Stdout, ce.ErrorBody)
	}
	fmt.Fprintf(env.Stderr, "ticketctl %s: %s\n", cmd, describeErr(err, g.addr))
	return ExitFailed
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }
