package main

import (
	"strings"
	"testing"
)

// Issue 10: flag errors name the flag and the expected form only; --help is
// for a person; --version names the build.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "5"}, `tckclk-conformance: --timeout "5": want a Go duration like 500ms or 2s`},
		{[]string{"--timeout", "0x10s"}, `--timeout "0x10s": want a Go duration`},
		{[]string{"--dev=maybe"}, `--dev "maybe": want true or false`},
		{[]string{"--nope"}, "flag provided but not defined: --nope"},
		{[]string{"--addr"}, "flag needs an argument: --addr"},
	} {
		code, out, errs := runCmd(t, env(), c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
		if strings.Contains(errs, "parse error") || strings.Contains(errs, "strconv") || strings.Contains(errs, "time: ") {
			t.Errorf("%q: parser internals in %q", c.args, errs)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	code, _, help := runCmd(t, env(), "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"usage: tckclk-conformance --addr HOST:PORT", "\noptions:\n", "--timeout D ", "(default 2s)",
		"--secret-file F ", "--format FORMAT ", "--only ID,... ", "--dev ", "--version ", "\nchecks (SPEC section", "\nexit status:\n", "  2  bad usage"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	code, out, _ := runCmd(t, env(), "--version")
	if code != exitOK || !strings.HasPrefix(out, "tckclk-conformance ") || !strings.Contains(out, "revision ") {
		t.Fatalf("--version: exit %d %q", code, out)
	}
}
