package client

import (
	"os/exec"
	"strings"
	"testing"
)

// Issue 9: a client program pulls in the standard library and the API's
// wire types, nothing else (no Prometheus, Raft or protobuf).
func TestDependsOnStdlibAndWireOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".", "../wire").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/tckclk/tckclk/node/api/client": true,
		"github.com/tckclk/tckclk/node/api/wire":   true,
	}
	seen := 0
	for _, p := range strings.Fields(string(out)) {
		seen++
		if !allowed[p] {
			t.Errorf("node/api/client or wire depends on %s: only the standard library and wire are allowed", p)
		}
	}
	if seen != 2 {
		t.Fatalf("go list named %d non-standard packages (%q); want exactly client and wire: the check is not looking at them", seen, out)
	}
}
