package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node/api/client"
)

// Item 7: clock-bound tightness. chronyd -x serves its local clock
// (`local stratum 8`) as NTP on a loopback port; a second chronyd -x
// syncs from it (so its reference is a real NTP server, not chrony's own
// local clock, which the agent refuses); `tckclk-agent --chrony` reads
// the second one's tracking over its Unix command socket; a 3-node
// ticketd cluster uses that agent (no dev reference: the agent signs
// with the cluster's clock secret). Every -tightness-every the bench
// reads each node's running bound (/v1/status clock.bound_ms), its last
// sample's RTT (/metrics clock_sample_rtt_ms), the agent's uncertainty
// (/v1/status) and chrony's own root distance (`chronyc tracking`:
// root delay / 2 + root dispersion), and checks the target
// bound ≤ root distance + RTT + 2 ms per sample. Neither chronyd touches
// the system clock (-x).

// tightClockFlags: probes every second with a second's timeout (the
// default interval, so the running bound grows as in production); Δ
// stays wide (clockFlags) so a busy machine does not fail a node, which
// changes no bound.
// The nodes log at debug level in JSON: each kept sample's terms in ns
// ("clock health: sample kept"), which the report breaks the bound into.
var tightClockFlags = []string{"--clock.probe_interval_ms", "1000", "--clock.probe_timeout_ms", "1000", "--clock.dev_reference=false",
	"--log.level", "debug", "--log.format", "json"}

// tightSample is one sampling instant.
type tightSample struct {
	At           float64   `json:"t_s"` // seconds since sampling began
	RootDelayMs  float64   `json:"root_delay_ms"`
	RootDispMs   float64   `json:"root_dispersion_ms"`
	RootDistMs   float64   `json:"root_distance_ms"`
	AgentUncMs   uint64    `json:"agent_uncertainty_ms"`
	BoundMs      []float64 `json:"bound_ms"` // per node; -1 when the node did not answer (or was not healthy)
	RTTMs        []float64 `json:"rtt_ms"`   // per node; -1 unknown
	Met          []bool    `json:"met"`      // per node
	Unmeasurable int       `json:"unmeasurable,omitempty"`
}

type tightnessResult struct {
	Duration string        `json:"duration"`
	Every    string        `json:"every"`
	Chrony   string        `json:"chrony"`
	Samples  []tightSample `json:"samples"`
	Terms    []tightTerms  `json:"terms,omitempty"` // per node: the kept samples' SPEC §3.1 terms
}

// tightTerms summarises one node's kept samples during the sampling, from
// its debug log: SPEC §3.1's e_ns = rtt + u + |w1 − R| + 1 ms, each term's
// quantiles in ms (before the one rounding), and how often each whole-ms
// error bound came out.
type tightTerms struct {
	Kept       int            `json:"kept"`
	RTTMs      quantiles      `json:"rtt_ms"`
	UncMs      quantiles      `json:"uncertainty_ms"`
	OffsetMs   quantiles      `json:"offset_ms"` // |w1 − R×10^6|
	EMs        quantiles      `json:"e_ms"`      // the sum, before rounding up
	ErrorBound map[uint64]int `json:"error_bound_ms"`
	// PerTerm is the error bound the same samples get with each term
	// rounded up on its own (ceil(rtt) + u + ceil(|w1 − R|) + 1), as
	// before SPEC §3.1's one rounding: the baseline, on the same data.
	PerTerm map[uint64]int `json:"per_term_error_bound_ms"`
}

// quantiles of a term, ms.
type quantiles struct {
	P10, P50, P90, Max float64
}

func quantilesOf(v []float64) quantiles {
	if len(v) == 0 {
		return quantiles{}
	}
	v = slices.Clone(v)
	slices.Sort(v)
	at := func(p float64) float64 { return v[int(p*float64(len(v)-1))] }
	return quantiles{at(0.1), at(0.5), at(0.9), v[len(v)-1]}
}

// keptLine is the node's debug line for each kept sample (node/clockhealth).
type keptLine struct {
	Msg          string `json:"msg"`
	Time         time.Time
	RTTNs        uint64 `json:"rtt_ns"`
	UncMs        uint64 `json:"uncertainty_ms"`
	OffsetNs     uint64 `json:"offset_ns"`
	ENs          uint64 `json:"e_ns"`
	ErrorBoundMs uint64 `json:"error_bound_ms"`
}

