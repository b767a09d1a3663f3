package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tckclk/tckclk/bench/internal/load"
	"github.com/tckclk/tckclk/protocol"
)

// TestMain lets the test binary be the agent section's bare server, as
// the tckbench binary is (runAgentFloor starts os.Executable()).
func TestMain(m *testing.M) {
	if addr := os.Getenv(bareEnv); addr != "" {
		if err := serveBare(addr, os.Getenv(bareLineEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func TestItemFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // the flag the message names
	}{
		{[]string{"-sections", "load,bogus"}, "-sections"},
		{[]string{"-sections", "agent,agent"}, "-sections"},
		{[]string{"-sections", ""}, "-sections"},
		{[]string{"-failover-kinds", "zookeeper"}, "-failover-kinds"},
		{[]string{"-agent-clients", "0"}, "-agent-clients"},
		{[]string{"-agent-clients", "1,x"}, "-agent-clients"},
		{[]string{"-agent-rounds", "0"}, "-agent-rounds"},
		{[]string{"-agent-duration", "0s"}, "-agent-duration"},
		{[]string{"-agent-warmup", "-1s"}, "-agent-warmup"},
		{[]string{"-tightness-every", "0s"}, "-tightness-every"},
		{[]string{"-tightness-duration", "1s", "-tightness-every", "2s"}, "-tightness-duration"},
		{[]string{"-failover", "-1"}, "-failover"},
		{[]string{"-scale", "0"}, "-scale"},
		{[]string{"-scale", "1e6"}, "-scale"},
		{[]string{"-scale-clients", "0"}, "-scale-clients"},
		{[]string{"-scale-batch", "-1"}, "-scale-batch"},
		{[]string{"-scale-lease", "0"}, "-scale-lease"},
		{[]string{"-scale-lease", "251"}, "-scale-lease"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: message %q does not name %s", c.args, errb.String(), c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: ran something: %s", c.args, out.String())
		}
	}
}

func TestWithoutFlags(t *testing.T) {
	got := withoutFlags([]string{"-failover", "2", "-out", "x.md", "--render=r.json", "-sections", "agent", "--out", "y", "-render", "r.json"}, "render", "out")
	if want := []string{"-failover", "2", "-sections", "agent"}; !slices.Equal(got, want) {
		t.Errorf("withoutFlags = %q, want %q", got, want)
	}
}

func TestParseList(t *testing.T) {
	got, err := parseList("-sections", " agent, failover", allSections)
	if err != nil || !slices.Equal(got, []string{"agent", "failover"}) {
		t.Fatalf("parseList = %v, %v", got, err)
	}
	it := itemOptions{sections: got, failoverKinds: []string{"clock"}}
	if it.on("load") || !it.on("agent") || !it.on("failover") || !it.failoverOf("clock") || it.failoverOf("etcd") {
		t.Errorf("on(), failoverOf(): %+v", it)
	}
	it.sections = []string{"agent"}
	if it.failoverOf("clock") {
		t.Error("failoverOf without the failover section")
	}
}

// chronyc tracking as chrony 4.3 prints it, synced to a loopback server.
const trackingOut = `Reference ID    : 7F000001 (127.0.0.1)
Stratum         : 9
Ref time (UTC)  : Tue Dec 01 14:40:00 2026
System time     : 0.000001500 seconds slow of NTP time
Last offset     : +0.000001234 seconds
RMS offset      : 0.000001234 seconds
Frequency       : 1.234 ppm slow
Residual freq   : +0.001 ppm
Skew            : 0.123 ppm
Root delay      : 0.000300000 seconds
Root dispersion : 0.000050000 seconds
Update interval : 1.0 seconds
Leap status     : Normal
`

func TestParseTracking(t *testing.T) {
	tr, err := parseTracking(trackingOut)
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if tr.RefID != "7F000001" || tr.Stratum != 9 || tr.Leap != "Normal" || !near(tr.RootDelayMs, 0.3) || !near(tr.RootDispMs, 0.05) || !near(tr.SystemOffsetMs, -0.0015) {
		t.Errorf("parseTracking = %+v", tr)
	}
	if rd := tr.rootDistanceMs(); !near(rd, 0.2) {
		t.Errorf("root distance %v ms, want 0.15 + 0.05 = 0.2", rd)
	}
	for name, bad := range map[string]string{
		"Root delay":      strings.Replace(trackingOut, "Root delay      : 0.000300000 seconds\n", "", 1),
		"Root dispersion": strings.Replace(trackingOut, "0.000050000 seconds", "fifty seconds", 1),
		"Stratum":         strings.Replace(trackingOut, ": 9", ": nine", 1),
		"Reference ID":    "506 Cannot talk to daemon\n",
		"negative":        strings.Replace(trackingOut, "0.000300000", "-0.000300000", 1),
		"NaN":             strings.Replace(trackingOut, "0.000050000", "NaN", 1),
		"unit":            strings.Replace(trackingOut, "0.000050000 seconds", "0.05 ms", 1),
	} {
		if _, err := parseTracking(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestMetricValue(t *testing.T) {
	text := "# HELP clock_sample_rtt_ms x\n# TYPE clock_sample_rtt_ms gauge\nclock_sample_rtt_ms_other 9\nclock_sample_rtt_ms{a=\"b\"} 8\nclock_sample_rtt_ms 3\n"
	if v, err := metricValue(text, "clock_sample_rtt_ms"); err != nil || v != 3 {
		t.Errorf("metricValue = %v, %v; want 3", v, err)
	}
	if _, err := metricValue("clock_sample_rtt_ms_other 9\n", "clock_sample_rtt_ms"); err == nil {
		t.Error("absent: no error")
	}
	if _, err := metricValue("clock_sample_rtt_ms x\n", "clock_sample_rtt_ms"); err == nil {
		t.Error("not a number: no error")
	}
}

func TestTargetsOfTheSections(t *testing.T) {
	if !tightTarget(5, 0.5, 2.5) || tightTarget(5.01, 0.5, 2.5) {
		t.Error("tightTarget: bound ≤ root distance + RTT + 2 at the boundary")
	}
	row := func(aTput, bTput, aP99, bP99 float64) floorRow {
		return floorRow{Agent: load.Result{CyclesPerS: aTput, P99Ms: aP99}, Bare: load.Result{CyclesPerS: bTput, P99Ms: bP99}}
	}
	if tp, p99 := floorMet(row(900, 1000, 12, 10)); !tp || !p99 {
		t.Errorf("0.9× and 1.2× exactly: met %v %v", tp, p99)
	}
	if tp, p99 := floorMet(row(899, 1000, 12.01, 10)); tp || p99 {
		t.Errorf("just past: met %v %v", tp, p99)
	}
	r := &tightnessResult{Samples: []tightSample{
		{RootDistMs: 1, BoundMs: []float64{4, -1}, RTTMs: []float64{1, 1}, Met: []bool{true, false}},
		{RootDistMs: 1, BoundMs: []float64{6, 3}, RTTMs: []float64{1, -1}, Met: []bool{false, false}},
		{RootDistMs: 2, BoundMs: []float64{5, 4}, RTTMs: []float64{1, 1}, Met: []bool{true, true}},
	}}
	if s := summarizeTightness(r, 0); s.Measured != 3 || s.Met != 2 || s.MedianBound != 5 || s.MaxBound != 6 || s.MedianTarget != 4 {
		t.Errorf("node 1: %+v", s)
	}
	if s := summarizeTightness(r, 1); s.Measured != 1 || s.Met != 1 || s.MaxBound != 4 {
		t.Errorf("node 2 (unanswered samples left out): %+v", s)
	}
	if got := countWords([]string{"offset", "bound", "offset"}); got != "offset ×2, bound ×1" {
		t.Errorf("countWords = %q", got)
	}
}

// fakeAgent answers each request with a response signed under key, the
// request's nonce and reference ref.
func fakeAgent(t *testing.T, key []byte, ref uint64) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, err := bufio.NewReader(c).ReadSlice('\n')
			if err == nil {
				req, err := protocol.ParseRequest(line[:len(line)-1])
				if err == nil {
					r := protocol.Response{Nonce: req.Nonce, ReferenceUnixMs: ref, UncertaintyMs: 2, Synced: true, SourceAgeMs: 5}
					protocol.Sign(key, &r)
					c.Write(protocol.EncodeResponse(&r))
				}
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// exchange does one exchange through addr and returns the verified answer.
func exchange(t *testing.T, addr string, keys protocol.KeyRing) (protocol.Response, error) {
	t.Helper()
	n, _ := protocol.NewNonce()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(protocol.EncodeRequest(protocol.Request{Nonce: n}))
	line, err := readAnswer(c)
	if err != nil {
		return protocol.Response{}, err
	}
	return protocol.ParseVerify(line, n, keys)
}

func TestLiarRelaysThenLies(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	keys := protocol.KeyRing{protocol.NewKey(key)}
	const ref = 1_700_000_000_000
	l, err := newLiar(fakeAgent(t, key, ref), key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	r, err := exchange(t, l.addr(), keys)
	if err != nil || r.ReferenceUnixMs != ref || r.UncertaintyMs != 2 || !r.Synced {
		t.Fatalf("honest relay: %+v, %v", r, err)
	}
	select {
	case <-l.firstLie:
		t.Fatal("a first lie before lying")
	default:
	}
	l.lying.Store(true)
	r, err = exchange(t, l.addr(), keys)
	if err != nil {
		t.Fatalf("the lie must verify under the same key: %v", err)
	}
	if want := uint64(ref + lieOffset.Milliseconds()); r.ReferenceUnixMs != want || r.UncertaintyMs != 2 || r.SourceAgeMs != 5 {
		t.Errorf("lie %+v, want reference %d and the rest unchanged", r, want)
	}
	select {
	case <-l.firstLie:
	default:
		t.Error("no first-lie instant recorded")
	}
}

func TestExchangerAgainstBareServer(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	keys := protocol.KeyRing{protocol.NewKey(key)}
	fixed := protocol.Response{ReferenceUnixMs: 1, UncertaintyMs: 1, Synced: true, SourceAgeMs: 1}
	protocol.Sign(key, &fixed)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveBareOn(ln, strings.TrimSuffix(string(protocol.EncodeResponse(&fixed)), "\n")) }()
	if err := (exchanger{addr: ln.Addr().String(), keys: keys, bare: true}).Cycle(context.Background(), 0); err != nil {
		t.Errorf("bare exchange: %v", err)
	}
	// The nonce is compared against a real agent: the bare line's fails.
	if err := (exchanger{addr: ln.Addr().String(), keys: keys}).Cycle(context.Background(), 0); err == nil {
		t.Error("fixed nonce accepted as the agent's answer")
	}
	other := protocol.KeyRing{protocol.NewKey([]byte("another key of at least thirty-two bytes"))}
	if err := (exchanger{addr: ln.Addr().String(), keys: other, bare: true}).Cycle(context.Background(), 0); err == nil {
		t.Error("MAC under another key accepted")
	}
	ln.Close()
	if err := <-done; err == nil {
		t.Error("serveBareOn returned nil after its listener closed")
	}
}

// A real, short run of the three sections (built from the repository):
// the agent and the bare server answer, the lying leader fails with
// `offset` and a survivor grants, and (with chronyd installed) every
// node's bound is sampled beside chrony's root distance.
func TestRunItemSections(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the agent, a ticketd cluster and chronyd")
	}
	args := []string{"-sections", "agent,failover,tightness",
		"-agent-clients", "2", "-agent-duration", "200ms", "-agent-warmup", "50ms", "-agent-rounds", "1",
		"-failover", "1", "-failover-kinds", "clock", "-tightness-duration", "3s"}
	out, md, b := runReport(t, args...)
	// -render re-writes the same report from the JSON, given the same flags.
	again := filepath.Join(t.TempDir(), "again.md")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(args, "-render", strings.TrimSuffix(out, ".md")+".json", "-out", again), &stdout, &stderr); code != 0 {
		t.Errorf("-render: exit %d: %s", code, stderr.String())
	} else if md2, _ := os.ReadFile(again); strings.NewReplacer("again-", "r-", "again.json", "r.json").Replace(string(md2)) != md {
		t.Errorf("-render wrote another report:\n%s\nvs\n%s", md2, md)
	}
	if code := run(context.Background(), append(args[:len(args)-1], "4s", "-render", strings.TrimSuffix(out, ".md")+".json", "-out", again), &stdout, &stderr); code != 2 {
		t.Errorf("-render with other flags: exit %d, want 2", code)
	}
	var rep struct {
		Failover []failoverResult `json:"failover"`
		Items    itemResults      `json:"items"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Failover) != 0 {
		t.Errorf("-failover-kinds clock ran kill -9 trials: %+v", rep.Failover)
	}
	a := rep.Items.Agent
	if a == nil || len(a.Rows) != 1 || a.Rows[0].Clients != 2 || a.Rows[0].Agent.Cycles == 0 || a.Rows[0].Bare.Cycles == 0 || a.Rows[0].Agent.Errors+a.Rows[0].Bare.Errors != 0 {
		t.Errorf("agent floor %+v", a)
	}
	c := rep.Items.Clock
	if c == nil || len(c.Trials) != 1 || c.Trials[0] <= 0 || len(c.Reasons) != 1 || c.Reasons[0] != "offset" || len(c.Errors) != 0 {
		t.Errorf("clock failover %+v", c)
	}
	for _, want := range []string{"## The agent against its floor", "| 2 |", "ticketd ×3 clock FAILED", "Target (clock-failure failover"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if lookChronyd() == "" {
		if len(rep.Items.Skipped) != 1 || !strings.Contains(rep.Items.Skipped[0], "chronyd") {
			t.Errorf("no chronyd and no skip message: %+v", rep.Items.Skipped)
		}
		t.Log("chronyd not installed (Debian package chrony; CI installs it): the tightness section was skipped")
		return
	}
	ts := rep.Items.Tightness
	if ts == nil || len(ts.Samples) < 2 {
		t.Fatalf("tightness %+v", ts)
	}
	for _, s := range ts.Samples {
		if len(s.BoundMs) != 3 || s.RootDistMs <= 0 {
			t.Errorf("sample %+v", s)
		}
		for _, bound := range s.BoundMs {
			if bound < 3 { // SPEC §3.1: a sample's bound is at least 3 ms
				t.Errorf("bound %v ms below a sample's least bound: %+v", bound, s)
			}
		}
	}
	if _, err := os.Stat(strings.TrimSuffix(out, ".md") + "-tightness.png"); err != nil {
		t.Errorf("no tightness plot: %v", err)
	}
}

// A node whose next sample lands between the status read and the
// metrics read: the pair is read again, so the RTT is the bound's
// sample's (read once, the bound would be the old sample's with the new
// sample's RTT).
func TestBoundAndRTTSameSample(t *testing.T) {
	var statusReads atomic.Int64
	var landed atomic.Bool // the second sample (bound 20 ms, RTT 9 ms) has landed
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/status":
			statusReads.Add(1)
			sample, bound := 1000, 10
			if landed.Load() {
				sample, bound = 2000, 20
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"clock":{"healthy":true,"bound_ms":%d,"last_sample_unix_ms":%d}}`, bound, sample)
		case "/metrics":
			landed.Store(true)
			fmt.Fprintln(w, "clock_sample_rtt_ms 9")
		}
	}))
	defer srv.Close()
	bound, rtt, err := boundAndRTT(context.Background(), srv.URL)
	if err != nil || bound != 20 || rtt != 9 {
		t.Errorf("boundAndRTT = %v, %v, %v; want the second sample's 20 ms bound with its 9 ms RTT", bound, rtt, err)
	}
	if n := statusReads.Load(); n != 4 {
		t.Errorf("%d status reads, want 4 (a pair that straddled a sample, then one that did not)", n)
	}
}

