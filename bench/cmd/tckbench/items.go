package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// The report's sections: each switchable with -sections so a run can do
// only it.
//
//	load       ticketd vs etcd (main.go)
//	agent      the agent vs a bare one-line TCP server (agentfloor.go)
//	failover   clock-failure, ticketd and etcd kill -9 and lost-machine
//	           failover (clockfailover.go, failover.go)
//	tightness  the node's running bound vs chrony's root distance
//	           (tightness.go)
//	scale      active tickets: RSS, snapshot, restore, a new node's
//	           catch-up (scale.go)
var allSections = []string{"load", "agent", "failover", "tightness", "scale"}

// itemOptions are the flags of those sections.
type itemOptions struct {
	sections      []string
	failoverKinds []string // clock, ticketd, etcd
	agentClients  []int
	agentDuration time.Duration
	agentWarmup   time.Duration
	agentRounds   int
	tightDuration time.Duration
	tightEvery    time.Duration
	chronyd       string
	render        string // re-write the report from this report.json, run nothing
	scale         []int  // scale section's ticket counts
	scaleClients  int
	scaleBatch    int
	scaleLease    int  // the fill's lease_s
	scaleKeep     bool // renew the fill's tickets until the measurements end (keeper)
}

func (it itemOptions) on(section string) bool { return slices.Contains(it.sections, section) }

// allFailoverKinds are -failover-kinds' names.
var allFailoverKinds = []string{"clock", "ticketd", "etcd", "ticketd-lost", "etcd-lost"}

// failoverOf reports whether the failover section runs kind.
func (it itemOptions) failoverOf(kind string) bool {
	return it.on("failover") && slices.Contains(it.failoverKinds, kind)
}

// addItemFlags registers the sections' flags; the returned function
// validates and parses them after fs.Parse (an error names the flag).
func addItemFlags(fs *flag.FlagSet, o *itemOptions) func() error {
	sections := fs.String("sections", strings.Join(allSections, ","), "sections to run (comma-separated): "+strings.Join(allSections, ", "))
	kinds := fs.String("failover-kinds", strings.Join(allFailoverKinds, ","), "failover section: which failovers (comma-separated): clock (FAILED leader, planned transfer), ticketd and etcd (kill -9 of the leader), ticketd-lost and etcd-lost (the leader's machine lost: its network namespace's link down; needs root and ip)")
	agentClients := fs.String("agent-clients", "1,16,64,256", "agent section: concurrent clients (comma-separated)")
	fs.DurationVar(&o.agentDuration, "agent-duration", time.Second, "agent section: measured time per target per round")
	fs.DurationVar(&o.agentWarmup, "agent-warmup", 300*time.Millisecond, "agent section: unmeasured time before each measurement")
	fs.IntVar(&o.agentRounds, "agent-rounds", 4, "agent section: alternating rounds (agent, bare, agent, bare, …); more short rounds beat fewer long ones on a noisy machine")
	fs.DurationVar(&o.tightDuration, "tightness-duration", 30*time.Second, "tightness section: how long to sample (the issue's figure: 10m)")
	fs.DurationVar(&o.tightEvery, "tightness-every", time.Second, "tightness section: time between samples")
	fs.StringVar(&o.render, "render", "", "run nothing: re-write the report (-out) from this report.json of an earlier run, given that run's flags (its meta.args) too")
	scale := fs.String("scale", "20000,50000", "scale section: active-ticket counts, each in a fresh 3-node cluster (comma-separated; the issue's figure: 1000000 with -scale-batch)")
	fs.IntVar(&o.scaleClients, "scale-clients", 256, "scale section: concurrent clients filling the cluster")
	fs.IntVar(&o.scaleBatch, "scale-batch", 0, "scale section: grants per POST /v1/batch (the ticketd built must have it; 0: one Grant request each)")
	fs.IntVar(&o.scaleLease, "scale-lease", scaleLease, "scale section: the fill's lease_s (1..=250)")
	fs.BoolVar(&o.scaleKeep, "scale-keep", true, "scale section, with -scale-batch: renew every ticket through POST /v1/batch before its lease ends, from the fill's start to the last measurement, so that a fill longer than a lease still ends with every ticket active")
	fs.StringVar(&o.chronyd, "chronyd", lookChronyd(), "tightness section: the chronyd binary (Debian's chrony); absent: the section is skipped with a message")
	return func() error {
		var err error
		if o.sections, err = parseList("-sections", *sections, allSections); err != nil {
			return err
		}
		if o.failoverKinds, err = parseList("-failover-kinds", *kinds, allFailoverKinds); err != nil {
			return err
		}
		if o.agentClients, err = ints("-agent-clients", *agentClients); err != nil {
			return err
		}
		if o.scale, err = ints("-scale", *scale); err != nil {
			return err
		}
		switch {
		case o.agentDuration <= 0 || o.agentWarmup < 0 || o.agentRounds < 1:
			return errors.New("-agent-duration and -agent-rounds must be positive, -agent-warmup not negative")
		case o.tightEvery <= 0 || o.tightDuration < o.tightEvery:
			return errors.New("-tightness-every must be positive and -tightness-duration at least one -tightness-every")
		case o.scaleClients < 1 || o.scaleBatch < 0:
			return errors.New("-scale-clients must be ≥ 1 and -scale-batch ≥ 0")
		case o.scaleLease < 1 || o.scaleLease > 250:
			return fmt.Errorf("-scale-lease %d is outside 1..=250 (SPEC §4's lease_s)", o.scaleLease)
		}
		return nil
	}
}

