package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/tckclk/tckclk/agent"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
)

// keyHelp is the meaning of every agent.yaml key that has no flag of its
// own (a key missing here fails TestEveryKeyHasHelp).
var keyHelp = map[string]string{
	"read_timeout_ms":                  "ms a client has to send its request line, 1..=10000",
	"write_timeout_ms":                 "ms to write one response, 1..=10000",
	"max_conns":                        "open TCKCLK/2 connections at most",
	"shutdown_timeout_ms":              "ms to finish open exchanges on SIGTERM",
	"max_source_age_ms":                "a source sample older than this is not used, in ms",
	"max_drift_ppm":                    "drift assumed since a sample, in ppm (widens the uncertainty)",
	"sources.ntp.min_truechimers":      "NTP servers that must agree (0: a majority)",
	"sources.ntp.poll_interval_ms":     "ms between NTP polls",
	"sources.ntp.timeout_ms":           "ms one NTP query may take",
	"sources.ntp.max_rtt_ms":           "largest NTP round trip in ms",
	"sources.ntp.max_root_distance_ms": "largest NTP root distance in ms",
	"sources.ntp.max_stratum":          "largest NTP stratum, 1..=15",
	"sources.chrony.poll_interval_ms":  "ms between chronyd tracking reads",
	"sources.chrony.timeout_ms":        "ms one chronyd read may take",
	"sources.ptp.domain":               "ptp4l domainNumber, 0..=255",
	"sources.ptp.poll_interval_ms":     "ms between ptp4l reads",
	"sources.ptp.timeout_ms":           "ms one ptp4l read may take",
	"sources.kernel.poll_interval_ms":  "ms between adjtimex reads",
}

// ownFlag maps a config key path to the flag of its own that sets it.
var ownFlag = map[string]string{
	"listen": "listen", "http": "http", "secret_file": "secret-file", "dev": "dev",
	"sources.ntp.servers": "ntp", "sources.chrony.address": "chrony", "sources.ptp.uds": "ptp4l",
	"sources.kernel.enabled": "kernel",
}

// bindKeys makes every other key of agent.yaml a flag (SPEC §6).
func bindKeys(fs *flag.FlagSet) *config.KeyFlags {
	return config.BindKeys(fs, agent.DefaultConfig(), config.BindOptions{Help: keyHelp,
		Skip: func(path string) bool { _, own := ownFlag[path]; return own }})
}

func writeUsage(w io.Writer, keys *config.KeyFlags) {
	fmt.Fprintf(w, `usage: tckclk-agent [--config agent.yaml] [--listen ADDR] [--http ADDR] [--secret-file F]
                    [--ntp HOST[:PORT]]... [--chrony URL] [--ptp4l PATH] [--kernel] [--dev]
                    [--print-config] [--KEY VALUE ...]
       tckclk-agent --version | --help

The TCKCLK/2 clock agent (SPEC §2): answers each request line with the
reference time, its uncertainty and a MAC under the shared secret. At least
one source (or --dev) is needed.

options:
  --config FILE       agent.yaml (strict: unknown keys are errors); flags override it
  --listen ADDR       TCKCLK/2 TCP address; a trusted private network: the MAC gives
                      integrity, not secrecy (default %s)
  --http ADDR         ops HTTP: /metrics /livez /readyz /v1/status (default %s)
  --secret-file F     shared secret, mode 0600, at least 32 bytes (or $%s / $%s)
  --ntp HOST[:PORT]   an NTP server, port 123 by default (repeatable)
  --chrony URL        chronyd tracking: unix:///run/chrony/chronyd.sock or udp://HOST:323
  --ptp4l PATH        ptp4l's management socket (its uds_address), e.g. /var/run/ptp4l
  --kernel            use the kernel's adjtimex state as a source
  --dev               development reference: loopback only, the local clock signed
                      with dev_key (never production)
  --print-config      print the effective configuration (secret redacted) and exit
  --version           print the version and exit
  -h, --help          print this help and exit

configuration keys (each a key of agent.yaml too; numbers in plain decimal):
`, agent.DefaultListen, agent.DefaultHTTP, secret.EnvSecretFile, secret.EnvSecret)
	config.WriteKeyHelp(w, keys.Keys())
	fmt.Fprint(w, `
exit status:
  0  stopped cleanly (SIGINT or SIGTERM), or --help, --version, --print-config
  1  runtime failure: a listener could not open, the agent failed
  2  bad usage, configuration or secret (also --print-config with a secret
     that cannot be loaded)
`)
}
