package main

import (
	"flag"
	"strings"
	"testing"
)

// Issue 10: numbers in ticketd.yaml and in flags are plain decimal; before,
// 0500 ran with Δ = 320 (octal) and 0x1f4 with 500. Each refusal is exit 2
// naming the key or the flag, with no parser internals.
func TestNumbersAreDecimal(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"flag octal-looking", []string{"--clock.delta_ms", "0500"}, `ticketd: --clock.delta_ms "0500": want plain decimal digits (like 500)`},
		{"flag hex", []string{"--clock.delta_ms", "0x1f4"}, `--clock.delta_ms "0x1f4": want plain decimal digits`},
		{"flag underscore", []string{"--cluster.raft.snapshot_threshold", "8_192"}, `--cluster.raft.snapshot_threshold "8_192": want plain decimal`},
		{"flag sign", []string{"--clock.delta_ms", "+500"}, `--clock.delta_ms "+500": want plain decimal`},
		{"flag exponent", []string{"--clock.delta_ms", "5e2"}, `--clock.delta_ms "5e2": want plain decimal`},
		{"flag word", []string{"--clock.delta_ms", "fast"}, `--clock.delta_ms "fast": want an integer in plain decimal`},
		{"flag -0 on a signed key", []string{"--cluster.raft.priority", "-0"}, `--cluster.raft.priority "-0"`},
		{"flag duration", []string{"--cluster.raft.snapshot_interval", "30"}, `--cluster.raft.snapshot_interval "30": want a Go duration`},
		{"flag bool", []string{"--cluster.raft.eligible=yes"}, `--cluster.raft.eligible "yes": want true or false`},
		{"flag own bool", []string{"--print-config=maybe"}, `ticketd: --print-config "maybe": want true or false`},
		{"yaml octal-looking", []string{"--config", writeConfig(t, "clock:\n  delta_ms: 0500\n")}, `clock.delta_ms: bad value "0500" (line 2): want plain decimal digits`},
		{"yaml hex", []string{"--config", writeConfig(t, "clock:\n  delta_ms: 0x1f4\n")}, `clock.delta_ms: bad value "0x1f4" (line 2)`},
		{"yaml binary", []string{"--config", writeConfig(t, "cluster:\n  raft:\n    max_voters: 0b11\n")}, `cluster.raft.max_voters: bad value "0b11" (line 3)`},
		{"yaml underscore", []string{"--config", writeConfig(t, "cluster:\n  raft:\n    trailing_logs: 10_240\n")}, `cluster.raft.trailing_logs: bad value "10_240"`},
		{"yaml negative unsigned", []string{"--config", writeConfig(t, "clock:\n  delta_ms: -500\n")}, `clock.delta_ms: bad value "-500"`},
		{"yaml quoted", []string{"--config", writeConfig(t, "clock:\n  delta_ms: '500'\n")}, `clock.delta_ms: want an integer in plain decimal`},
		{"yaml duration", []string{"--config", writeConfig(t, "cluster:\n  raft:\n    snapshot_interval: 30\n")}, `cluster.raft.snapshot_interval: bad value "30" (line 3): want a Go duration`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, c.args...)
			if code != 2 || !strings.Contains(errs, c.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 with %q", code, errs, c.msg)
			}
			if strings.HasPrefix(c.name, "flag") && (strings.Contains(errs, "line ") || strings.Contains(errs, "str,") || strings.Count(errs, "delta_ms") > 1) {
				t.Fatalf("parser internals or repetition in %q", errs)
			}
		})
	}
	// Accepted: plain decimal, a negative priority, Go durations.
	code, out, errs := runCmd(t, "--clock.delta_ms", "1000", "--cluster.raft.priority", "-2",
		"--cluster.raft.snapshot_interval", "1m30s", "--config", writeConfig(t, "clock:\n  delta_ms: 0\n  probe_interval_ms: 2000\n"), "--print-config")
	if code != 0 || !strings.Contains(out, "delta_ms: 1000") || !strings.Contains(out, "priority: -2") ||
		!strings.Contains(out, "snapshot_interval: 1m30s") || !strings.Contains(out, "probe_interval_ms: 2000") {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
}

// Issue 10: --help is for a person: usage, grouped keys with meanings and
// defaults, exit codes; every flag is in it and every key has a meaning.
func TestHelpIsReadable(t *testing.T) {
	code, _, help := runCmd(t, "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"usage: ticketd [--config FILE]", "\noptions:\n", "--version", "\n  clock:\n",
		"--clock.delta_ms N ", "Δ, the clock error allowance in ms, 2..=60000 (default 500)",
		"--cluster.raft.snapshot_interval DURATION", "(default 30s)", "\nexit status:\n", "  2  bad usage",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if strings.Contains(help, "sets ") || strings.Contains(help, "(uint64)") {
		t.Error("--help still has the generated 'sets X (type)' lines")
	}
	for _, k := range bindKeys(flag.NewFlagSet("t", flag.ContinueOnError)).Keys() {
		if keyHelp[k.Path] == "" {
			t.Errorf("key %s has no help text in keyHelp", k.Path)
		}
		if !strings.Contains(help, "--"+k.Path) {
			t.Errorf("--help lacks --%s", k.Path)
		}
	}
	for _, name := range []string{"config", "data-dir", "http", "print-config", "version"} {
		if !strings.Contains(help, "--"+name+" ") {
			t.Errorf("--help lacks --%s", name)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCmd(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "ticketd ") || !strings.Contains(out, "revision ") {
		t.Fatalf("exit %d: %q", code, out)
	}
}
