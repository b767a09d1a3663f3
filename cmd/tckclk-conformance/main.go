// Command tckclk-conformance runs the TCKCLK/2 conformance suite (SPEC §7)
// against a live agent and prints a table, JSON or JUnit XML:
//
//	tckclk-conformance --addr HOST:PORT --secret-file F [--format text|json|junit]
//	                   [--only ID,...] [--timeout 2s] [--dev]
//
// Exit status: 0 when no check failed (WARN allowed), 1 when one did or the
// report could not be written, 2 for bad usage (flags, secret).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tckclk/tckclk/conformance"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// run is the whole command; main only wires the process to it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env secret.Lookup) int {
	fs := flag.NewFlagSet("tckclk-conformance", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are written below, once
	addr := fs.String("addr", "", "the agent to test, HOST:PORT (required)")
	secretFile := fs.String("secret-file", "", "file holding the clock secret, mode 0600 or stricter (or set "+
		secret.EnvSecret+" or "+secret.EnvSecretFile+")")
	format := fs.String("format", string(conformance.FormatText), "output: text, json or junit")
	only := fs.String("only", "", "run only these check IDs, comma-separated (default: every check)")
	timeout := conformance.DefaultTimeout
	fs.Func("timeout", "deadline of one exchange, connect included", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("want a Go duration like 500ms or 2s")
		}
		timeout = d
		return nil
	})
	dev := fs.Bool("dev", false, "the agent is a --dev development reference: verify MACs with dev_key, and only with it")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "tckclk-conformance: "+format+"\n", a...)
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stderr)
			return exitOK
		}
		return fail("%s\n(tckclk-conformance --help for usage)", config.DescribeFlagError(err))
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("tckclk-conformance"))
		return exitOK
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q (every option is a flag; tckclk-conformance --help for usage)", fs.Arg(0))
	}
	if *addr == "" {
		return fail("--addr HOST:PORT is required")
	}
	f, err := conformance.ParseFormat(*format)
	if err != nil {
		return fail("--format: %v", err)
	}
	ids, err := splitIDs(*only)
	if err != nil {
		return fail("--only: %v", err)
	}
	sec, err := secret.LoadClock(env, *secretFile)
	if err != nil {
		return fail("%v", err)
	}
	cfg := conformance.DefaultConfig()
	cfg.Addr, cfg.Secret, cfg.Dev, cfg.Timeout, cfg.Only = *addr, sec.Bytes(), *dev, timeout, ids
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rep, err := conformance.Run(ctx, cfg)
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		return fail("--%s: %s", ce.Path, ce.Msg)
	case err != nil:
		return fail("%v", err)
	}
	if err := rep.Write(stdout, f); err != nil {
		fmt.Fprintf(stderr, "tckclk-conformance: writing the report: %v\n", err)
		return exitFail
	}
	if f != conformance.FormatText {
		fmt.Fprintln(stderr, rep.Summary())
	}
	if !rep.OK() {
		return exitFail
	}
	return exitOK
}

// splitIDs reads --only: IDs separated by commas, blanks around them ignored.
func splitIDs(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var ids []string
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			return nil, fmt.Errorf("an empty ID in %q", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage: tckclk-conformance --addr HOST:PORT --secret-file F [--format text|json|junit]
                          [--only ID,...] [--timeout 2s] [--dev]
       tckclk-conformance --version | --help

Runs the TCKCLK/2 conformance checks (SPEC §7) against a live agent and
prints one line per check: ID, SPEC section, result (PASS, FAIL, or WARN
for a SHOULD) and detail.

options:
  --addr HOST:PORT   the agent to test (required)
  --secret-file F    the clock secret, mode 0600 or stricter (or $%s / $%s)
  --format FORMAT    text, json or junit (default text)
  --only ID,...      run only these check IDs (default: every check)
  --timeout D        deadline of one exchange, connect included, %v..=%v (default %v)
  --dev              the agent is a --dev reference: verify MACs with dev_key, and only with it
  --version          print the version and exit
  -h, --help         print this help and exit

checks (SPEC section, level, requirement):
`, secret.EnvSecretFile, secret.EnvSecret, conformance.MinTimeout, conformance.MaxTimeout, conformance.DefaultTimeout)
	for _, c := range conformance.Catalogue() {
		fmt.Fprintf(w, "  %-6s §%s %-6s %s\n", c.ID, c.Section, c.Level, c.Requirement)
	}
	fmt.Fprint(w, `
exit status:
  0  no check failed (WARN allowed), or --help, --version
  1  a check failed, or the report could not be written
  2  bad usage: a flag, the secret
`)
}
