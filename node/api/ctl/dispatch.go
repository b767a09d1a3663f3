package ctl

import (
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// takes lists the flags of each command beyond the globals.
var takes = map[string][]string{
	"grant":    {"holder", "lease"},
	"renew":    {"holder", "lease", "token"},
	"release":  {"holder", "token"},
	"list":     {"prefix", "limit"},
	"get":      nil,
	"status":   nil,
	"cluster":  {"with", "wait", "voters"}, // cluster replace OLD --with NEW [--wait D] | cluster health [--wait D] [--voters N]
	"health":   nil,
	"wait":     {"wait"},
	"watch":    {"wait"},
	"run":      nil, // parsed by parseRun (run.go)
	"revoke":   {"token"},
	"snapshot": nil, // snapshot save FILE
}

// args is a parsed command line of one command.
type args struct {
	name, holder, prefix string
	lease, limit         int
	token                uint64
	wait                 time.Duration
	replace              *replaceArgs // cluster replace (replace.go)
	health               *healthArgs  // cluster health (health.go)
	file                 string       // snapshot save FILE (snapshot.go)
}

// parseCmd parses flags anywhere among the positional arguments.
func parseCmd(fs *flag.FlagSet, argv []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(argv); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s", describeFlagError(err))
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		argv = fs.Args()[1:]
	}
}

// parseArgs checks one command's flags and arguments.
func parseArgs(g *globals, cmd string, argv []string, env Env) (args, error) {
	want, known := takes[cmd]
	switch {
	case cmd == "help":
		return args{}, flag.ErrHelp
	case !known:
		return args{}, usagef("unknown command %q", cmd)
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	g.bind(fs)
	var a args
	if v, ok := env.Getenv(envHolder); ok {
		a.holder = v
	}
	fs.StringVar(&a.holder, "holder", a.holder, "holder")
	lease := &decimal{max: 1<<31 - 1, what: "whole seconds in plain decimal, 1..=250"}
	fs.Var(lease, "lease", "lease in seconds, 1..=250")
	tokenS := fs.String("token", "", "fencing token")
	fs.StringVar(&a.prefix, "prefix", "", "name prefix")
	limit := &decimal{max: 1<<31 - 1, what: "a count in plain decimal"}
	fs.Var(limit, "limit", "list at most N")
	fs.Func("wait", "how long at most", durationInto(&a.wait, true))
	voters := &decimal{max: 255, what: "a count of voters in plain decimal"}
	fs.Var(voters, "voters", "cluster health: at least N voters")
	ra := bindReplace(fs) // --with; --wait is the one above
	pos, err := parseCmd(fs, argv)
	if err != nil {
		return a, err
	}
	var stray error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "holder", "lease", "token", "prefix", "limit", "with", "wait", "voters":
			if !slices.Contains(want, f.Name) {
				stray = usagef("%s takes no --%s", cmd, f.Name)
			}
		}
	})
	if stray != nil {
		return a, stray
	}
	needName := cmd == "grant" || cmd == "renew" || cmd == "release" || cmd == "get" || cmd == "wait" || cmd == "watch" || cmd == "revoke"
	switch {
	case cmd == "cluster" && len(pos) > 0 && pos[0] == "health":
		switch {
		case len(pos) != 1:
			return a, usagef("cluster health takes no arguments, got %q", pos[1:])
		case ra.withSet:
			return a, usagef("cluster health takes no --with")
		}
		a.health = &healthArgs{wait: a.wait, voters: int(voters.v)}
	case cmd == "cluster" && voters.set:
		return a, usagef("cluster takes --voters only after health")
	case cmd == "cluster" && (ra.set(fs) || len(pos) > 0):
		if a.replace, err = ra.check(pos, a.wait); err != nil {
			return a, err
		}
	case cmd == "snapshot":
		if a.file, err = snapshotArgs(pos); err != nil {
			return a, err
		}
	case needName && len(pos) != 1:
		return a, usagef("needs exactly one ticket NAME, got %d arguments", len(pos))
	case !needName && len(pos) != 0:
		return a, usagef("takes no arguments, got %q", pos)
	case needName:
		a.name = pos[0]
	}
	if slices.Contains(want, "holder") && a.holder == "" {
		return a, usagef("needs --holder H (or %s)", envHolder)
	}
	a.lease, a.limit = int(lease.v), int(limit.v)
	if slices.Contains(want, "lease") && (a.lease < 1 || a.lease > maxLeaseS) {
		return a, usagef("needs --lease SECONDS in 1..=%d, got %d", maxLeaseS, a.lease)
	}
	if slices.Contains(want, "token") && (cmd != "revoke" || *tokenS != "") { // revoke: optional
		tok := &decimal{max: 1<<64 - 1}
		if tok.Set(*tokenS) != nil || tok.v == 0 {
			return a, usagef("needs --token N (a positive integer in plain decimal), got %q", *tokenS)
		}
		a.token = tok.v
	}
	return a, nil
}

