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
