package ctl

import (
	"net"
	"strings"
	"testing"
)

func TestUsageErrorsExit2(t *testing.T) {
	env := map[string]string{"TICKETCTL_ADDR": "http://127.0.0.1:1"} // never reached
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{nil, "usage"},
		{[]string{"steal", "x"}, `unknown command "steal"`},
		{[]string{"grant", "--holder", "a", "--lease", "30"}, "exactly one ticket NAME"},
		{[]string{"grant", "x", "--lease", "30"}, "needs --holder"},
		{[]string{"grant", "x", "--holder", "a"}, "--lease SECONDS in 1..=250, got 0"},
		{[]string{"grant", "x", "--holder", "a", "--lease", "251"}, "got 251"},
		{[]string{"grant", "x", "--holder", "a", "--lease", "30.5"}, "invalid value"},
		{[]string{"renew", "x", "--holder", "a", "--lease", "30"}, "needs --token N"},
		{[]string{"release", "x", "--holder", "a", "--token", "-1"}, "needs --token N"},
		{[]string{"release", "x", "--holder", "a", "--token", "3", "--lease", "5"}, "release takes no --lease"},
		{[]string{"get"}, "exactly one ticket NAME"},
		{[]string{"status", "extra"}, "takes no arguments"},
		{[]string{"cluster"}, "needs --admin-token-file"},
		{[]string{"--addr", "ftp://x", "status"}, "--addr"},
		{[]string{"--nope", "status"}, "flag provided but not defined"},
		// SPEC §4.2: run needs -- and a command.
		{[]string{"run", "x", "--holder", "a", "--lease", "30", "true"}, "needs -- before the command"},
		{[]string{"run", "x", "--holder", "a", "--lease", "30", "--"}, "needs a command after --"},
		{[]string{"run", "--holder", "a", "--lease", "30", "--", "true"}, "exactly one ticket NAME"},
		{[]string{"run", "x", "--lease", "30", "--", "true"}, "needs --holder"},
		{[]string{"run", "x", "--holder", "a", "--", "true"}, "--lease SECONDS"},
		{[]string{"run", "x", "--holder", "a", "--lease", "10", "--grace", "5s", "--", "true"}, "less than half the lease"},
		{[]string{"run", "x", "--holder", "a", "--lease", "10", "--wait", "-1s", "--", "true"}, "--wait"},
		{[]string{"run", "x", "--holder", "a", "--lease", "10", "--wait", "6m", "--", "true"}, "--wait 6m0s: at most"},
		{[]string{"wait"}, "exactly one ticket NAME"},
		{[]string{"watch", "x", "--wait", "soon"}, "--wait"},
		{[]string{"watch", "x", "--holder", "a"}, "watch takes no --holder"},
		{[]string{"grant", "x", "--holder", "a", "--lease", "5", "--wait", "1s"}, "grant takes no --wait"},
	} {
		r := runCtl(t, env, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%q: exit %d stderr %q; want 2 with %q", c.args, r.code, r.stderr, c.msg)
		}
	}
	if r := runCtl(t, env, "--help"); r.code != 0 || !strings.Contains(r.out, "grant NAME --holder H --lease SECONDS") {
		t.Fatalf("--help: %+v", r)
	}
}

func TestUnreachableExit1(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	r := runCtl(t, nil, "--addr", "http://"+addr, "--timeout", "2s", "status")
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused") {
		t.Fatalf("%+v", r)
	}
}

// Issue 10: numbers in ticketctl's flags are plain decimal; before, --lease
// 036 was octal 30 and 0x1e hex.
func TestNumbersAreDecimal(t *testing.T) {
	env := map[string]string{"TICKETCTL_ADDR": "http://127.0.0.1:1"} // never reached
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"grant", "x", "--holder", "a", "--lease", "036"}, `--lease "036": invalid value, want whole seconds in plain decimal, 1..=250`},
		{[]string{"grant", "x", "--holder", "a", "--lease", "0x1e"}, `--lease "0x1e": invalid value`},
		{[]string{"grant", "x", "--holder", "a", "--lease", "+30"}, `--lease "+30": invalid value`},
		{[]string{"grant", "x", "--holder", "a", "--lease", "3_0"}, `--lease "3_0": invalid value`},
		{[]string{"list", "--limit", "010"}, `--limit "010": invalid value, want a count in plain decimal`},
		{[]string{"release", "x", "--holder", "a", "--token", "05"}, `needs --token N (a positive integer in plain decimal), got "05"`},
		{[]string{"release", "x", "--holder", "a", "--token", "0x5"}, `got "0x5"`},
		{[]string{"release", "x", "--holder", "a", "--token", "0"}, `got "0"`},
		{[]string{"--timeout", "10", "status"}, `--timeout "10": invalid value, want a positive Go duration`},
		{[]string{"status", "--json=yes"}, `--json "yes": invalid value, want true or false`},
	} {
		r := runCtl(t, env, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%q: exit %d stderr %q; want 2 with %q", c.args, r.code, r.stderr, c.msg)
		}
		if strings.Contains(r.stderr, "for flag -") || strings.Contains(r.stderr, "parse error") {
			t.Errorf("%q: flag package wording in %q", c.args, r.stderr)
		}
	}
}

// Issue 10: a refused connection names the address once and asks whether
// ticketd runs there.
func TestUnreachableSaysWhereAndWhat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	r := runCtl(t, nil, "--addr", addr, "--timeout", "2s", "get", "x")
	want := "ticketctl get: cannot reach ticketd at " + addr + " (connect: connection refused); check that ticketd runs there, or set --addr or TICKETCTL_ADDR\n"
	if r.code != 1 || r.stderr != want {
		t.Fatalf("exit %d stderr %q; want 1 and %q", r.code, r.stderr, want)
	}
	if n := strings.Count(r.stderr, ln.Addr().String()); n != 1 {
		t.Fatalf("the address appears %d times", n)
	}
}

func TestVersion(t *testing.T) {
	if r := runCtl(t, nil, "--version"); r.code != 0 || r.out != "ticketctl test\n" {
		t.Fatalf("%+v", r)
	}
}
