package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test-fault hooks (testfaults.go) exist only with -tags
// tckclk_testfaults: a ticketd built the ordinary way has none, whatever
// TCKCLK_TESTFAULT_* says.
func TestOrdinaryBuildHasNoTestFaults(t *testing.T) {
	if testFaults != nil {
		t.Fatal("this build injects test faults (built with -tags tckclk_testfaults?)")
	}
}

// The tckclk_testfaults build refuses a bad TCKCLK_TESTFAULT_* value
// before it starts (exit 2, naming the variable) and creates nothing.
func TestFaultsBuildRefusesBadValues(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ticketd with -tags tckclk_testfaults")
	}
	for _, kv := range []string{"TCKCLK_TESTFAULT_WALL_OFFSET_MS=1s", "TCKCLK_TESTFAULT_WALL_OFFSET_MS=60001", "TCKCLK_TESTFAULT_EXPIRE_EARLY=yes"} {
		dataDir := filepath.Join(t.TempDir(), "data")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a ticketd that accepted it runs on
		defer cancel()
		cmd := exec.CommandContext(ctx, faultsBinary(t), "--data-dir", dataDir, "--http", "127.0.0.1:0")
		cmd.Env = append(childEnv(), kv)
		out, err := cmd.CombinedOutput()
		name, _, _ := strings.Cut(kv, "=")
		if exitStatus(err) != 2 || !strings.Contains(string(out), name) {
			t.Errorf("%s: exit %v, want 2 naming %s:\n%s", kv, err, name, out)
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("%s: the data dir was created (%v)", kv, err)
		}
	}
}
