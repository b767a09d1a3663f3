package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func open(t *testing.T, dir string) *Dir {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// The lock keeps a second user out until Close; the dir is created 0700.
func TestLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	d := open(t, dir)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir %v %v", fi, err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "another ticketd") {
		t.Fatalf("second open: %v", err)
	}
	d.Close()
	d2, err := Open(dir)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	d2.Close()
}

// SPEC §3.4: the retired marker round-trips; a marker that cannot be read
// refuses start-up too (fail closed); control characters are flattened; no
// temporary file is left behind; the file is 0600.
func TestRetiredMarker(t *testing.T) {
	d := open(t, filepath.Join(t.TempDir(), "data"))
	if err := d.CheckRetired(); err != nil {
		t.Fatalf("fresh dir: %v", err)
	}
	if err := d.WriteRetired("clockhealth: FAILED (step)\nforged: line\x00"); err != nil {
		t.Fatal(err)
	}
	var re *RetiredError
	err := d.CheckRetired()
	if !errors.As(err, &re) || !errors.Is(err, ErrRetired) || re.Reason != "clockhealth: FAILED (step) forged: line" {
		t.Fatalf("%v (%+v)", err, re)
	}
	if !strings.Contains(err.Error(), "new NodeId") {
		t.Fatalf("message %q", err)
	}
	ents, _ := os.ReadDir(d.Path())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
	if fi, err := os.Stat(d.File(RetiredFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("marker %v %v", fi, err)
	}
	odd := open(t, t.TempDir())
	if err := os.Mkdir(odd.File(RetiredFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := odd.CheckRetired(); err == nil || errors.Is(err, ErrRetired) {
		t.Fatalf("an unreadable marker: %v", err)
	}
}

// SPEC §4: the FAILED marker records reason and time; a garbled one still
// holds off ("not recorded"); removal is durable and idempotent.
func TestFailedMarker(t *testing.T) {
	d := open(t, t.TempDir())
	if p, err := d.ReadFailed(); p != nil || err != nil {
		t.Fatalf("fresh: %v %v", p, err)
	}
	at := time.UnixMilli(1_700_000_000_123)
	if err := d.WriteFailed("rollback", at, "clockhealth: FAILED (rollback)\nsecond line"); err != nil {
		t.Fatal(err)
	}
	p, err := d.ReadFailed()
	if err != nil || p == nil || p.Reason != "rollback" || p.AtMs != at.UnixMilli() {
		t.Fatalf("%+v %v", p, err)
	}
	if !strings.Contains(p.String(), "rollback") || !strings.Contains(p.String(), "2023-11-14T22:13:20.123Z") {
		t.Fatalf("%s", p)
	}
	if err := os.WriteFile(d.File(FailedFile), []byte("\xff\xfe garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := d.ReadFailed(); err != nil || p == nil || p.Reason != "not recorded" || p.AtMs != 0 {
		t.Fatalf("garbled: %+v %v", p, err)
	}
	for range 2 {
		if err := d.RemoveFailed(); err != nil {
			t.Fatal(err)
		}
	}
	if p, _ := d.ReadFailed(); p != nil {
		t.Fatal("marker still there")
	}
}

// ParseMarker never returns an unprintable value, bounds what it keeps and
// ignores lines without a key.
func TestParseMarker(t *testing.T) {
	m, err := ParseMarker(strings.NewReader("a: 1\nnokey\n: empty\nb: x\ty\r\n" + strings.Repeat("k", 40) + ": long key\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m["a"] != "1" || m["b"] != "x y" || len(m) != 2 {
		t.Fatalf("%q", m)
	}
	if got := OneLine(strings.Repeat("é", 400)); len(got) > 512 || !strings.HasPrefix(got, "é") {
		t.Fatalf("OneLine cap: %d bytes", len(got))
	}
}
