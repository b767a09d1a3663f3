package main

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// A failover trial explains itself: ticketd's nodes log at info during
// the failover section, and after each trial the survivors' lines from
// the failure to the first successful lock become its timeline
// (failover.json, failoverResult.Timelines; one line of the run's output
// each): how each survivor saw its mesh session to the leader end
// (peer_gone: the crash failover watches only those), when it shortened
// its timeouts, every candidacy, pre-vote and election, the new leader
// ready, and the probes: how many, which answered first, when it started
// and through which survivor, and why the others failed.

// foEvent is one line of a survivor's log, relative to the failure.
type foEvent struct {
	AtMs int64  `json:"at_ms"` // since the failure (the logs' resolution: 1 ms)
	Node string `json:"node"`
	What string `json:"what"`
}

// probeStats are a trial's probes (firstSuccess).
type probeStats struct {
	Started  int           `json:"started"`
	Winner   int           `json:"winner,omitempty"`            // the first probe to succeed (0: none)
	WinnerAt time.Duration `json:"winner_started_ns,omitempty"` // when it started, since the failure
	// GrantedAt is when its lock was acquired, since the failure (the
	// trial's figure is when it was released: a whole lock cycle).
	GrantedAt time.Duration       `json:"winner_granted_ns,omitempty"`
	Via       string              `json:"via,omitempty"`    // the survivor it went through
	Errors    map[string]probeErr `json:"errors,omitempty"` // probes that failed before it, by error
}

// probeErr counts the probes that failed with one error, and when the
// last of them failed, since the failure.
type probeErr struct {
	N    int           `json:"n"`
	Last time.Duration `json:"last_ns"`
}

// foTimeline is one trial as the bench and the survivors saw it.
type foTimeline struct {
	Trial  int           `json:"trial"`
	Failed string        `json:"failed_node,omitempty"`
	Took   time.Duration `json:"took_ns"` // to the first successful lock (0: none)
	Probe  probeStats    `json:"probe"`
	Events []foEvent     `json:"events,omitempty"`
}

// foLine maps a log message (its start) to an event's text; the
// numbers it names are taken from the line by the patterns, and the
// extra fields the line has are added.
type foLine struct {
	prefix, what string
	extra        []string
}

var foLines = []foLine{
	{"crash failover: the mesh session to the leader ended", "timeouts shortened (silent %silent_ms ms", []string{"rank", "turn"}},
	{"crash failover: a leader is known again", "timeouts restored", nil},
	{"heartbeat timeout reached, starting election", "heartbeat timeout", nil},
	{"Election timeout reached", "election timeout", nil},
	{"entering candidate state", "candidate (term %term)", nil},
	{"pre-vote successful", "pre-vote won (%refused refused)", nil},
	{"pre-vote campaign failed", "pre-vote lost (%refused refused)", nil},
	{"rejecting pre-vote request since we have a leader", "refused a pre-vote: still follows the old leader", nil},
	{"rejecting pre-vote request", "refused a pre-vote", nil},
	{"rejecting vote request", "refused a vote", nil},
	{"failed to persist vote", "failed to persist a vote", nil},
	{"election won", "elected (term %term)", nil},
	{"entering follower state", "follower", nil},
	{"leader ready", "leader ready", nil},
}

var (
	foTime = regexp.MustCompile(`^time=(\S+)`)
	foMsg  = regexp.MustCompile(`msg="((?:[^"\\]|\\.)*)"`)
	foNum  = regexp.MustCompile(`[ "](silent_ms|term|refused|rank|turn)=(\w+)`)
	// a probe's own name in an error
	foProbeName = regexp.MustCompile(`failover-probe-\d+`)
)

