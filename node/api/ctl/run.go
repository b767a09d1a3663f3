package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// ExitLost is run's exit status when the ticket could not be had or was
// lost while CMD ran (EX_TEMPFAIL: try again later).
const ExitLost = 75

// Defaults of run.
const (
	// defaultGrace is --grace when none is given, or a quarter of the
	// lease when that is less (always under half the lease, as --grace
	// must be).
	defaultGrace = 5 * time.Second
	// maxKillMargin bounds how long before the local deadline run sends
	// SIGKILL (grace/4 when that is less): the group is gone before anyone
	// else can be granted the ticket.
	maxKillMargin = time.Second
	releaseWait   = 5 * time.Second
)

// runArgs is the parsed command line of run.
type runArgs struct {
	name, holder string
	lease        int
	wait, grace  time.Duration
	graceScaled  bool     // no --grace: a quarter of a lease under 20 s
	argv         []string // CMD ARGS…
}

// parseRun reads `run NAME --holder H --lease S [--wait D] [--grace D] -- CMD ARGS…`.
func parseRun(g *globals, argv []string, env Env) (runArgs, error) {
	var a runArgs
	i := slices.Index(argv, "--")
	if i < 0 {
		return a, usagef("needs -- before the command to run: run NAME --holder H --lease S [--wait D] [--grace D] -- CMD ARGS…")
	}
	a.argv = argv[i+1:]
	if len(a.argv) == 0 {
		return a, usagef("needs a command after --")
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	g.bind(fs)
	if v, ok := env.Getenv(envHolder); ok {
		a.holder = v
	}
	fs.StringVar(&a.holder, "holder", a.holder, "holder")
	lease := &decimal{max: 1<<31 - 1, what: "whole seconds in plain decimal, 1..=250"}
	fs.Var(lease, "lease", "lease in seconds")
	a.grace = -1 // not given
	fs.Func("wait", "how long to wait for the ticket", durationInto(&a.wait, true))
	fs.Func("grace", "SIGTERM this long before the local deadline", durationInto(&a.grace, false))
	pos, err := parseCmd(fs, argv[:i])
	if err != nil {
		return a, err
	}
	if len(pos) != 1 {
		return a, usagef("needs exactly one ticket NAME before --, got %d arguments", len(pos))
	}
	a.name, a.lease = pos[0], int(lease.v)
	if a.grace < 0 {
		a.grace = min(defaultGrace, time.Duration(a.lease)*time.Second/4)
		a.graceScaled = a.grace < defaultGrace
	}
	switch {
	case a.holder == "":
		return a, usagef("needs --holder H (or %s)", envHolder)
	case a.lease < 1 || a.lease > maxLeaseS:
		return a, usagef("needs --lease SECONDS in 1..=%d, got %d", maxLeaseS, a.lease)
	case a.wait > client.MaxWait:
		return a, usagef("--wait %v: at most %v", a.wait, client.MaxWait)
	case a.grace >= time.Duration(a.lease)*time.Second/2:
		return a, usagef("--grace %v: must be less than half the lease (%v); without --grace it is %v, or a quarter of a shorter lease",
			a.grace, time.Duration(a.lease)*time.Second/2, defaultGrace)
	}
	return a, nil
}

func durationInto(p *time.Duration, zeroOK bool) func(string) error {
	return func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || (d == 0 && !zeroOK) {
			return errors.New("want a positive Go duration like 500ms or 60s")
		}
		*p = d
		return nil
	}
}

