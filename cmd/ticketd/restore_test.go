package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SPEC §3.4, §8 exit codes: `ticketd restore` refuses bad usage and a data
// dir that holds data (2), and a backup it cannot read (1, naming the
// file); none of them creates the data dir.
func TestRestoreUsageAndRefusals(t *testing.T) {
	dir := t.TempDir()
	notBackup := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notBackup, []byte("not a backup\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, "new")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"restore"}, 2, "are required"},
		{[]string{"restore", "--from-snapshot", notBackup, "--node-id", "n2"}, 2, "are required"},
		{[]string{"restore", "--bogus"}, 2, "bogus"},
		{[]string{"restore", "--from-snapshot", notBackup, "--node-id", "n2", "--data-dir", to, "--delta-ms", "0500"}, 2, "--delta-ms"},
		{[]string{"restore", "--from-snapshot", notBackup, "--node-id", "n2", "--data-dir", to, "--epoch", "0"}, 2, "--epoch"},
		{[]string{"restore", "--from-snapshot", notBackup, "--node-id", "n2", "--data-dir", to, "--log-store", "tape"}, 2, "--log-store"},
		{[]string{"restore", "--from-snapshot", notBackup, "--node-id", "n 2", "--data-dir", to}, 2, "--node-id"},
		{[]string{"restore", "--from-snapshot", notBackup, "--node-id", "n2", "--data-dir", full}, 2, "already holds data"},
		{[]string{"restore", "--from-snapshot", notBackup, "--node-id", "n2", "--data-dir", to}, 1, notBackup + ": not a ticketd backup"},
		{[]string{"restore", "--from-snapshot", filepath.Join(dir, "gone.snap"), "--node-id", "n2", "--data-dir", to}, 1, "gone.snap"},
		{[]string{"restore", "extra", "--from-snapshot", notBackup}, 2, "unexpected arguments"},
		{[]string{"restore", "--help"}, 0, "usage: ticketd restore"},
	} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d containing %q", c.args, code, errb.String(), c.code, c.want)
		}
		if _, err := os.Stat(to); !os.IsNotExist(err) {
			t.Fatalf("%v wrote %s", c.args, to)
		}
	}
	var out, errb bytes.Buffer
	if run(t.Context(), []string{"--help"}, &out, &errb); !strings.Contains(errb.String(), "ticketd restore --from-snapshot FILE") {
		t.Errorf("ticketd --help does not list restore:\n%s", errb.String())
	}
}
