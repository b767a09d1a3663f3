package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteKeyHelp writes the keys' flags for --help, grouped by section (the
// top-level keys first), one line each: the flag, its value's form, its
// meaning and its default.
func WriteKeyHelp(w io.Writer, keys []Key) {
	width := 0
	for _, k := range keys {
		width = max(width, len(flagForm(k)))
	}
	width = min(width, 46)
	section := "\x00"
	for _, k := range keys {
		if k.Section != section {
			section = k.Section
			if section == "" {
				fmt.Fprintln(w, "  (top level)")
			} else {
				fmt.Fprintf(w, "  %s:\n", section)
			}
		}
		line := fmt.Sprintf("    %-*s  %s", width, flagForm(k), k.Help)
		if k.Default != "" {
			line += " (default " + k.Default + ")"
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

func flagForm(k Key) string {
	if k.Type == "" {
		return "--" + k.Path
	}
	return "--" + k.Path + " " + k.Type
}