// readTerms summarises the kept-sample lines of a node's JSON log written
// at or after since. A line that is not JSON (start-up text) is skipped.
func readTerms(path string, since time.Time) (tightTerms, error) {
	f, err := os.Open(path)
	if err != nil {
		return tightTerms{}, err
	}
	defer f.Close()
	t := tightTerms{ErrorBound: map[uint64]int{}, PerTerm: map[uint64]int{}}
	ceil := func(ns uint64) uint64 { return (ns + 999_999) / 1_000_000 }
	var rtt, unc, off, e []float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l keptLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "clock health: sample kept" || l.Time.Before(since) {
			continue
		}
		t.Kept++
		rtt, unc = append(rtt, float64(l.RTTNs)/1e6), append(unc, float64(l.UncMs))
		off, e = append(off, float64(l.OffsetNs)/1e6), append(e, float64(l.ENs)/1e6)
		t.ErrorBound[l.ErrorBoundMs]++
		t.PerTerm[ceil(l.RTTNs)+l.UncMs+ceil(l.OffsetNs)+1]++
	}
	if err := sc.Err(); err != nil {
		return tightTerms{}, fmt.Errorf("%s: %w", path, err)
	}
	t.RTTMs, t.UncMs, t.OffsetMs, t.EMs = quantilesOf(rtt), quantilesOf(unc), quantilesOf(off), quantilesOf(e)
	return t, nil
}

// tightTarget is the target for one sample.
func tightTarget(boundMs, rootDistMs, rttMs float64) bool {
	return boundMs <= rootDistMs+rttMs+2
}

// tracking is what the report reads of `chronyc tracking`.
type tracking struct {
	RefID          string
	Stratum        int
	SystemOffsetMs float64 // signed: + when the local clock is fast
	RootDelayMs    float64
	RootDispMs     float64
	Leap           string
}

func (t tracking) rootDistanceMs() float64 { return t.RootDelayMs/2 + t.RootDispMs }

// parseTracking parses `chronyc tracking` output (chrony 4's text
// form). An error names the line or field.
func parseTracking(s string) (tracking, error) {
	var t tracking
	seen := map[string]bool{}
	secs := func(key, v string) (float64, error) {
		f := strings.Fields(v)
		if len(f) < 2 || f[1] != "seconds" {
			return 0, fmt.Errorf("chronyc tracking: %s: %q is not \"N seconds …\"", key, v)
		}
		x, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("chronyc tracking: %s: %q is not a number", key, f[0])
		}
		if len(f) >= 3 && f[2] == "slow" {
			x = -x
		}
		return 1000 * x, nil
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var err error
		switch k {
		case "Reference ID":
			t.RefID, _, _ = strings.Cut(v, " ")
		case "Stratum":
			t.Stratum, err = strconv.Atoi(v)
			if err != nil {
				err = fmt.Errorf("chronyc tracking: Stratum: %q is not a number", v)
			}
		case "System time":
			t.SystemOffsetMs, err = secs(k, v)
		case "Root delay":
			t.RootDelayMs, err = secs(k, v)
		case "Root dispersion":
			t.RootDispMs, err = secs(k, v)
		case "Leap status":
			t.Leap = v
		default:
			continue
		}
		if err != nil {
			return tracking{}, err
		}
		seen[k] = true
	}
	for _, k := range []string{"Reference ID", "Root delay", "Root dispersion", "Leap status"} {
		if !seen[k] {
			return tracking{}, fmt.Errorf("chronyc tracking: no %q line", k)
		}
	}
	if t.RootDelayMs < 0 || t.RootDispMs < 0 {
		return tracking{}, errors.New("chronyc tracking: negative root delay or dispersion")
	}
	return t, nil
}

// metricValue reads an unlabelled gauge from Prometheus text.
func metricValue(text, name string) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return 0, fmt.Errorf("metric %s: %q is not a number", name, rest)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("metric %s: not found", name)
}

