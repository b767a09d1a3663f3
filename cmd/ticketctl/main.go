// Command ticketctl is the ticketd command-line client (SPEC §8):
//
//	ticketctl [--addr http://127.0.0.1:7980] grant NAME --holder H --lease 30
//	          renew NAME --token N --lease 30 | release NAME --token N | get NAME
//	          | list [--prefix P] | status | cluster      (--json on every command)
//
// renew and release need the holder too: --holder H, or TICKETCTL_HOLDER.
// Flags may come before or after the command. Exit status: 0 ok, 1 the
// server refused or could not be reached, 2 bad usage.
package main

import (
	"context"
	"os"
	"time"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv, time.Now))
}
