// Package version says which build a binary is, for --version: the main
// module's version and the VCS revision recorded by the Go toolchain
// (runtime/debug.ReadBuildInfo). A binary built with -buildvcs=false or
// from `go run` has no revision; that is said, not invented.
package version

import (
	"runtime/debug"
	"strings"
)

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
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	parts := []string{"revision " + rev + modified}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	return name + " " + v + " (" + strings.Join(parts, ", ") + ")"
}
