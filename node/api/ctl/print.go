package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

type printer struct {
	out  io.Writer
	json bool
	now  func() time.Time
}

func (p printer) table() *tabwriter.Writer {
	return tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
}

// wall shows a Unix ms instant in UTC with how far it is from now.
func (p printer) wall(ms uint64) string {
	t := time.UnixMilli(int64(ms)).UTC()
	d := t.Sub(p.now()).Round(100 * time.Millisecond)
	rel := "in " + d.String()
	if d < 0 {
		rel = (-d).String() + " ago"
	}
	return t.Format("2006-01-02T15:04:05.000Z") + " (" + rel + ")"
}

// LeaseJSON is what grant and renew print with --json: the server's answer
// plus the local deadline, the value to trust (SPEC §4).
type LeaseJSON struct {
	wire.Grant
	// LocalDeadlineInMs is how long from now (when ticketctl printed) the
	// ticket may be trusted: send time + remaining × (1 − 500 ppm) − now.
	LocalDeadlineInMs int64 `json:"local_deadline_in_ms"`
	// LocalDeadlineUnixMs is the same instant on this host's wall clock,
	// for logs; a script should count LocalDeadlineInMs instead.
	LocalDeadlineUnixMs int64 `json:"local_deadline_unix_ms"`
}

func (p printer) lease(l *client.Lease) {
	left := l.Deadline.Sub(p.now())
	if p.json {
		printJSON(p.out, LeaseJSON{Grant: l.Grant, LocalDeadlineInMs: left.Milliseconds(), LocalDeadlineUnixMs: l.Deadline.UnixMilli()})
		return
	}
	w := p.table()
	fmt.Fprintf(w, "ticket\t%s\n", l.Name)
	fmt.Fprintf(w, "holder\t%s\n", showHolder(l.Holder))
	fmt.Fprintf(w, "token\t%d\n", l.Token)
	fmt.Fprintf(w, "lease\t%ds\n", l.LeaseS)
	fmt.Fprintf(w, "valid before\t%s  conservative, leader's clock\n", p.wall(l.ConservativeValidBeforeUnixMs))
	fmt.Fprintf(w, "local deadline\tin %s  send time + %d ms × (1 − 500 ppm): trust the token until then\n", left.Round(time.Millisecond), l.RemainingMs)
	w.Flush()
}

func (p printer) released(r *wire.Released) {
	if p.json {
		printJSON(p.out, r)
		return
	}
	fmt.Fprintf(p.out, "released %s (holder %s, token %d)\n", r.Name, showHolder(r.Holder), r.Token)
}

// revoked prints a Revoke's answer: the ticket as get shows it, and what
// it means for its holder.
func (p printer) revoked(t *wire.Ticket) {
	if p.json {
		printJSON(p.out, t)
		return
	}
	fmt.Fprintf(p.out, "revoked %s (holder %s, token %d): it can no longer be renewed; it frees at its server expiry %s, or when its holder releases it\n",
		t.Name, showHolder(t.Holder), t.Token, p.wall(t.ServerExpiryUnixMs))
}

func (p printer) tickets(ts []wire.Ticket, truncated bool, raw any) {
	if p.json {
		printJSON(p.out, raw)
		return
	}
	if len(ts) == 0 {
		fmt.Fprintln(p.out, "no tickets")
		return
	}
	w := p.table()
	fmt.Fprintln(w, "NAME\tHOLDER\tTOKEN\tLEASE\tVALID BEFORE (conservative)\tSERVER EXPIRY (not a client deadline)")
	for _, t := range ts {
		tok := strconv.FormatUint(t.Token, 10)
		if t.Revoked {
			tok += " (revoked)" // SPEC §4: no renew; frees at the server expiry
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%ds\t%s\t%s\n", t.Name, showHolder(t.Holder), tok, t.LeaseS,
			p.wall(t.ConservativeValidBeforeUnixMs), p.wall(t.ServerExpiryUnixMs))
	}
	w.Flush()
	if truncated {
		fmt.Fprintf(p.out, "(more tickets match: narrow --prefix or raise --limit)\n")
	}
}

