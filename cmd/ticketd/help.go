package main

import (
	"fmt"
	"io"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node"
)

const usageHead = `usage: ticketd [--config FILE] [--data-dir DIR] [--http ADDR] [--print-config] [--KEY VALUE ...]
       ticketd recover --from DATA_DIR --node-id NEW --data-dir NEW_DIR [...]   (ticketd recover --help)
       ticketd restore --from-snapshot FILE --node-id NEW --data-dir NEW_DIR [...]   (ticketd restore --help)
       ticketd --version | --help

Runs one ticketing node (SPEC §4): named leases with fencing tokens, kept
durable with Raft in the data directory. With no configuration it is a
single node with data in ` + node.DefaultDataDir + ` and the API on ` + node.DefaultAPIAddr + `,
trusting the host clock but watching it for rollbacks and steps; with
clock.agent_addr(s) it proves its clock through TCKCLK/2 agents first and
fails closed (SPEC §3).

options:
  --config FILE     ticketd.yaml (strict: unknown keys are errors); flags override it
  --data-dir DIR    the data directory, as cluster.raft.data_dir (default ` + node.DefaultDataDir + `)
  --http ADDR       the API's HOST:PORT, as api.addr (default ` + node.DefaultAPIAddr + `)
  --print-config    print the effective configuration (secrets redacted) and exit
  --version         print the version and exit
  --debug.pprof ADDR  serve Go's pprof profiles on a loopback HOST:PORT
                    (block and mutex profiling on; for benchmarks, off by default)
  -h, --help        print this help and exit

configuration keys (each a key of ticketd.yaml too; numbers in plain decimal,
durations like 500ms or 2s, lists comma-separated, booleans --KEY or
--KEY=false; secrets come only from files or the environment, never flags):
`

const usageTail = `
exit status:
  0  stopped cleanly (SIGINT or SIGTERM), or --help, --version, --print-config
  1  runtime failure: the clock failed its check or went FAILED, the data
     directory is damaged, a listener could not open
  2  bad usage or configuration, including a data directory whose Δ or node
     ID contradicts the configuration, or one that is retired
`

func writeUsage(w io.Writer, keys *config.KeyFlags) {
	fmt.Fprint(w, usageHead)
	config.WriteKeyHelp(w, keys.Keys())
	fmt.Fprint(w, usageTail)
}