// survivorEvents reads node's log (at path) for the events between from
// and to; the ending of its mesh session to leader is one of them.
func survivorEvents(path, node, leader string, from, to time.Time) ([]foEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []foEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		tm := foTime.FindStringSubmatch(line)
		if tm == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, tm[1])
		// The logs' times are truncated to the ms: keep the ms of the
		// failure and of the success.
		if err != nil || at.Before(from.Truncate(time.Millisecond)) || at.After(to) {
			continue
		}
		if what := foEventOf(line, leader); what != "" {
			out = append(out, foEvent{AtMs: at.Sub(from).Round(time.Millisecond).Milliseconds(), Node: node, What: what})
		}
	}
	return out, sc.Err()
}

// foEventOf is line's event ("" when it is none of foLines).
func foEventOf(line, leader string) string {
	m := foMsg.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	msg := m[1]
	if msg == "mesh: session closed" {
		if !strings.Contains(line, " peer_id="+leader+" ") {
			return ""
		}
		gone := strings.Contains(line, "peer_gone=true")
		return fmt.Sprintf("mesh session to the leader ended (peer_gone=%v)", gone)
	}
	for _, l := range foLines {
		if !strings.HasPrefix(msg, l.prefix) {
			continue
		}
		what := l.what
		for _, n := range foNum.FindAllStringSubmatch(line, -1) {
			what = strings.Replace(what, "%"+n[1], n[2], 1)
			if slices.Contains(l.extra, n[1]) {
				what += ", " + n[1] + " " + n[2]
			}
		}
		if strings.Count(what, "(") > strings.Count(what, ")") {
			what += ")"
		}
		return what
	}
	return ""
}

// timeline is the trial's timeline from the survivors' logs (procs other
// than the failed one, names ending in their NodeId); the logs' trouble
// becomes an event.
func trialTimeline(trial int, procs []*proc, failed int, failedAt time.Time, took time.Duration, ps probeStats) foTimeline {
	t := foTimeline{Trial: trial, Took: took, Probe: ps}
	nodeOf := func(p *proc) string { return p.name[strings.LastIndex(p.name, "-node-")+1:] }
	if failed >= 0 && failed < len(procs) {
		t.Failed = nodeOf(procs[failed])
	}
	to := failedAt.Add(took)
	if took == 0 {
		to = failedAt.Add(time.Minute)
	}
	for i, p := range procs {
		if i == failed || !strings.Contains(p.name, "-node-") {
			continue
		}
		ev, err := survivorEvents(p.log, nodeOf(p), t.Failed, failedAt, to)
		if err != nil {
			ev = append(ev, foEvent{Node: nodeOf(p), What: "log unreadable: " + err.Error()})
		}
		t.Events = append(t.Events, ev...)
	}
	slices.SortStableFunc(t.Events, func(a, b foEvent) int { return int(a.AtMs - b.AtMs) })
	return t
}

// line is the timeline in one line: the events, then the probes.
func (t foTimeline) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trial %d (%s failed, %v):", t.Trial, t.Failed, t.Took.Round(time.Millisecond))
	for _, e := range t.Events {
		fmt.Fprintf(&b, " +%d %s %s;", e.AtMs, e.Node, e.What)
	}
	p := t.Probe
	if p.Winner > 0 {
		fmt.Fprintf(&b, " probe %d of %d (started +%d via %s, granted +%d) succeeded first", p.Winner, p.Started, p.WinnerAt.Milliseconds(), p.Via, p.GrantedAt.Milliseconds())
	} else {
		fmt.Fprintf(&b, " none of %d probes succeeded", p.Started)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Errors)) {
		fmt.Fprintf(&b, "; %d failed (the last +%d): %s", p.Errors[k].N, p.Errors[k].Last.Milliseconds(), k)
	}
	return b.String()
}

// briefProbeErr is err as probeStats.Errors counts it: the probe's own
// name left out, at most 160 bytes.
func briefProbeErr(err error) string {
	s := foProbeName.ReplaceAllString(err.Error(), "failover-probe-N")
	if len(s) > 160 {
		s = strings.ToValidUTF8(s[:160], "") + "…"
	}
	return s
}