func (p printer) status(s *wire.Status) {
	if p.json {
		printJSON(p.out, s)
		return
	}
	w := p.table()
	ready := "no"
	if s.Ready {
		ready = "yes"
	}
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	row("node", s.NodeID+" ("+s.Mode+")")
	row("role", s.Role)
	row("leader", s.Leader)
	row("ready", ready+", stage "+s.Stage+reasonSuffix(s.Reason))
	row("Δ", strconv.FormatUint(s.DeltaMs, 10)+" ms")
	row("tickets", strconv.Itoa(s.TicketsActive))
	row("raft", fmt.Sprintf("term %d, last index %d, commit %d, applied %d, snapshot %d",
		s.Raft.Term, s.Raft.LastIndex, s.Raft.CommitIndex, s.Raft.AppliedIndex, s.Raft.LastSnapshotIndex))
	row("clock", p.clock(s.Clock))
	if s.HoldOffUntilUnixMs > 0 {
		row("hold-off", "Grant and Expire refused until "+p.wall(s.HoldOffUntilUnixMs))
	}
	w.Flush()
}

func (p printer) clock(c wire.ClockStatus) string {
	clock := c.Source + ", stage " + c.Stage
	if c.Healthy {
		clock += ", healthy"
	} else {
		clock += ", UNHEALTHY"
	}
	if c.BoundMs > 0 {
		clock += fmt.Sprintf(", bound %d ms", c.BoundMs)
	}
	if c.LastSampleUnixMs > 0 {
		clock += ", last sample " + p.wall(c.LastSampleUnixMs)
	}
	if c.DevReference {
		clock += ", DEVELOPMENT REFERENCE"
	}
	return clock + reasonSuffix(c.Reason)
}

// showHolder prints a holder for a table: as is, or quoted when it holds a
// space or a quote (SPEC §4 allows spaces, even leading, trailing or only
// spaces), so the column stays readable and unambiguous.
func showHolder(h string) string {
	if strings.ContainsAny(h, " \"") {
		return strconv.Quote(h)
	}
	return h
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}

func (p printer) members(m *wire.Members) {
	if p.json {
		printJSON(p.out, m)
		return
	}
	w := p.table()
	gossip := false
	for _, x := range m.Members {
		gossip = gossip || x.Gossip != ""
	}
	if !gossip {
		fmt.Fprintln(w, "ID\tADDRESS\tSUFFRAGE\tLEADER")
	} else {
		fmt.Fprintln(w, "ID\tGEN\tADDRESS\tSUFFRAGE\tLEADER\tGOSSIP\tDOMAIN\tCLOCK\tBOUND / Δ/2")
	}
	for _, x := range m.Members {
		leader := ""
		if x.Leader {
			leader = "*"
		}
		suff := x.Suffrage
		if suff == "" {
			suff = "-"
		}
		if !gossip {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", x.ID, x.Address, suff, leader)
			continue
		}
		clock := x.Clock
		if x.Retired {
			clock += " (retired)"
		}
		gen := "-"
		if x.Generation > 0 {
			gen = strconv.Itoa(x.Generation)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d / %d ms\n", x.ID, gen, x.Address, suff, leader,
			dash(x.Gossip), dash(x.FailureDomain), dash(clock), x.ClockBoundMs, x.BoundLimitMs)
	}
	w.Flush()
	if len(m.RetiredNodeIDs) > 0 {
		// SPEC §3.4: never served or added again.
		fmt.Fprintf(p.out, "retired NodeIds: %s\n", strings.Join(m.RetiredNodeIDs, ", "))
	}
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// probe prints a health answer's first line, at most 200 bytes (the body
// comes from whatever answers --addr).
func (p printer) probe(body []byte) {
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	fmt.Fprintln(p.out, line)
}
