// Command ticketctl is the ticketd command-line client (SPEC §8):
//
//	ticketctl [--addr http://127.0.0.1:7980] grant NAME --holder H --lease 30
//	          renew NAME --token N --lease 30 | release NAME --token N | get NAME
//	          | list [--prefix P] | status | cluster      (--json on every command)
//	          | cluster health [--wait D] [--voters N]
//	          | wait NAME | watch NAME [--wait D]
//	          | run NAME --holder H --lease 30 [--wait 60s] [--grace 5s] -- CMD ARGS…
//	          | revoke NAME [--token N] | snapshot save FILE          (admin token)
//
// --addr (or TICKETCTL_ADDR) takes the nodes of a cluster as a list,
// http://a:7980,http://b:7980: ticketctl moves past one that cannot serve.
// renew and release need the holder too: --holder H, or TICKETCTL_HOLDER.
// Flags may come before or after the command. Exit status: 0 ok, 1 the
// server refused or could not be reached, 2 bad usage; run exits with
// CMD's status, or 75 when the ticket could not be had or was lost.
// SIGINT and SIGTERM end wait and watch, and make run stop CMD (SIGTERM to
// its process group, SIGKILL after the grace) and release. The logic is in
// node/api/ctl; this file wires the process to it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/internal/version"
	"github.com/tckclk/tckclk/node/api/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Main(ctx, os.Args[1:], processEnv())
	stop()
	os.Exit(code)
}

// processEnv is the real process: its streams, environment and clock;
// token files are read with the secret rules (mode 0600 or stricter).
func processEnv() ctl.Env {
	return ctl.Env{
		Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin,
		Getenv:     os.LookupEnv,
		Now:        time.Now,
		ReadSecret: secret.ReadFileRaw,
		Version:    version.String("ticketctl"),
	}
}