// runMain is `ticketctl run`: it holds the ticket while CMD runs and
// returns CMD's exit status, ExitLost when the ticket could not be had or
// was lost, or ExitUsage.
func runMain(ctx context.Context, g *globals, argv []string, env Env) int {
	a, err := parseRun(g, argv, env)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(env.Stdout, usage)
			return ExitOK
		}
		fmt.Fprintf(env.Stderr, "ticketctl run: %v\n(ticketctl --help for usage)\n", err)
		return ExitUsage
	}
	c, tr, err := g.client(env, false)
	if err != nil {
		fmt.Fprintf(env.Stderr, "ticketctl run: %v\n", err)
		return ExitUsage
	}
	if a.graceScaled {
		fmt.Fprintf(env.Stderr, "ticketctl run: grace %v (a quarter of the %ds lease; --grace to choose): SIGTERM that long before the local deadline\n", a.grace, a.lease)
	}
	defer tr.CloseIdleConnections()

	l, err := acquireFor(ctx, c, a, g.timeout)
	if err != nil {
		fmt.Fprintf(env.Stderr, "ticketctl run: could not get ticket %q%s\n", a.name, whyNotAcquired(c, a, err, g))
		return ExitLost
	}
	s := c.SessionFor(l, a.lease)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), releaseWait)
		defer cancel()
		if err := s.Close(rctx); err != nil {
			fmt.Fprintf(env.Stderr, "ticketctl run: releasing %q (token %d): %s; it expires with its lease\n", a.name, l.Token, describeErr(err, g.addr))
		}
	}()

	cmd := exec.Command(a.argv[0], a.argv[1:]...)
	wallDeadline := env.Now().Add(time.Until(l.Deadline)).Round(0)
	cmd.Env = append(os.Environ(),
		"TICKET_NAME="+a.name, "TICKET_HOLDER="+a.holder,
		"TICKET_TOKEN="+strconv.FormatUint(l.Token, 10),
		"TICKET_DEADLINE_UNIX_MS="+strconv.FormatInt(wallDeadline.UnixMilli(), 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = env.Stdin, env.Stdout, env.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(env.Stderr, "ticketctl run: starting %s: %v\n", a.argv[0], err)
		return ExitFailed
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	status, lost := supervise(ctx, s, cmd.Process.Pid, a.grace, exited, env)
	if lost {
		fmt.Fprintf(env.Stderr, "ticketctl run: lost ticket %q (token %d): %v\n", a.name, l.Token, s.Err())
		return ExitLost
	}
	return status
}

// acquireFor gets the ticket: at once without --wait, else waiting on
// the server for up to --wait.
func acquireFor(ctx context.Context, c *client.Client, a runArgs, timeout time.Duration) (*client.Lease, error) {
	if a.wait == 0 {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return c.TryGrant(ctx, a.name, a.holder, a.lease)
	}
	ctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()
	return c.Acquire(ctx, a.name, a.holder, a.lease)
}

// whyNotAcquired says why acquireFor gave up: the server's answer, or —
// when --wait passed — how long it waited and who holds the ticket now.
func whyNotAcquired(c *client.Client, a runArgs, err error, g *globals) string {
	if a.wait == 0 || !(errors.Is(err, client.ErrHeld) || errors.Is(err, context.DeadlineExceeded)) {
		return ": " + describeErr(err, g.addr)
	}
	s := fmt.Sprintf(" within --wait %v", a.wait)
	var ce *client.Error
	if errors.As(err, &ce) {
		return s + ": " + describeErr(err, g.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	switch t, gerr := c.Get(ctx, a.name); {
	case gerr == nil:
		return s + fmt.Sprintf(": held by %q with token %d", t.Holder, t.Token)
	case errors.Is(gerr, client.ErrNotFound):
		return s + ": nobody holds it now; try again"
	default:
		return s + ": " + describeErr(err, g.addr)
	}
}

// killMargin is how long before the deadline the group gets SIGKILL.
func killMargin(grace time.Duration) time.Duration { return min(grace/4, maxKillMargin) }

// supervise waits for CMD while the session holds. When the local
// deadline comes within grace without a successful renew, or the session
// is lost, or ctx ends (ticketctl itself was told to stop), CMD's process
// group gets SIGTERM, and SIGKILL at the deadline minus killMargin (or
// after grace, whichever is first). It returns CMD's exit status and
// whether the ticket was lost while CMD ran.
func supervise(ctx context.Context, s *client.Session, pgid int, grace time.Duration, exited <-chan error, env Env) (int, bool) {
	var (
		termed bool
		lost   bool
		killAt time.Time
		sdone  = s.Done()
		stop   = ctx.Done()
	)
	term := func(why string) {
		if termed {
			return
		}
		termed = true
		fmt.Fprintf(env.Stderr, "ticketctl run: %s: SIGTERM to the command's process group\n", why)
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		killAt = earlier(time.Now().Add(grace), s.Deadline().Add(-killMargin(grace)))
	}
	for {
		var wake time.Duration
		if termed {
			wake = time.Until(killAt)
		} else {
			wake = time.Until(s.Deadline().Add(-grace))
		}
		t := time.NewTimer(max(wake, 0))
		var err error
		done := false
		select {
		case err = <-exited:
			done = true
		case <-sdone:
			sdone, lost = nil, true
			if errors.Is(s.Err(), client.ErrRevoked) {
				term("the ticket was revoked by an administrator")
			} else {
				term("the ticket was lost")
			}
		case <-stop:
			stop = nil
			term("stopping")
		case <-t.C:
		}
		t.Stop()
		if done {
			if lost || termed {
				// Nothing of the group may go on using the token.
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			return exitStatus(err), lost
		}
		now := time.Now()
		switch {
		case termed && !now.Before(killAt):
			fmt.Fprintf(env.Stderr, "ticketctl run: the command outlived SIGTERM: SIGKILL to its process group\n")
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			killAt = now.Add(time.Hour) // once; wait for the exit
		case !termed && !now.Before(s.Deadline().Add(-grace)):
			lost = true
			term(fmt.Sprintf("no successful renew and the local deadline is %v away", time.Until(s.Deadline()).Round(time.Millisecond)))
		}
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// exitStatus is CMD's exit status; killed by a signal, 128 + the signal.
func exitStatus(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return ExitFailed
}
