// Command ticketctl is the ticketd command-line client (SPEC §8):
//
//	ticketctl [--addr http://127.0.0.1:7980] grant NAME --holder H --lease 30
//	          renew NAME --token N --lease 30 | release NAME --token N | get NAME
//	          | list [--prefix P] | status | cluster      (--json on every command)
//
// renew and release need the holder too: --holder H, or TICKETCTL_HOLDER.
// Flags may come before or after the command. Exit status: 0 ok, 1 the
// server refused or could not be reached, 2 bad usage. The logic is in
// node/api/ctl; this file wires the process to it.
package main

import (
	"context"
	"os"
	"time"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/internal/version"
	"github.com/tckclk/tckclk/node/api/ctl"
)

func main() {
	os.Exit(ctl.Main(context.Background(), os.Args[1:], processEnv()))
}

// processEnv is the real process: its streams, environment and clock;
// token files are read with the secret rules (mode 0600 or stricter).
func processEnv() ctl.Env {
	return ctl.Env{
		Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv:     os.LookupEnv,
		Now:        time.Now,
		ReadSecret: secret.ReadFileRaw,
		Version:    version.String("ticketctl"),
	}
}
