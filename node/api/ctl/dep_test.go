package ctl

import (
	"os/exec"
	"strings"
	"testing"
)

// Issue 9: ticketctl's logic depends on the standard library, the Go client
// and the wire types only.
func TestDependsOnClientOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/tckclk/tckclk/node/api/ctl":    true,
		"github.com/tckclk/tckclk/node/api/client": true,
		"github.com/tckclk/tckclk/node/api/wire":   true,
	}
	seen := 0
	for _, p := range strings.Fields(string(out)) {
		seen++
		if !allowed[p] {
			t.Errorf("node/api/ctl depends on %s: only the standard library, client and wire are allowed", p)
		}
	}
	if seen != 3 {
		t.Fatalf("go list named %d non-standard packages (%q); want ctl, client and wire", seen, out)
	}
}
