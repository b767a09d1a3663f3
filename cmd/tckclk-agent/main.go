// Command tckclk-agent is the TCKCLK/2 clock agent (SPEC §2, §8): flags and
// agent.yaml → agent.Config → agent.Run. Every key of agent.yaml is a flag
// too (numbers in plain decimal). Exit status 0 ok, 1 runtime failure, 2
// bad usage, configuration or secret.
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

	"github.com/tckclk/tckclk/agent"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/internal/version"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func run(ctx context.Context, args []string, stdout, stderr io.Writer, env secret.Lookup) int {
	fs := flag.NewFlagSet("tckclk-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are written below, once
	var (
		cfgPath  = fs.String("config", "", "agent.yaml (strict: unknown keys are errors); flags override it")
		listen   = fs.String("listen", agent.DefaultListen, "TCKCLK/2 TCP address (a trusted private network: the MAC gives integrity, not secrecy)")
		httpAddr = fs.String("http", agent.DefaultHTTP, "ops HTTP address: /metrics /livez /readyz /v1/status")
		secFile  = fs.String("secret-file", "", "secret file, mode 0600, ≥ 32 bytes (or $"+secret.EnvSecret+" / $"+secret.EnvSecretFile+")")
		ntp      listFlag
		chrony   = fs.String("chrony", "", "chronyd tracking: unix:///run/chrony/chronyd.sock or udp://HOST:323")
		ptp4l    = fs.String("ptp4l", "", "ptp4l management socket (its uds_address), e.g. /var/run/ptp4l")
		kernel   = fs.Bool("kernel", false, "use the kernel's adjtimex state as a source")
		dev      = fs.Bool("dev", false, "development reference: loopback only, the local clock signed with dev_key (never production)")
		printCfg = fs.Bool("print-config", false, "print the effective configuration (secret redacted) and exit")
		showVer  = fs.Bool("version", false, "print the version and exit")
	)
	fs.Var(&ntp, "ntp", "NTP server HOST[:PORT] (repeatable)")
	keys := bindKeys(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(stderr, keys)
			return 0
		}
		fmt.Fprintf(stderr, "tckclk-agent: %s\n(tckclk-agent --help for usage)\n", config.DescribeFlagError(err))
		return 2
	}
	if *showVer {
		fmt.Fprintln(stdout, version.String("tckclk-agent"))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tckclk-agent: unexpected argument %q (every option is a flag; tckclk-agent --help for usage)\n", fs.Arg(0))
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := agent.DefaultConfig()
	if *cfgPath != "" {
		data, err := os.ReadFile(*cfgPath)
		if err != nil {
			fmt.Fprintf(stderr, "tckclk-agent: --config: %v\n", err)
			return 2
		}
		if cfg, err = agent.LoadConfig(data); err != nil {
			fmt.Fprintf(stderr, "tckclk-agent: %s: %v\n", *cfgPath, err)
			return 2
		}
	}
	// Flags override the file only when they were given.
	if set["listen"] {
		cfg.Listen = *listen
	}
	if set["http"] {
		cfg.HTTP = *httpAddr
	}
	if set["secret-file"] {
		cfg.SecretFile = *secFile
	}
	if set["ntp"] {
		cfg.Sources.NTP.Servers = ntp
	}
	if set["chrony"] {
		cfg.Sources.Chrony.Address = *chrony
	}
	if set["ptp4l"] {
		cfg.Sources.PTP.UDS = *ptp4l
	}
	if set["kernel"] {
		cfg.Sources.Kernel.Enabled = *kernel
	}
	if set["dev"] {
		cfg.Dev = *dev
	}
	if err := keys.Apply(&cfg); err != nil {
		fmt.Fprintf(stderr, "tckclk-agent: %v\n", err)
		return 2
	}

	if *printCfg {
		return printConfig(cfg, env, stdout, stderr, set, keys)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	a, err := agent.New(cfg, agent.Options{Logger: log, Env: env})
	if err != nil {
		fmt.Fprintf(stderr, "tckclk-agent: %s\n", describe(err, set, keys))
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				_ = a.ReloadSecret() // logged; the previous secret stays on error
			case <-ctx.Done():
				return
			}
		}
	}()
	stopped, notified := make(chan struct{}), make(chan struct{})
	go func() { defer close(notified); notifyReadiness(ctx, a, log, stopped) }()
	err = a.Run(ctx)
	close(stopped)
	<-notified
	if err != nil {
		log.Error("agent failed", "err", err)
		return 1
	}
	return 0
}
