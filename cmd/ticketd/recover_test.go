package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// SPEC §3.4, §8 exit codes: `ticketd recover` refuses bad usage (2), a data
// dir that is not retired (2) and one that is not a data dir (1).
func TestRecoverUsageAndRefusals(t *testing.T) {
	empty := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"recover"}, 2, "are required"},
		{[]string{"recover", "--from", empty, "--node-id", "n2", "--data-dir", filepath.Join(t.TempDir(), "x"), "--delta-ms", "0500"}, 2, "--delta-ms"},
		{[]string{"recover", "--bogus"}, 2, "bogus"},
		{[]string{"recover", "--from", empty, "--node-id", "n2", "--data-dir", filepath.Join(t.TempDir(), "x")}, 2, "neither retired nor marked FAILED"},
		{[]string{"recover", "--help"}, 0, "usage: ticketd recover"},
	} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d containing %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}