// parseList parses a comma-separated list of known names (known), no
// repeats, at least one; an error names flagName.
func parseList(flagName, s string, known []string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(known, f) {
			return nil, fmt.Errorf("%s: %q is not one of %s", flagName, f, strings.Join(known, ", "))
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("%s: %q named twice", flagName, f)
		}
		out = append(out, f)
	}
	return out, nil
}

// render re-writes the report from a report.json (after a change to the
// report's layout, or a merge): args, less -render and its value, must
// be the flags the run was made with, so the report's text matches it.
func render(o options, args []string, stdout io.Writer) error {
	b, err := os.ReadFile(o.items.render)
	if err != nil {
		return fmt.Errorf("-render: %w", err)
	}
	var rep struct {
		Meta     meta             `json:"meta"`
		Results  []measured       `json:"results"`
		Failover []failoverResult `json:"failover"`
		Items    itemResults      `json:"items"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("-render: %s: %w", o.items.render, err)
	}
	own, run := withoutFlags(args, "render", "out"), withoutFlags(strings.Fields(rep.Meta.Args), "out")
	if got := strings.Join(own, " "); got != strings.Join(run, " ") {
		return fmt.Errorf("-render: %s was made with the flags %q; give those (and -render), not %q", o.items.render, rep.Meta.Args, got)
	}
	if err := writeReport(o, rep.Meta, rep.Results, rep.Failover, rep.Items); err != nil {
		return err
	}
	printSummary(stdout, o, rep.Results, rep.Failover, rep.Items)
	fmt.Fprintf(stdout, "tckbench: wrote %s from %s\n", o.out, o.items.render)
	return nil
}

// withoutFlags is args less the named flags and their values (-name V,
// --name V, -name=V).
func withoutFlags(args []string, names ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if strings.HasPrefix(args[i], "-") && slices.Contains(names, name) {
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// itemResults are the sections' figures, for the report and report.json.
type itemResults struct {
	Agent     *agentFloor          `json:"agent_floor,omitempty"`
	Clock     *clockFailoverResult `json:"clock_failover,omitempty"`
	Tightness *tightnessResult     `json:"tightness,omitempty"`
	Scale     *scaleSection        `json:"scale,omitempty"`
	Skipped   []string             `json:"skipped,omitempty"` // a section that could not run, and why
}

// runItems runs the agent, clock-failover and tightness sections (the
// kill -9 and lost-machine failovers run in bench, failovers).
func runItems(ctx context.Context, e *env, o options, stdout io.Writer, clock *stepClock) (itemResults, error) {
	var r itemResults
	if o.items.on("agent") {
		a, err := runAgentFloor(ctx, e, o.items, stdout)
		if err != nil {
			return r, fmt.Errorf("agent section: %w", err)
		}
		r.Agent = a
		clock.mark("agent")
	}
	if o.items.failoverOf("clock") && o.failover > 0 {
		c := clockFailover(ctx, e, o.failover, stdout)
		r.Clock = &c
		clock.mark("failover clock")
	}
	if o.items.on("tightness") {
		if o.items.chronyd == "" {
			msg := "tightness: skipped, no chronyd (install Debian's chrony)"
			fmt.Fprintln(stdout, "tckbench: "+msg)
			r.Skipped = append(r.Skipped, msg)
		} else {
			t, err := runTightness(ctx, e, o.items, stdout)
			if err != nil {
				return r, fmt.Errorf("tightness section: %w", err)
			}
			r.Tightness = t
			clock.mark("tightness")
		}
	}
	if o.items.on("scale") {
		r.Scale = runScale(ctx, e, o, stdout)
		clock.mark("scale")
	}
	return r, ctx.Err()
}
