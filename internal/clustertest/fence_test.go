package clustertest

import (
	"os/exec"
	"strings"
	"testing"
)

const prefix = "github.com/tckclk/tckclk/internal/clustertest"

// Test support stays out of the shipped binaries: no package of the module
// imports internal/clustertest outside its tests, with or without the
// test-faults build tag (the safety scenarios' processes).
func TestNoShippedPackageImportsClusterTest(t *testing.T) {
	for _, tags := range []string{"", "tckclk_testfaults"} {
		cmd := exec.Command("go", "list", "-tags", tags, "-f",
			"{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}",
			"github.com/tckclk/tckclk/...")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list (tags %q): %v\n%s", tags, err, stderr.String())
		}
		testUsers := 0
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.SplitN(line, "|", 3)
			if len(f) != 3 {
				t.Fatalf("go list line %q: want path|imports|test imports", line)
			}
			if strings.HasPrefix(f[0], prefix) {
				continue
			}
			for _, imp := range strings.Fields(f[1]) {
				if strings.HasPrefix(imp, prefix) {
					t.Errorf("%s imports %s outside its tests (tags %q): test support must not ship", f[0], imp, tags)
				}
			}
			if strings.Contains(f[2], prefix) {
				testUsers++
			}
		}
		// The node's and ticketd's tests use faultnet and gossipforge: a
		// listing that finds no test user is not looking at the module.
		if testUsers == 0 {
			t.Fatalf("go list (tags %q) found no test importing %s: the check is not looking at the module", tags, prefix)
		}
	}
}
