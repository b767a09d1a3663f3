// Command ticketd runs a ticketing node (SPEC §4, §8):
//
//	ticketd --config ticketd.yaml [--data-dir D] [--http ADDR] [--print-config]
//
// With no config it runs a single node with data in ./ticketd-data and the
// API on 127.0.0.1:7980, trusting the host clock but watching it for
// rollbacks and steps; with clock.agent_addr(s) it proves its clock through
// TCKCLK/2 agents first (clock_check) and fails closed (SPEC §3). Every
// config key is also a flag (--clock.delta_ms 500), numbers in plain
// decimal; secrets come only from files or the environment. Exit status: 0
// ok, 1 runtime failure, 2 bad usage or configuration; a crash (a Go panic
// or fatal error) ends it by SIGABRT (crash.go).
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
	"syscall"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/version"
	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/ticket"
)

func main() {
	crashRestartable() // a panic kills it by SIGABRT, not the exit 2 of a refusal
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "recover" {
		return recoverCmd(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "restore" {
		return restoreCmd(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("ticketd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are written below, once
	configPath := fs.String("config", "", "ticketd.yaml")
	dataDir := fs.String("data-dir", "", "data directory (cluster.raft.data_dir)")
	httpAddr := fs.String("http", "", "API address (api.addr)")
	printConfig := fs.Bool("print-config", false, "print the effective configuration and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	pprofAddr := fs.String("debug.pprof", "", "serve net/http/pprof on this loopback HOST:PORT (profiling only)")
	keys := bindKeys(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(stderr, keys)
			return 0
		}
		fmt.Fprintf(stderr, "ticketd: %s\n(ticketd --help for usage)\n", config.DescribeFlagError(err))
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("ticketd"))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ticketd: unexpected argument %q (every option is a flag; ticketd --help for usage)\n", fs.Arg(0))
		return 2
	}
	load := func() (node.Config, error) {
		cfg := node.DefaultConfig()
		if *configPath != "" {
			data, err := os.ReadFile(*configPath)
			if err != nil {
				return cfg, fmt.Errorf("--config: %v", err)
			}
			if cfg, err = node.ParseConfig(data); err != nil {
				return cfg, fmt.Errorf("%s: %v", *configPath, err)
			}
		}
		if err := keys.Apply(&cfg); err != nil {
			return cfg, err
		}
		if *dataDir != "" {
			cfg.Cluster.Raft.DataDir = *dataDir
		}
		if *httpAddr != "" {
			cfg.API.Addr = *httpAddr
		}
		cfg.Normalize()
		return cfg, cfg.Validate()
	}
	cfg, err := load()
	if err != nil {
		fmt.Fprintf(stderr, "ticketd: %v\n", err)
		return 2
	}
	if *printConfig {
		out, err := cfg.YAML()
		if err != nil {
			fmt.Fprintf(stderr, "ticketd: %v\n", err)
			return 1
		}
		// Every check the start runs before it opens the data dir (secrets,
		// identity, trust map, TLS files): exit 0 only for a config that
		// starts. The config is printed either way, under a first line that
		// says why it would not start.
		status := 0
		if err := node.CheckConfig(cfg, nil); err != nil {
			fmt.Fprintf(stdout, "# NOT STARTABLE: %v\n", err)
			fmt.Fprintf(stderr, "ticketd: %v\n", err)
			status = 2
		}
		_, _ = stdout.Write(out)
		return status
	}
	log := newLogger(stderr, cfg.Log)
	if *pprofAddr != "" {
		_, stopPprof, err := startPprof(*pprofAddr, log)
		if err != nil {
			fmt.Fprintf(stderr, "ticketd: %v\n", err)
			return 2
		}
		defer stopPprof()
	}
	// SIGHUP re-reads the config and applies the trust map (cluster mode).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload, done := make(chan struct{}), make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-hup:
			case <-done:
				return
			}
			select {
			case reload <- struct{}{}:
			case <-done:
				return
			}
		}
	}()
	// Every file and directory the node creates is owner-only (SECURITY.md).
	syscall.Umask(0o077)
	deps := node.Deps{Logger: log, Reload: reload, ReloadConfig: load, Readiness: notifyReadiness(log)}
	if testFaults != nil {
		if err := testFaults(&deps, log); err != nil {
			fmt.Fprintf(stderr, "ticketd: %v\n", err)
			return 2
		}
	}
	if err := node.RunWith(ctx, cfg, deps); err != nil {
		fmt.Fprintf(stderr, "ticketd: %v\n", err)
		return exitCode(err)
	}
	log.Info("ticketd stopped")
	return 0
}

// testFaults is nil in ticketd. Only a test binary built with -tags
// tckclk_testfaults (testfaults.go) sets it: it reads the TCKCLK_TESTFAULT_*
// variables and injects a wall-clock offset or the broken expiry into deps,
// so the real-process safety scenarios can skew clocks and prove they catch
// a bug.
var testFaults func(*node.Deps, *slog.Logger) error

// bindKeys makes every key of ticketd.yaml a flag (SPEC §6).
func bindKeys(fs *flag.FlagSet) *config.KeyFlags {
	return config.BindKeys(fs, node.DefaultConfig(), config.BindOptions{Help: keyHelp})
}

// exitCode maps Run's error to 2 (configuration: the config contradicts
// itself, the environment or the data dir's Δ or node ID, or the data dir
// is retired — restarting cannot help) or 1 (runtime, including a clock
// that failed clock_check or FAILED later).
func exitCode(err error) int {
	var ce *config.Error
	var ie *node.IdentityError
	if errors.As(err, &ce) || errors.As(err, &ie) || errors.Is(err, ticket.ErrDeltaMismatch) || errors.Is(err, node.ErrRetired) {
		return 2
	}
	return 1
}

func newLogger(w io.Writer, c node.LogConfig) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
