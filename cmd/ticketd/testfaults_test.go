package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

// SPEC §3.4: exit status 2 means refused (an operator must look; the
// systemd unit does not restart it). A Go panic — in any goroutine, as
// hashicorp/raft's own are — exits 2 by default; ticketd's ends the
// process by SIGABRT instead (crash.go), which supervisors restart, with
// the panic and its traceback on stderr and no core dump: the process
// runs with an unlimited core limit (prlimit, when installed) and, where
// the kernel writes cores to a file in the working directory, none may
// appear there.
func TestPanicIsNotARefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ticketd with -tags tckclk_testfaults")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := []string{faultsBinary(t), "--data-dir", filepath.Join(dir, "data"), "--http", "127.0.0.1:0"}
	if prlimit, err := exec.LookPath("prlimit"); err == nil {
		argv = append([]string{prlimit, "--core=unlimited", "--"}, argv...) // it execs ticketd in place
	} else {
		t.Log("prlimit not installed: ticketd runs with this process's core limit")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir // where a core file would land
	cmd.Env = append(childEnv(), "TCKCLK_TESTFAULT_PANIC=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("ticketd ran on after its panic:\n%s", out)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
		t.Fatalf("after a panic: %v (exit status %d), want killed by SIGABRT, never the exit 2 of a refusal:\n%s", err, exitStatus(err), out)
	}
	if !strings.Contains(string(out), "panic: TEST FAULT: TCKCLK_TESTFAULT_PANIC") {
		t.Fatalf("stderr does not show the panic:\n%s", out)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "core") {
			t.Errorf("a core dump was written: %s (it holds the node's secrets)", e.Name())
		}
	}
}
