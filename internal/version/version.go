// Package version says which build a binary is, for --version: the main
// module's version and the VCS revision recorded by the Go toolchain
// (runtime/debug.ReadBuildInfo). A build that records no revision (go run,
// -buildvcs=false, a copy of the tree without .git) takes the one a build
// script passes with -ldflags "-X github.com/tckclk/tckclk/internal/version.Revision=…"
// (the Makefile, deploy/demo.sh and deploy/docker/build.sh do); with neither,
// "unknown" is said, not invented.
package version

import (
	"runtime/debug"
	"strings"
)

// Revision is set by the linker (-X) when the build info has no
// vcs.revision of its own; the build info wins when it has one.
var Revision string

// String is "NAME VERSION (revision R[, modified], GOVERSION)" for the
// running binary.
func String(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)"
	}
	return Format(name, bi)
}

// Format renders bi as String does.
func Format(name string, bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	rev, mod := revisionOf(bi)
	modified := ""
	if mod {
		modified = ", modified"
	}
	parts := []string{"revision " + rev + modified}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	return name + " " + v + " (" + strings.Join(parts, ", ") + ")"
}

// revisionOf is bi's VCS revision (else the linker's Revision, else
// "unknown") and whether the tree was modified.
func revisionOf(bi *debug.BuildInfo) (rev string, modified bool) {
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		rev = Revision
	}
	if rev == "" {
		rev = "unknown"
	}
	return rev, modified
}

// Rev is the running binary's revision as Format says it ("unknown"
// when neither the build info nor the linker has one), with "-modified"
// after it for a modified tree: for places with no room for String's
// text (a node's gossip metadata).
func Rev() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, modified := revisionOf(bi)
	if modified {
		rev += "-modified"
	}
	return rev
}
