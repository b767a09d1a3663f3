package ctl

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// healthArgs is ticketctl cluster health [--wait D] [--voters N].
type healthArgs struct {
	wait   time.Duration // 0: ask once
	voters int           // at least this many voters (0: any)
}

// healthPoll is how often cluster health --wait asks again.
const healthPoll = 500 * time.Millisecond

// clusterHealth is `ticketctl cluster health` (SPEC §3.5): it prints the
// cluster's health and returns nil only when the cluster is healthy and
// tolerates the most failures its voter count allows (and has at least
// --voters voters). With --wait it asks every healthPoll until then or
// until the wait passes, saying on progress what it still waits for.
// Each request is bounded by --timeout.
func clusterHealth(ctx context.Context, c *client.Client, g *globals, a *healthArgs, p printer, progress io.Writer) error {
	deadline := time.Now().Add(a.wait)
	said := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		h, err := c.ClusterHealth(rctx)
		cancel()
		why := notYet(h, err, a.voters, g.addr)
		last := why == "" || a.wait <= 0 || !time.Now().Before(deadline) || ctx.Err() != nil
		if last {
			if h == nil {
				return err
			}
			p.health(h)
			if why == "" {
				return nil
			}
			if a.wait > 0 {
				return fmt.Errorf("not healthy after --wait %v: %s", a.wait, why)
			}
			return fmt.Errorf("not healthy: %s", why)
		}
		if why != said {
			fmt.Fprintf(progress, "waiting: %s\n", why)
			said = why
		}
		t := time.NewTimer(healthPoll)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// notYet says what keeps the cluster from passing, or "".
func notYet(h *wire.ClusterHealth, err error, voters int, addr string) string {
	if err != nil {
		return "no answer: " + describeErr(err, addr)
	}
	var why []string
	if h.Leader == "" {
		why = append(why, "no leader")
	}
	for _, s := range h.Servers {
		if s.Suffrage == "voter" && !s.Healthy {
			why = append(why, s.ID+": "+s.Why)
		}
	}
	if h.Voters == 0 {
		why = append(why, "no voters known")
	}
	if h.FailureTolerance < h.MaxFailureTolerance {
		why = append(why, fmt.Sprintf("failure tolerance %d of %d", h.FailureTolerance, h.MaxFailureTolerance))
	}
	if h.Voters < voters {
		why = append(why, fmt.Sprintf("%d voters, --voters %d", h.Voters, voters))
	}
	if len(why) == 0 && !h.Healthy {
		why = append(why, "unhealthy")
	}
	return strings.Join(why, "; ")
}

func (p printer) health(h *wire.ClusterHealth) {
	if p.json {
		printJSON(p.out, h)
		return
	}
	state := "healthy"
	if !h.Healthy {
		state = "UNHEALTHY"
	}
	view := "the leader's view"
	if !h.LeaderView {
		view = "a follower's view: last contact known for itself only"
	}
	fmt.Fprintf(p.out, "%s: failure tolerance %d of %d, %d of %d voters healthy, leader %s (answered by %s, %s)\n",
		state, h.FailureTolerance, h.MaxFailureTolerance, h.HealthyVoters, h.Voters, dash(h.Leader), dash(h.ServedBy), view)
	w := p.table()
	fmt.Fprintln(w, "ID\tSUFFRAGE\tLEADER\tGOSSIP\tCLOCK\tBOUND\tLAST CONTACT\tINDEX\tLAG\tVERSION\tHEALTHY")
	for _, s := range h.Servers {
		leader := ""
		if s.Leader {
			leader = "*"
		}
		healthy := "yes"
		if !s.Healthy {
			healthy = "NO: " + s.Why
		}
		contact := "-"
		if s.LastContactMs != nil {
			contact = (time.Duration(*s.LastContactMs) * time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d ms\t%s\t%s\t%s\t%s\t%s\n", s.ID, dash(s.Suffrage), leader, dash(s.Gossip), dash(s.Clock),
			s.ClockBoundMs, contact, optional(s.LastIndex), optional(s.LogLag), dash(s.Version), healthy)
	}
	w.Flush()
}

func optional(v *uint64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatUint(*v, 10)
}
