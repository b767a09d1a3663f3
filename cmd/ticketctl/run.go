package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/tckclk/tckclk/node/api/wire"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/api/client"
)

const usage = `usage: ticketctl [global flags] COMMAND [ARGS] [flags]

commands:
  grant NAME --holder H --lease SECONDS     take a ticket (1..=250 s)
  renew NAME --token N --lease SECONDS      renew your ticket (needs --holder or TICKETCTL_HOLDER)
  release NAME --token N                    release your ticket (needs --holder or TICKETCTL_HOLDER)
  get NAME                                  show one ticket
  list [--prefix P] [--limit N]             list tickets
  status                                    node status
  cluster                                   cluster members (admin token)

global flags (anywhere on the line):
  --addr URL             ticketd API (default $TICKETCTL_ADDR or http://127.0.0.1:7980)
  --json                 print the server's JSON answer
  --token-file F         client bearer token (api.token_file)
  --admin-token-file F   admin bearer token (api.admin_token_file), for cluster
  --ca-file F            CA for an https API; --cert-file F --key-file F: client certificate
  --timeout D            request timeout (default 10s)
`

type globals struct {
	addr, tokenFile, adminTokenFile, caFile, certFile, keyFile string
	json                                                       bool
	timeout                                                    time.Duration
}

func (g *globals) bind(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "ticketd API address")
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "client bearer token file")
	fs.StringVar(&g.adminTokenFile, "admin-token-file", g.adminTokenFile, "admin bearer token file")
	fs.StringVar(&g.caFile, "ca-file", g.caFile, "CA certificate for https")
	fs.StringVar(&g.certFile, "cert-file", g.certFile, "client certificate")
	fs.StringVar(&g.keyFile, "key-file", g.keyFile, "client key")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "request timeout")
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// env is os.LookupEnv; tests inject their own.
type env func(string) (string, bool)

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env, now func() time.Time) int {
	g := &globals{addr: client.DefaultAddr, timeout: 10 * time.Second}
	if v, ok := getenv("TICKETCTL_ADDR"); ok && v != "" {
		g.addr = v
	}
	gfs := flag.NewFlagSet("ticketctl", flag.ContinueOnError)
	gfs.SetOutput(io.Discard)
	g.bind(gfs)
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "ticketctl: %v\n%s", err, usage)
		return 2
	}
	if gfs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := gfs.Arg(0), gfs.Args()[1:]
	err := dispatch(ctx, g, cmd, rest, stdout, getenv, now)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "ticketctl %s: %v\n(ticketctl --help for usage)\n", cmd, err)
		return 2
	}
	var ce *client.Error
	if g.json && errors.As(err, &ce) {
		printJSON(stdout, ce.ErrorBody)
	}
	fmt.Fprintf(stderr, "ticketctl %s: %s\n", cmd, describeErr(err))
	return 1
}

func describeErr(err error) string {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	switch ce.ErrorBody.Error {
	case "held":
		return fmt.Sprintf("held by %q with token %d (%d)", ce.Holder, ce.Token, ce.StatusCode)
	case "unavailable":
		s := fmt.Sprintf("unavailable (%d): %s", ce.StatusCode, ce.Message)
		if ce.Stage != "" {
			s += " [stage " + ce.Stage + "]"
		}
		return s
	}
	return fmt.Sprintf("%s (%d): %s", ce.ErrorBody.Error, ce.StatusCode, ce.Message)
}

