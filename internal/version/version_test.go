package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := Format("ticketd", bi), "ticketd v1.2.3 (revision abc123, modified, go1.26.8)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if got, want := Format("ticketctl", &debug.BuildInfo{}), "ticketctl (devel) (revision unknown)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

func TestString(t *testing.T) {
	if s := String("x"); !strings.HasPrefix(s, "x ") || !strings.Contains(s, "revision ") {
		t.Fatalf("%q", s)
	}
}

// A build from a git checkout always knows its revision: without the
// toolchain's vcs.revision (-buildvcs=false) the linker's Revision stands in.
func TestFormatLinkerRevision(t *testing.T) {
	old := Revision
	t.Cleanup(func() { Revision = old })
	Revision = "0123abc"
	if got, want := Format("ticketd", &debug.BuildInfo{GoVersion: "go1.26.8"}), "ticketd (devel) (revision 0123abc, go1.26.8)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fromvcs"}}}
	if got := Format("ticketd", bi); !strings.Contains(got, "revision fromvcs") {
		t.Fatalf("the toolchain's revision must win: %q", got)
	}
}
