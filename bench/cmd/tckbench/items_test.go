package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain lets the test binary be the agent section's bare server, as
// the tckbench binary is (runAgentFloor starts os.Executable()).
func TestMain(m *testing.M) {
	if addr := os.Getenv(bareEnv); addr != "" {
		if err := serveBare(addr, os.Getenv(bareLineEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