// parseCmd parses flags anywhere among the positional arguments.
func parseCmd(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func dispatch(ctx context.Context, g *globals, cmd string, args []string, out io.Writer, getenv env, now func() time.Time) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	g.bind(fs)
	holder := fs.String("holder", "", "holder")
	if v, ok := getenv("TICKETCTL_HOLDER"); ok {
		*holder = v
	}
	lease := fs.Int("lease", 0, "lease in seconds, 1..=250")
	tokenS := fs.String("token", "", "fencing token")
	prefix := fs.String("prefix", "", "name prefix")
	limit := fs.Int("limit", 0, "list at most N")
	var want []string // flags this command takes
	switch cmd {
	case "grant":
		want = []string{"holder", "lease"}
	case "renew":
		want = []string{"holder", "lease", "token"}
	case "release":
		want = []string{"holder", "token"}
	case "list":
		want = []string{"prefix", "limit"}
	case "get", "status", "cluster":
	case "help":
		return flag.ErrHelp
	default:
		return usagef("unknown command %q", cmd)
	}
	pos, err := parseCmd(fs, args)
	if err != nil {
		return err
	}
	var stray error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "holder", "lease", "token", "prefix", "limit":
			if !contains(want, f.Name) {
				stray = usagef("%s takes no --%s", cmd, f.Name)
			}
		}
	})
	if stray != nil {
		return stray
	}
	needName := cmd == "grant" || cmd == "renew" || cmd == "release" || cmd == "get"
	switch {
	case needName && len(pos) != 1:
		return usagef("needs exactly one ticket NAME, got %d arguments", len(pos))
	case !needName && len(pos) != 0:
		return usagef("takes no arguments, got %q", pos)
	}
	if contains(want, "holder") && *holder == "" {
		return usagef("needs --holder H (or TICKETCTL_HOLDER)")
	}
	if contains(want, "lease") && (*lease < 1 || *lease > 250) {
		return usagef("needs --lease SECONDS in 1..=250, got %d", *lease)
	}
	var token uint64
	if contains(want, "token") {
		if token, err = strconv.ParseUint(*tokenS, 10, 64); err != nil || token == 0 {
			return usagef("needs --token N (a positive integer), got %q", *tokenS)
		}
	}
	c, tr, err := g.client(cmd == "cluster")
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	p := printer{out: out, json: g.json, now: now}
	switch cmd {
	case "grant", "renew":
		var l *client.Lease
		if cmd == "grant" {
			l, err = c.Grant(ctx, pos[0], *holder, *lease)
		} else {
			l, err = c.Renew(ctx, pos[0], *holder, token, *lease)
		}
		if err == nil {
			p.lease(l)
		}
	case "release":
		var r *wire.Released
		if r, err = c.Release(ctx, pos[0], *holder, token); err == nil {
			p.released(r)
		}
	case "get":
		var t *wire.Ticket
		if t, err = c.Get(ctx, pos[0]); err == nil {
			p.tickets([]wire.Ticket{*t}, false, t)
		}
	case "list":
		var l *wire.TicketList
		if l, err = c.List(ctx, *prefix, *limit); err == nil {
			p.tickets(l.Tickets, l.Truncated, l)
		}
	case "status":
		var s *wire.Status
		if s, err = c.Status(ctx); err == nil {
			p.status(s)
		}
	case "cluster":
		var m *wire.Members
		if m, err = c.Members(ctx); err == nil {
			p.members(m)
		}
	}
	return err
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (g *globals) client(admin bool) (*client.Client, *http.Transport, error) {
	var opts []client.Option
	if g.tokenFile != "" {
		b, err := secret.ReadFileRaw(g.tokenFile)
		if err != nil {
			return nil, nil, usagef("--token-file: %v", err)
		}
		opts = append(opts, client.WithToken(string(b)))
	}
	if g.adminTokenFile != "" {
		b, err := secret.ReadFileRaw(g.adminTokenFile)
		if err != nil {
			return nil, nil, usagef("--admin-token-file: %v", err)
		}
		opts = append(opts, client.WithAdminToken(string(b)))
	} else if admin {
		return nil, nil, usagef("needs --admin-token-file (the server's api.admin_token_file)")
	}
	tr := &http.Transport{}
	if g.caFile != "" || g.certFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if g.caFile != "" {
			pem, err := os.ReadFile(g.caFile)
			if err != nil {
				return nil, nil, usagef("--ca-file: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, nil, usagef("--ca-file: %s holds no PEM certificate", g.caFile)
			}
		}
		if g.certFile != "" || g.keyFile != "" {
			cert, err := tls.LoadX509KeyPair(g.certFile, g.keyFile)
			if err != nil {
				return nil, nil, usagef("--cert-file/--key-file: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		tr.TLSClientConfig = tc
	}
	opts = append(opts, client.WithHTTPClient(&http.Client{Transport: tr}))
	c, err := client.New(g.addr, opts...)
	if err != nil {
		return nil, nil, usagef("--addr: %v", err)
	}
	return c, tr, nil
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
