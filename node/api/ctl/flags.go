package ctl

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// globals are the flags every command takes, anywhere on the line.
type globals struct {
	addr, tokenFile, adminTokenFile, caFile, certFile, keyFile string
	json, version                                              bool
	timeout                                                    time.Duration
}

func (g *globals) bind(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "ticketd API address")
	fs.BoolFunc("json", "print JSON", boolInto(&g.json))
	fs.BoolFunc("version", "print the version", boolInto(&g.version))
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "client bearer token file")
	fs.StringVar(&g.adminTokenFile, "admin-token-file", g.adminTokenFile, "admin bearer token file")
	fs.StringVar(&g.caFile, "ca-file", g.caFile, "CA certificate for https")
	fs.StringVar(&g.certFile, "cert-file", g.certFile, "client certificate")
	fs.StringVar(&g.keyFile, "key-file", g.keyFile, "client key")
	fs.Func("timeout", "request timeout", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return errors.New("want a positive Go duration like 500ms or 10s")
		}
		g.timeout = d
		return nil
	})
}

func boolInto(p *bool) func(string) error {
	return func(s string) error {
		switch s {
		case "true":
			*p = true
		case "false":
			*p = false
		default:
			return errors.New("want true or false")
		}
		return nil
	}
}

// decimal is a flag holding an unsigned number in plain decimal, the
// wire's rule ("0" or a non-zero digit and digits), at most max.
type decimal struct {
	v    uint64
	set  bool
	max  uint64
	what string // the expected form, for the error
}

func (d *decimal) String() string { return strconv.FormatUint(d.v, 10) }

func (d *decimal) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(v, 10) != s || v > d.max {
		return fmt.Errorf("want %s", d.what)
	}
	d.v, d.set = v, true
	return nil
}

// describeFlagError says which flag and what form, without the flag
// package's wording ("invalid value "x" for flag -lease: ...").
func describeFlagError(err error) string {
	msg := err.Error()
	for _, p := range [][2]string{{"invalid value ", " for flag -"}, {"invalid boolean value ", " for -"}} {
		if rest, ok := strings.CutPrefix(msg, p[0]); ok {
			if val, rest, ok := strings.Cut(rest, p[1]); ok {
				name, why, _ := strings.Cut(rest, ": ")
				return "--" + name + " " + val + ": invalid value, " + why
			}
		}
	}
	for _, p := range []string{"flag provided but not defined: -", "flag needs an argument: -"} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return p + "-" + strings.TrimPrefix(rest, "-")
		}
	}
	return msg
}

// client builds the API client from the global flags.
func (g *globals) client(env Env, admin bool) (*client.Client, *http.Transport, error) {
	var opts []client.Option
	if g.tokenFile != "" {
		b, err := env.ReadSecret(g.tokenFile)
		if err != nil {
			return nil, nil, usagef("--token-file: %v", err)
		}
		opts = append(opts, client.WithToken(string(b)))
	}
	if g.adminTokenFile != "" {
		b, err := env.ReadSecret(g.adminTokenFile)
		if err != nil {
			return nil, nil, usagef("--admin-token-file: %v", err)
		}
		opts = append(opts, client.WithAdminToken(string(b)))
	} else if admin {
		return nil, nil, usagef("needs --admin-token-file (the server's api.admin_token_file)")
	}
	addrs, err := client.ParseAddrs(g.addr)
	if err != nil {
		return nil, nil, usagef("--addr: %v", err)
	}
	// An address whose host does not answer at all costs at most this
	// before the next is tried.
	dial := &net.Dialer{Timeout: min(dialTimeout, g.timeout), KeepAlive: 30 * time.Second}
	tr := &http.Transport{DialContext: dial.DialContext}
	if g.caFile != "" || g.certFile != "" || g.keyFile != "" {
		tc, err := g.tlsConfig()
		if err != nil {
			return nil, nil, err
		}
		tr.TLSClientConfig = tc
	}
	// One address: its answer at once, as the user asked that node. Several
	// (SPEC §4.1): the cluster is followed for up to --timeout, through an
	// election or a node's restart.
	failover := time.Duration(0)
	if len(addrs) > 1 {
		failover = g.timeout
	}
	opts = append(opts, client.WithHTTPClient(&http.Client{Transport: tr}), client.WithClock(env.Now), client.WithFailover(failover))
	c, err := client.New(g.addr, opts...)
	if err != nil {
		return nil, nil, usagef("--addr: %v", err)
	}
	return c, tr, nil
}

// dialTimeout bounds one connection attempt.
const dialTimeout = 3 * time.Second

func (g *globals) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.caFile != "" {
		pem, err := os.ReadFile(g.caFile)
		if err != nil {
			return nil, usagef("--ca-file: %v", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--ca-file: %s holds no PEM certificate", g.caFile)
		}
	}
	if g.certFile != "" || g.keyFile != "" {
		cert, err := tls.LoadX509KeyPair(g.certFile, g.keyFile)
		if err != nil {
			return nil, usagef("--cert-file/--key-file: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