// The tightness section's term breakdown reads the kept-sample lines of a
// node's JSON log from the sampling's start: lines before it, other lines
// and non-JSON text are skipped; each term's quantiles and the error-bound
// histogram come out of the rest.
func TestReadTerms(t *testing.T) {
	since := mustTime(t, "2026-01-01T00:00:10Z")
	line := func(at string, rtt, unc, off, e, eb uint64) string {
		return fmt.Sprintf(`{"time":%q,"level":"DEBUG","msg":"clock health: sample kept","rtt_ns":%d,"uncertainty_ms":%d,"offset_ns":%d,"e_ns":%d,"error_bound_ms":%d}`,
			at, rtt, unc, off, e, eb)
	}
	log := strings.Join([]string{
		"ticketd starting (text before the JSON handler)",
		line("2026-01-01T00:00:09Z", 9e6, 9, 9e6, 29e6, 29), // before the sampling
		line("2026-01-01T00:00:10Z", 200_000, 1, 300_000, 2_500_000, 3),
		`{"time":"2026-01-01T00:00:11Z","level":"INFO","msg":"clock health: slow exchange","rtt_ns":5}`,
		line("2026-01-01T00:00:11Z", 400_000, 1, 900_000, 3_300_000, 4),
		line("2026-01-01T00:00:12Z", 300_000, 1, 500_000, 2_800_000, 3),
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "node.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readTerms(path, since)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kept != 3 || got.ErrorBound[3] != 2 || got.ErrorBound[4] != 1 || len(got.ErrorBound) != 2 {
		t.Fatalf("kept %d, error bounds %v", got.Kept, got.ErrorBound)
	}
	// Rounded term by term: 1+1+1+1 = 4, 1+1+1+1 = 4, 1+1+1+1 = 4.
	if got.PerTerm[4] != 3 || len(got.PerTerm) != 1 {
		t.Fatalf("per-term error bounds %v", got.PerTerm)
	}
	if h := histogramText(map[uint64]int{3: 2, 4: 2, 5: 1}, false); h != "median 4 ms of 5 (3 ms 40.0%, 4 ms 40.0%, 5 ms 20.0%)" {
		t.Fatalf("histogram %q", h)
	}
	long := map[uint64]int{4: 90, 5: 6, 9: 2, 80: 2}
	if h := histogramText(long, true); h != "median **4 ms** of 100 (4 ms 90.0%, 5 ms 6.0%, 4.0% above, up to 80 ms)" {
		t.Fatalf("histogram %q", h)
	}
	if got.RTTMs.P50 != 0.3 || got.RTTMs.Max != 0.4 || got.RTTMs.P10 != 0.2 || got.OffsetMs.P50 != 0.5 || got.EMs.Max != 3.3 || got.UncMs.P50 != 1 {
		t.Fatalf("terms %+v", got)
	}
	if _, err := readTerms(filepath.Join(t.TempDir(), "missing.log"), since); err == nil {
		t.Fatal("a missing log was read")
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
