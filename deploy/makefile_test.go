package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeBuildKnowsItsRevision: a build from a git checkout always knows
// its revision, even where the toolchain records none (GOFLAGS=-buildvcs=false
// is common in CI and container builds): the Makefile passes it by -ldflags.
func TestMakeBuildKnowsItsRevision(t *testing.T) {
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	bin := t.TempDir()
	cmd := exec.Command("make", "-C", root, "build", "BIN="+bin)
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, name := range []string{"ticketd", "ticketctl", "tckclk-agent", "tckclk-conformance"} {
		out, err := exec.Command(filepath.Join(bin, name), "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", name, err, out)
		}
		if !strings.Contains(string(out), "revision "+rev) {
			t.Errorf("%s --version = %q, want revision %s", name, strings.TrimSpace(string(out)), rev)
		}
	}
}
