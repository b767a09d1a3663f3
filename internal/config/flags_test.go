package config

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

type flagInner struct {
	DeltaMs  uint64            `yaml:"delta_ms" help:"Δ in ms"`
	Addrs    []string          `yaml:"agent_addrs" help:"agents"`
	Dev      bool              `yaml:"dev_reference"`
	Interval time.Duration     `yaml:"interval" help:"how often"`
	Peers    map[string]string `yaml:"peers"`
	Secret   string            `yaml:"secret" flag:"-"`
}

type flagDoc struct {
	Name     string    `yaml:"name" help:"the name"`
	Priority int       `yaml:"priority"`
	Clock    flagInner `yaml:"clock"`
	Own      string    `yaml:"own"`
}

func bindTest(args ...string) (*KeyFlags, *flag.FlagSet, error) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	k := BindKeys(fs, flagDoc{Name: "n1", Clock: flagInner{DeltaMs: 500, Addrs: []string{"a:1"}}},
		BindOptions{Skip: func(p string) bool { return p == "own" }, Help: map[string]string{"priority": "lower first"}})
	return k, fs, fs.Parse(args)
}

// SPEC §6: every key is a flag; flags apply over the file in order, with
// the file's number rule (issue 10: plain decimal only).
func TestKeyFlagsApply(t *testing.T) {
	k, _, err := bindTest("--clock.delta_ms", "800", "--clock.agent_addrs", "a:1, b:2,", "--clock.dev_reference",
		"--clock.interval", "2s", "--priority", "-2", "--name", "x", "--clock.delta_ms", "900")
	if err != nil {
		t.Fatal(err)
	}
	d := flagDoc{Clock: flagInner{DeltaMs: 1}}
	if err := k.Apply(&d); err != nil {
		t.Fatal(err)
	}
	if d.Clock.DeltaMs != 900 || len(d.Clock.Addrs) != 2 || d.Clock.Addrs[1] != "b:2" || !d.Clock.Dev ||
		d.Clock.Interval != 2*time.Second || d.Priority != -2 || d.Name != "x" {
		t.Fatalf("%+v", d)
	}
	if !k.Set("clock.delta_ms") || k.Set("clock.peers") {
		t.Fatal("Set")
	}
}

func TestKeyFlagsErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--clock.delta_ms", "0500"}, `--clock.delta_ms "0500": want plain decimal digits (like 500): no sign, leading zero, base prefix (0x, 0o, 0b), underscore or exponent`},
		{[]string{"--clock.delta_ms", "0x1f4"}, `--clock.delta_ms "0x1f4": want plain decimal digits`},
		{[]string{"--clock.delta_ms", "1_000"}, `--clock.delta_ms "1_000": want plain decimal`},
		{[]string{"--clock.delta_ms", "-5"}, `--clock.delta_ms "-5": want plain decimal`},
		{[]string{"--clock.delta_ms", "fast"}, `--clock.delta_ms "fast": want an integer in plain decimal (like 500)`},
		{[]string{"--clock.delta_ms", ""}, `--clock.delta_ms "": want an integer`},
		{[]string{"--priority", "-0"}, `--priority "-0": want plain decimal`},
		{[]string{"--priority", "+1"}, `--priority "+1": want plain decimal digits (like 500): no sign, leading zero, base prefix (0x, 0o, 0b), underscore or exponent, or a '-' before them`},
		{[]string{"--clock.interval", "5"}, `--clock.interval "5": want a Go duration like 500ms, 2s or 1m30s`},
		{[]string{"--clock.dev_reference=yes"}, `--clock.dev_reference "yes": want true or false`},
	} {
		k, _, err := bindTest(c.args...)
		if err != nil {
			t.Fatal(err)
		}
		var d flagDoc
		err = k.Apply(&d)
		var fe *FlagError
		if !errors.As(err, &fe) || err.Error() != c.msg && !strings.HasPrefix(err.Error(), c.msg) {
			t.Errorf("%q: got %v, want %q", c.args, err, c.msg)
		}
		if err != nil && (strings.Contains(err.Error(), "line ") || strings.Contains(err.Error(), "str,") || strings.Contains(err.Error(), "strconv")) {
			t.Errorf("%q: parser internals in %q", c.args, err)
		}
	}
}

// Inline secrets (flag:"-"), maps and keys the command binds itself get
// no flag; --help lists the rest by section with help and defaults.
func TestKeyFlagsHelp(t *testing.T) {
	k, fs, _ := bindTest()
	for _, name := range []string{"clock.secret", "clock.peers", "own"} {
		if fs.Lookup(name) != nil {
			t.Errorf("flag --%s exists", name)
		}
	}
	var b bytes.Buffer
	WriteKeyHelp(&b, k.Keys())
	out := b.String()
	for _, want := range []string{
		"  (top level)\n    --name TEXT",
		"the name (default n1)",
		"--priority N",
		"lower first\n",
		"  clock:\n    --clock.delta_ms N",
		"Δ in ms (default 500)",
		"--clock.agent_addrs A,B,...",
		"agents (default a:1)",
		"    --clock.dev_reference\n",
		"--clock.interval DURATION",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}

// Issue 10: flag errors name the flag and the expected form only.
func TestDescribeFlagError(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("dev", false, "")
	fs.String("addr", "", "")
	fs.Func("timeout", "", func(string) error { return errors.New("want a Go duration like 2s") })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dev=maybe"}, `--dev "maybe": want true or false`},
		{[]string{"--timeout", "5"}, `--timeout "5": want a Go duration like 2s`},
		{[]string{"--nope"}, "flag provided but not defined: --nope"},
		{[]string{"--addr"}, "flag needs an argument: --addr"},
	} {
		err := fs.Parse(c.args)
		if err == nil || DescribeFlagError(err) != c.want {
			t.Errorf("%q: %v → %q, want %q", c.args, err, DescribeFlagError(err), c.want)
		}
	}
	if got := DescribeFlagError(errors.New("other")); got != "other" {
		t.Errorf("%q", got)
	}
}