func lookChronyd() string {
	if p, err := exec.LookPath("chronyd"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/chronyd", "/sbin/chronyd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// chronyPair is the NTP server chronyd and its client chronyd.
type chronyPair struct {
	clientSock string // the client's Unix command socket (the agent reads it)
	cmdPort    int    // the client's UDP command port (chronyc reads it)
}

func (e *env) startChronyPair(ctx context.Context, chronyd string) (*chronyPair, error) {
	dir := filepath.Join(e.dir, "chrony")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := clustertest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	cp := &chronyPair{clientSock: filepath.Join(dir, "client.sock"), cmdPort: ports[1]}
	confs := map[string][]string{
		"server": {fmt.Sprintf("port %d", ports[0]), "bindaddress 127.0.0.1", "cmdport 0",
			"bindcmdaddress " + filepath.Join(dir, "server.sock"), "local stratum 8", "allow 127.0.0.1"},
		"client": {"port 0", fmt.Sprintf("cmdport %d", ports[1]), "bindcmdaddress 127.0.0.1",
			"bindcmdaddress " + cp.clientSock, fmt.Sprintf("server 127.0.0.1 port %d iburst minpoll 0 maxpoll 0", ports[0])},
	}
	for _, name := range []string{"server", "client"} {
		conf := append(confs[name], "pidfile "+filepath.Join(dir, name+".pid"), "driftfile "+filepath.Join(dir, name+".drift"))
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
		user := "-U"
		if os.Geteuid() == 0 {
			user = "-u root"
		}
		args := append([]string{"-x", "-d"}, strings.Fields(user)...)
		if _, err := e.start("chronyd-"+name, nil, chronyd, append(args, "-f", path)...); err != nil {
			return nil, err
		}
	}
	err = poll(ctx, 60*time.Second, e.procs[len(e.procs)-2:], func() error {
		t, err := cp.tracking(ctx)
		if err == nil && (t.RefID != "7F000001" || t.Leap == "Not synchronised") {
			err = fmt.Errorf("client chronyd: reference %s, leap %q", t.RefID, t.Leap)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the client chronyd never selected the server: %w", err)
	}
	return cp, nil
}

func (cp *chronyPair) tracking(ctx context.Context) (tracking, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(sctx, "chronyc", "-n", "-h", "127.0.0.1", "-p", strconv.Itoa(cp.cmdPort), "tracking").CombinedOutput()
	if err != nil {
		return tracking{}, fmt.Errorf("chronyc tracking: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return parseTracking(string(out))
}

func getBody(ctx context.Context, url string) ([]byte, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}

func runTightness(ctx context.Context, e *env, it itemOptions, stdout io.Writer) (*tightnessResult, error) {
	k := len(e.procs)
	defer e.stopFrom(k)
	cp, err := e.startChronyPair(ctx, it.chronyd)
	if err != nil {
		return nil, withLogs(err, e)
	}
	ports, err := clustertest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	agentAddr, agentHTTP := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	spec := clusterSpec{n: 3, prefix: "tight-", extra: tightClockFlags, noDevAgent: true,
		nodeAgent: func(i int, _, keys string) (string, error) {
			if i > 0 {
				return agentAddr, nil
			}
			a, err := e.start("tight-agent", nil, filepath.Join(e.bin, "tckclk-agent"), "--listen", agentAddr,
				"--http", strings.TrimPrefix(agentHTTP, "http://"), "--secret-file", filepath.Join(keys, "clock.secret"),
				"--chrony", "unix://"+cp.clientSock)
			if err != nil {
				return "", err
			}
			return agentAddr, poll(ctx, 30*time.Second, []*proc{a}, func() error {
				_, err := getBody(ctx, agentHTTP+"/readyz")
				return err
			})
		}}
	s, err := e.startTicketdSpec(ctx, spec)
	if err != nil {
		return nil, withLogs(err, e)
	}
	fmt.Fprintf(stdout, "tckbench: tightness: chrony pair, agent and 3 nodes up; sampling every %v for %v\n", it.tightEvery, it.tightDuration)
	first, _ := cp.tracking(ctx)
	res := &tightnessResult{Duration: it.tightDuration.String(), Every: it.tightEvery.String(),
		Chrony: fmt.Sprintf("client chronyd reference %s stratum %d", first.RefID, first.Stratum)}
	start := time.Now()
	tick := time.NewTicker(it.tightEvery)
	defer tick.Stop()
	for time.Since(start) < it.tightDuration {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		smp, err := sampleTightness(ctx, cp, agentHTTP, s, time.Since(start))
		if err != nil {
			return nil, err
		}
		res.Samples = append(res.Samples, smp)
	}
	for i, p := range s.procs {
		if p.exited() {
			return nil, fmt.Errorf("node %d exited during the sampling (log %s)", i+1, p.log)
		}
		terms, err := readTerms(p.log, start)
		if err != nil {
			return nil, err
		}
		res.Terms = append(res.Terms, terms)
	}
	return res, nil
}

func sampleTightness(ctx context.Context, cp *chronyPair, agentHTTP string, s *server, at time.Duration) (tightSample, error) {
	t, err := cp.tracking(ctx)
	if err != nil {
		return tightSample{}, err
	}
	smp := tightSample{At: at.Seconds(), RootDelayMs: t.RootDelayMs, RootDispMs: t.RootDispMs, RootDistMs: t.rootDistanceMs()}
	if b, err := getBody(ctx, agentHTTP+"/v1/status"); err == nil {
		var st struct {
			UncertaintyMs uint64 `json:"uncertainty_ms"`
		}
		if json.Unmarshal(b, &st) == nil {
			smp.AgentUncMs = st.UncertaintyMs
		}
	}
	for _, u := range s.addrs {
		bound, rtt, err := boundAndRTT(ctx, u)
		if err != nil {
			return tightSample{}, err
		}
		smp.BoundMs = append(smp.BoundMs, bound)
		smp.RTTMs = append(smp.RTTMs, rtt)
		ok := bound >= 0 && rtt >= 0 && tightTarget(bound, smp.RootDistMs, rtt)
		if bound < 0 || rtt < 0 {
			smp.Unmeasurable++
		}
		smp.Met = append(smp.Met, ok)
	}
	return smp, nil
}

// boundAndRTT reads a node's running bound (/v1/status) and the RTT of
// the sample it grows from (/metrics): the RTT is read between two
// status reads that name the same last sample, or the pair is read
// again (a sample landed in between), 3 tries; -1 for what could not
// be read (or a clock not healthy).
func boundAndRTT(ctx context.Context, url string) (bound, rtt float64, err error) {
	c, err := client.New(url)
	if err != nil {
		return -1, -1, err
	}
	status := func() (uint64, float64) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := c.Status(sctx)
		if err != nil || !st.Clock.Healthy {
			return 0, -1
		}
		return st.Clock.LastSampleUnixMs, float64(st.Clock.BoundMs)
	}
	for range 3 {
		at, b := status()
		r := -1.0
		if body, err := getBody(ctx, url+"/metrics"); err == nil {
			if v, err := metricValue(string(body), "clock_sample_rtt_ms"); err == nil {
				r = v
			}
		}
		if again, _ := status(); b < 0 || r < 0 || again == at {
			return b, r, nil
		}
	}
	return -1, -1, nil
}

// tightSummary is per node: samples met / measured, median and max bound.
type tightSummary struct {
	Met, Measured          int
	MedianBound, MaxBound  float64
	MedianTarget, MedianRD float64
	MedianRTT, MedianUnc   float64 // the node's sample RTT, the agent's uncertainty
}

func summarizeTightness(r *tightnessResult, node int) tightSummary {
	var s tightSummary
	var bounds, targets, rds, rtts, uncs []float64
	for _, x := range r.Samples {
		if node >= len(x.BoundMs) || x.BoundMs[node] < 0 || x.RTTMs[node] < 0 {
			continue
		}
		s.Measured++
		if x.Met[node] {
			s.Met++
		}
		bounds = append(bounds, x.BoundMs[node])
		targets = append(targets, x.RootDistMs+x.RTTMs[node]+2)
		rds = append(rds, x.RootDistMs)
		rtts = append(rtts, x.RTTMs[node])
		uncs = append(uncs, float64(x.AgentUncMs))
	}
	med := func(v []float64) float64 {
		if len(v) == 0 {
			return math.NaN()
		}
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	s.MedianBound, s.MedianTarget, s.MedianRD = med(bounds), med(targets), med(rds)
	s.MedianRTT, s.MedianUnc = med(rtts), med(uncs)
	if len(bounds) > 0 {
		s.MaxBound = slices.Max(bounds)
	}
	return s
}