// revoke revokes name's grant with token; without one, the grant Get
// finds, so a repeat after a lost answer can never revoke a later grant
// (client.Revoke sends a token-bound revoke again).
func revoke(ctx context.Context, c *client.Client, name string, token uint64) (*wire.Ticket, error) {
	if token == 0 {
		t, err := c.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		token = t.Token
	}
	return c.Revoke(ctx, name, token)
}

// dispatch runs one command and prints its answer.
func dispatch(ctx context.Context, g *globals, cmd string, argv []string, env Env) error {
	a, err := parseArgs(g, cmd, argv, env)
	if err != nil {
		return err
	}
	c, tr, err := g.client(env, cmd == "cluster" && a.health == nil || cmd == "revoke" || cmd == "snapshot")
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	p := printer{out: env.Stdout, json: g.json, now: env.Now}
	switch {
	case cmd == "wait": // bounded by --wait, not --timeout
		return waitFree(ctx, c, a, p)
	case cmd == "watch":
		return watchPrint(ctx, c, a, p)
	case a.health != nil: // each request bounded by --timeout, the whole by --wait
		return clusterHealth(ctx, c, g, a.health, p, env.Stderr)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	switch cmd {
	case "grant", "renew":
		var l *client.Lease
		if cmd == "grant" {
			l, err = c.Grant(ctx, a.name, a.holder, a.lease)
		} else {
			l, err = c.Renew(ctx, a.name, a.holder, a.token, a.lease)
		}
		if err == nil {
			p.lease(l)
		}
	case "release":
		var r *wire.Released
		if r, err = c.Release(ctx, a.name, a.holder, a.token); err == nil {
			p.released(r)
		}
	case "get":
		var t *wire.Ticket
		if t, err = c.Get(ctx, a.name); err == nil {
			p.tickets([]wire.Ticket{*t}, false, t)
		}
	case "revoke":
		var t *wire.Ticket
		if t, err = revoke(ctx, c, a.name, a.token); err == nil {
			p.revoked(t)
		}
	case "list":
		var l *wire.TicketList
		if l, err = c.List(ctx, a.prefix, a.limit); err == nil {
			p.tickets(l.Tickets, l.Truncated, l)
		}
	case "status":
		var s *wire.Status
		if s, err = c.Status(ctx); err == nil {
			p.status(s)
		}
	case "cluster":
		if a.replace != nil {
			cancel() // replace bounds each call by --timeout and the wait by --wait
			return replace(context.WithoutCancel(ctx), c, g.timeout, a.replace, p)
		}
		var m *wire.Members
		if m, err = c.Members(ctx); err == nil {
			p.members(m)
		}
	case "snapshot":
		err = saveBackup(ctx, c, a.file, p)
	case "health":
		var body []byte
		if body, err = c.Probe(ctx, "/readyz"); err == nil {
			p.probe(body)
		}
	}
	return err
}
