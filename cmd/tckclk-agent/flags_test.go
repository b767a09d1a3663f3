package main

import (
	"flag"
	"strings"
	"testing"
)

// Issue 10: every integer in agent.yaml and in flags is plain decimal;
// anything else is exit 2 naming the key or the flag.
func TestNumbersAreDecimal(t *testing.T) {
	sec := writeFile(t, "s", secretBytes, 0o600)
	yml := func(body string) string {
		return writeFile(t, "a.yaml", []byte(body+"sources: {kernel: {enabled: true}}\n"), 0o644)
	}
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"flag octal-looking", []string{"--read_timeout_ms", "0500"}, `tckclk-agent: --read_timeout_ms "0500": want plain decimal digits (like 500)`},
		{"flag hex", []string{"--max_conns", "0x10"}, `--max_conns "0x10": want plain decimal digits`},
		{"flag underscore", []string{"--sources.ntp.poll_interval_ms", "16_000"}, `--sources.ntp.poll_interval_ms "16_000": want plain decimal`},
		{"flag sign", []string{"--sources.ptp.domain", "+1"}, `--sources.ptp.domain "+1"`},
		{"flag range", []string{"--sources.ptp.domain", "256"}, `--sources.ptp.domain "256": outside 0..=255`},
		{"flag word", []string{"--max_drift_ppm", "lots"}, `--max_drift_ppm "lots": want an integer in plain decimal`},
		{"flag own bool", []string{"--kernel=on"}, `tckclk-agent: --kernel "on": want true or false`},
		{"flag validated", []string{"--kernel", "--secret-file", sec, "--read_timeout_ms", "60000"}, "--read_timeout_ms: config: read_timeout_ms: 60000 is outside 1..=10000"},
		{"yaml octal-looking", []string{"--config", yml("read_timeout_ms: 0500\n")}, `read_timeout_ms: bad value "0500" (line 1): want plain decimal digits`},
		{"yaml hex", []string{"--config", yml("max_conns: 0x400\n")}, `max_conns: bad value "0x400" (line 1)`},
		{"yaml binary", []string{"--config", yml("max_drift_ppm: 0b1\n")}, `max_drift_ppm: bad value "0b1"`},
		{"yaml exponent", []string{"--config", yml("max_drift_ppm: 5e1\n")}, `max_drift_ppm: bad value "5e1"`},
		{"yaml -0", []string{"--config", yml("max_conns: -0\n")}, `max_conns: bad value "-0"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, nil, c.args...)
			if code != 2 || !strings.Contains(errs, c.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 with %q", code, errs, c.msg)
			}
			if strings.HasPrefix(c.name, "flag") && (strings.Contains(errs, "line ") || strings.Contains(errs, "str,")) {
				t.Fatalf("parser internals in %q", errs)
			}
		})
	}
	code, out, errs := runCmd(t, nil, "--kernel", "--secret-file", sec, "--read_timeout_ms", "500", "--sources.ptp.domain", "24", "--print-config")
	if code != 0 || !strings.Contains(out, "read_timeout_ms: 500") || !strings.Contains(out, "domain: 24") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
}

// Issue 10: --help has a usage line, every flag with its meaning, the keys
// by section with defaults, and the exit codes.
func TestHelpIsReadable(t *testing.T) {
	code, _, help := runCmd(t, nil, "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"usage: tckclk-agent [--config agent.yaml]", "\noptions:\n", "  sources:\n",
		"--read_timeout_ms N", "(default 2000)", "\nexit status:\n", "  2  bad usage"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	keys := bindKeys(fs)
	for _, k := range keys.Keys() {
		if keyHelp[k.Path] == "" {
			t.Errorf("key %s has no help text", k.Path)
		}
	}
	for _, name := range []string{"config", "listen", "http", "secret-file", "ntp", "chrony", "ptp4l", "kernel", "dev", "print-config", "version"} {
		if !strings.Contains(help, "--"+name+" ") {
			t.Errorf("--help lacks --%s", name)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "--"+f.Name+" ") && !strings.Contains(help, "--"+f.Name+"\n") {
			t.Errorf("--help lacks --%s", f.Name)
		}
	})
}

func TestVersion(t *testing.T) {
	code, out, _ := runCmd(t, nil, "--version")
	if code != 0 || !strings.HasPrefix(out, "tckclk-agent ") || !strings.Contains(out, "revision ") {
		t.Fatalf("exit %d: %q", code, out)
	}
}
