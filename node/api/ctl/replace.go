package ctl

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// defaultReplaceWait bounds how long cluster replace waits for NEW to be
// promoted.
const defaultReplaceWait = 60 * time.Second

// replaceArgs is ticketctl cluster replace OLD --with NEW [--wait D].
type replaceArgs struct {
	old, with string
	wait      time.Duration
	withSet   bool
	waitSet   bool
}

func bindReplace(fs *flag.FlagSet) *replaceArgs {
	ra := &replaceArgs{}
	fs.Func("with", "the NodeId that takes OLD's place", func(s string) error { ra.with, ra.withSet = s, true; return nil })
	return ra
}

// set: --with or --wait was given (cluster takes them only after replace).
func (ra *replaceArgs) set(fs *flag.FlagSet) bool {
	fs.Visit(func(f *flag.Flag) { ra.waitSet = ra.waitSet || f.Name == "wait" })
	return ra.withSet || ra.waitSet
}

// check validates the positional arguments of cluster: [replace OLD].
// wait is --wait (the command's shared flag); unset: defaultReplaceWait.
func (ra *replaceArgs) check(pos []string, wait time.Duration) (*replaceArgs, error) {
	switch {
	case len(pos) == 0 || pos[0] != "replace":
		if len(pos) == 0 {
			return nil, usagef("cluster takes --with only after replace OLD, --wait after replace OLD or health")
		}
		return nil, usagef("cluster: unknown subcommand %q (cluster, cluster health, or cluster replace OLD --with NEW)", pos[0])
	case len(pos) != 2:
		return nil, usagef("cluster replace needs exactly one OLD NodeId, got %d arguments", len(pos)-1)
	case pos[1] == "":
		return nil, usagef("cluster replace: OLD is empty")
	case ra.with == "":
		return nil, usagef("cluster replace %s needs --with NEW (the NodeId that takes its place)", pos[1])
	case ra.with == pos[1]:
		return nil, usagef("cluster replace: OLD and --with are both %q", pos[1])
	}
	ra.old, ra.wait = pos[1], defaultReplaceWait
	if ra.waitSet {
		ra.wait = wait
	}
	return ra, nil
}

// replaced is what cluster replace prints with --json.
type replaced struct {
	wire.Replaced
	OldInConfig bool   `json:"old_in_config"`
	WaitedMs    int64  `json:"waited_ms"`
	Result      string `json:"result"`
}

// replace asks the leader to replace OLD with NEW, then polls the members
// (each call bounded by timeout) until NEW is a voter and OLD has left the
// Raft configuration, or --wait passes.
func replace(ctx context.Context, c *client.Client, timeout time.Duration, ra *replaceArgs, p printer) error {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	res, err := c.Replace(cctx, ra.old, ra.with)
	cancel()
	if err != nil {
		return err
	}
	out := replaced{Replaced: *res, OldInConfig: true, Result: "pending"}
	deadline := start.Add(ra.wait)
	for ra.wait > 0 {
		mctx, mcancel := context.WithTimeout(ctx, timeout)
		m, err := c.Members(mctx)
		mcancel()
		if err == nil {
			out.OldInConfig, out.NewSuffrage = false, ""
			for _, x := range m.Members {
				switch x.ID {
				case ra.old:
					out.OldInConfig = x.Suffrage != ""
				case ra.with:
					out.NewSuffrage = x.Suffrage
				}
			}
			if out.NewSuffrage == "voter" && !out.OldInConfig {
				out.Result = "done"
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // poll interval
		}
	}
	out.WaitedMs = time.Since(start).Milliseconds()
	if p.json {
		printJSON(p.out, out)
	} else {
		switch out.Result {
		case "done":
			fmt.Fprintf(p.out, "replaced %s with %s: %s is a voter, %s left the Raft configuration (%v)\n", ra.old, ra.with, ra.with, ra.old, time.Since(start).Round(time.Millisecond))
		default:
			fmt.Fprintf(p.out, "%s retired; %s is in the Raft configuration as %s\n", ra.old, ra.with, dash(out.NewSuffrage))
		}
	}
	if ra.wait > 0 && out.Result != "done" {
		return fmt.Errorf("after --wait %v: %s is %s and %s %s; the reconciler promotes the best caught-up standby (ticketctl cluster shows the roles)",
			ra.wait, ra.with, dash(out.NewSuffrage), ra.old, map[bool]string{true: "is still in the Raft configuration", false: "has left"}[out.OldInConfig])
	}
	return nil
}
