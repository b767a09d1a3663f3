package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLog writes a run's log lines to t.Log.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func runConfig(t testing.TB, addr string, dev bool) Config {
	cfg := DefaultConfig()
	cfg.Addr, cfg.Secret, cfg.Dev = addr, testSecret, dev
	cfg.Logger = slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg
}

func mustRun(t testing.TB, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// SPEC §7: a correct agent passes every check, with the real secret and,
// as a development reference, with --dev.
func TestReferenceAgentPassesEverything(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
		dev  bool
	}{
		{"secret", testSecret, false},
		{"dev_key with --dev", protocol.DevKey(testSecret), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := reference(tc.key).start(t)
			rep := mustRun(t, runConfig(t, addr, tc.dev))
			if len(rep.Results) != len(checks) {
				t.Fatalf("%d results for %d checks", len(rep.Results), len(checks))
			}
			for _, r := range rep.Results {
				if r.Status != Pass {
					t.Errorf("%s %s: %s", r.ID, r.Status, r.Detail)
				}
			}
			if !rep.OK() || rep.Summary() != "22 passed, 0 failed, 0 warned" {
				t.Errorf("summary %q", rep.Summary())
			}
			var out bytes.Buffer
			if err := rep.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + out.String())
		})
	}
}

// skewedClock is the local clock of the machine running the suite, off by skew.
type skewedClock struct{ skew time.Duration }

func (c skewedClock) Now() time.Time { return time.Now().Add(c.skew) }

// SPEC §7: implausible references are a SHOULD, reported WARN, never FAIL:
// whichever of the two clocks is wrong, the run still passes.
func TestPlausibilityWarns(t *testing.T) {
	for _, tc := range []struct {
		name       string
		agentSkew  time.Duration
		localClock Clock
	}{
		{"agent 5 s ahead", 5 * time.Second, nil},
		{"local clock 3 s behind", 0, skewedClock{-3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := reference(testSecret)
			a.sample = honestSample(tc.agentSkew)
			cfg := runConfig(t, a.start(t), false)
			cfg.Clock = tc.localClock
			rep := mustRun(t, cfg)
			r, _ := result(rep, "2.1-8")
			if r.Status != Warn || !strings.Contains(r.Detail, "the local clock may be the wrong one") {
				t.Errorf("2.1-8: %s %q, want WARN", r.Status, r.Detail)
			}
			if !rep.OK() {
				t.Errorf("a WARN failed the run: %s", rep.Summary())
			}
			if _, _, warned := rep.Counts(); warned != 1 {
				t.Errorf("%s, want exactly one WARN", rep.Summary())
			}
		})
	}
}

// An unreachable target fails every check with the connect error, quickly.
func TestUnreachableTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rep := mustRun(t, runConfig(t, addr, false))
	for _, r := range rep.Results {
		if r.Status == Pass || !strings.Contains(r.Detail, "connect") {
			t.Errorf("%s %s: %s", r.ID, r.Status, r.Detail)
		}
	}
	if rep.OK() {
		t.Fatal("run OK against nothing")
	}
}

// A run cancelled in the middle of a check (here one that would wait 10 s
// for a silent client to be closed) returns at once, failing what it did
// not finish and what it did not run.
func TestRunCancelled(t *testing.T) {
	a := reference(testSecret)
	a.readTimeout = 0 // holds a silent client until the agent stops
	a.accepted = make(chan struct{}, 1)
	cfg := runConfig(t, a.start(t), false)
	cfg.Only = []string{"2.1-4", "2.1-5"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *Report)
	go func() {
		rep, _ := Run(ctx, cfg)
		done <- rep
	}()
	select {
	case <-a.accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the run never connected")
	}
	cancelled := time.Now()
	cancel()
	select {
	case rep := <-done:
		if took := time.Since(cancelled); took > 2*time.Second {
			t.Errorf("returned %s after the cancel", took)
		}
		if len(rep.Results) != 2 || rep.OK() ||
			!strings.HasPrefix(rep.Results[0].Detail, "interrupted") || !strings.HasPrefix(rep.Results[1].Detail, "not run") {
			t.Fatalf("cancelled run: %+v", rep.Results)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled run did not return within 5 s")
	}
}

var idPattern = regexp.MustCompile(`^([1-9][0-9]*\.[1-9][0-9]*)-([1-9][0-9]*)$`)

// SPEC §7: every check is numbered by its section and names a MUST or SHOULD.
func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for _, c := range Catalogue() {
		m := idPattern.FindStringSubmatch(c.ID)
		switch {
		case m == nil:
			t.Errorf("%q is not section-n", c.ID)
		case m[1] != c.Section:
			t.Errorf("%s: section %s", c.ID, c.Section)
		case seen[c.ID]:
			t.Errorf("%s twice", c.ID)
		case c.Level != Must && c.Level != Should:
			t.Errorf("%s: level %q", c.ID, c.Level)
		case c.Requirement == "" || strings.Contains(c.Requirement, "\n"):
			t.Errorf("%s: requirement %q", c.ID, c.Requirement)
		case c.Run == nil:
			t.Errorf("%s: no run function", c.ID)
		case prev != "" && !idBefore(prev, c.ID):
			t.Errorf("%s after %s: not in SPEC order", c.ID, prev)
		}
		seen[c.ID], prev = true, c.ID
	}
	// The items of issue 4's catalogue, and the one SHOULD.
	for _, id := range []string{"1.2-1", "1.3-1", "1.2-3", "1.1-6", "1.2-4", "1.2-5", "2.1-1", "1.1-2", "1.1-3",
		"1.1-1", "2.1-2", "2.1-3", "2.1-4", "1.1-5", "2.1-7", "1.1-7", "2.1-8"} {
		if !seen[id] {
			t.Errorf("no check %s", id)
		}
	}
	if c, _ := lookup("2.1-8"); c.Level != Should {
		t.Errorf("plausibility is %s, want SHOULD", c.Level)
	}
	if got := IDs(); !slices.Equal(got, slices.Collect(func(yield func(string) bool) {
		for _, c := range checks {
			yield(c.ID)
		}
	})) {
		t.Errorf("IDs() = %v", got)
	}
}

// idBefore orders IDs numerically (section major, minor, then n).
func idBefore(a, b string) bool {
	key := func(id string) []int {
		var out []int
		for _, p := range strings.FieldsFunc(id, func(r rune) bool { return r == '.' || r == '-' }) {
			n := 0
			for _, c := range p {
				n = n*10 + int(c-'0')
			}
			out = append(out, n)
		}
		return out
	}
	return slices.Compare(key(a), key(b)) < 0
}

// Every invalid request of the vectors is one the protocol package rejects,
// and is sent as the vectors say.
func TestInvalidRequestsLoaded(t *testing.T) {
	reqs, err := invalidRequests()
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) < 14 {
		t.Fatalf("%d invalid requests", len(reqs))
	}
	sawOversize := false
	for _, r := range reqs {
		w := r.Wire()
		if r.Name == "oversize-no-lf" {
			sawOversize = true
			if bytes.IndexByte(w, '\n') >= 0 || len(w) <= protocol.MaxLine {
				t.Errorf("oversize-no-lf: %d bytes, LF at %d", len(w), bytes.IndexByte(w, '\n'))
			}
			continue
		}
		if w[len(w)-1] != '\n' {
			t.Errorf("%s: sent without LF", r.Name)
		}
		if _, err := protocol.ParseRequest(w[:len(w)-1]); err == nil {
			t.Errorf("%s: %q parses as a valid request", r.Name, w)
		}
	}
	if !sawOversize {
		t.Error("no oversize-no-lf vector")
	}
}

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		c := DefaultConfig()
		c.Addr, c.Secret = "127.0.0.1:7970", testSecret
		return c
	}
	if c := good(); c.Validate() != nil {
		t.Fatalf("good config: %v", c.Validate())
	}
	for _, tc := range []struct {
		field  string
		change func(*Config)
	}{
		{"addr", func(c *Config) { c.Addr = "" }},
		{"addr", func(c *Config) { c.Addr = "localhost" }},
		{"addr", func(c *Config) { c.Addr = ":7970" }},
		{"addr", func(c *Config) { c.Addr = "h:0" }},
		{"addr", func(c *Config) { c.Addr = "h:99999" }},
		{"secret", func(c *Config) { c.Secret = testSecret[:31] }},
		{"timeout", func(c *Config) { c.Timeout = 0 }},
		{"timeout", func(c *Config) { c.Timeout = 2 * time.Minute }},
		{"only", func(c *Config) { c.Only = []string{"9.9-9"} }},
		{"only", func(c *Config) { c.Only = []string{"1.2-1", "1.2-1"} }},
	} {
		c := good()
		tc.change(&c)
		err := c.Validate()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Path != tc.field {
			t.Errorf("%+v: %v, want an error naming %s", c, err, tc.field)
		}
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("Run accepted %+v", c)
		}
	}
}

// The secret never appears in a printed config or in any report format,
// even from a run whose MAC check fails.
func TestSecretNeverPrinted(t *testing.T) {
	cfg := runConfig(t, reference([]byte("a-different-secret-for-this-test-0123")).start(t), false)
	cfg.Only = []string{"1.3-1", "1.2-1"}
	rep := mustRun(t, cfg)
	var all bytes.Buffer
	all.WriteString(cfg.String() + cfg.GoString())
	for _, f := range []Format{FormatText, FormatJSON, FormatJUnit} {
		if err := rep.Write(&all, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, leak := range []string{string(testSecret), base64.StdEncoding.EncodeToString(testSecret),
		base64.RawURLEncoding.EncodeToString(protocol.DevKey(testSecret))} {
		if strings.Contains(all.String(), leak) {
			t.Fatalf("output holds key material %q", leak)
		}
	}
	if rep.OK() {
		t.Fatal("a wrong-secret agent passed")
	}
}

func sampleReport() *Report {
	return &Report{Target: "127.0.0.1:7970", Timeout: 2 * time.Second, Started: time.Unix(1767225600, 0),
		Duration: 1500 * time.Millisecond, Results: []Result{
			{ID: "1.1-1", Section: "1.1", Level: Must, Requirement: "one line", Status: Pass, Detail: "ok", Duration: time.Millisecond},
			{ID: "1.3-1", Section: "1.3", Level: Must, Requirement: "mac", Status: Fail, Detail: `expected a MAC; got "<&>\x00"`},
			{ID: "2.1-8", Section: "2.1", Level: Should, Requirement: "plausible", Status: Warn, Detail: "expected ≤ 5 ms; got 900 ms"},
		}}
}

// SPEC §7: table, JSON and JUnit carry the same verdicts.
func TestReportFormats(t *testing.T) {
	rep := sampleReport()
	var text bytes.Buffer
	if err := rep.Write(&text, FormatText); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if last := lines[len(lines)-1]; last != "1 passed, 1 failed, 1 warned" {
		t.Errorf("closing line %q", last)
	}
	for _, want := range []string{"ID     SECTION  LEVEL   RESULT  REQUIREMENT / DETAIL",
		"1.3-1  §1.3     MUST    FAIL    mac", "↳ expected a MAC", "2.1-8  §2.1     SHOULD  WARN"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	var js bytes.Buffer
	if err := rep.Write(&js, FormatJSON); err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Passed, Failed, Warned int
		Dev                    bool
		Results                []struct{ ID, Result, Detail, Level string }
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil {
		t.Fatal(err)
	}
	if parsed.Passed != 1 || parsed.Failed != 1 || parsed.Warned != 1 || len(parsed.Results) != 3 ||
		parsed.Results[1].Result != "FAIL" || parsed.Results[1].Detail != rep.Results[1].Detail || parsed.Results[2].Level != "SHOULD" {
		t.Errorf("json: %+v", parsed)
	}

	var ju bytes.Buffer
	if err := rep.Write(&ju, FormatJUnit); err != nil {
		t.Fatal(err)
	}
	var suites struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suite    []struct {
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Out string `xml:"system-out"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(ju.Bytes(), &suites); err != nil {
		t.Fatalf("junit does not parse: %v\n%s", err, ju.String())
	}
	if suites.Tests != 3 || suites.Failures != 1 || len(suites.Suite) != 1 || len(suites.Suite[0].Cases) != 3 {
		t.Fatalf("junit: %+v", suites)
	}
	cases := suites.Suite[0].Cases
	if cases[0].Failure != nil || cases[1].Failure == nil || cases[2].Failure != nil || !strings.HasPrefix(cases[2].Out, "WARN: ") {
		t.Errorf("junit cases: %+v", cases)
	}

	if _, err := ParseFormat("yaml"); err == nil {
		t.Error("ParseFormat accepted yaml")
	}
}

// fuzzTarget is a target for judging captured bytes without a network.
func fuzzTarget() *Target {
	cfg := DefaultConfig()
	cfg.Addr, cfg.Secret = "127.0.0.1:1", testSecret
	return newTarget(&cfg)
}

// Whatever a hostile target sends, every judge returns a bounded verdict
// and never panics.
func FuzzJudges(f *testing.F) {
	t0 := fuzzTarget()
	n, _ := protocol.ParseNonce("AAECAwQFBgcICQoLDA0ODw")
	good := protocol.Response{Nonce: n, ReferenceUnixMs: 1, UncertaintyMs: 1, Synced: true}
	t0.keys[0].Sign(&good)
	f.Add(protocol.EncodeResponse(&good), uint8(endEOF))
	f.Add([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODw 01 0 2 0 x\r\n\n"), uint8(endTimeout))
	f.Add(bytes.Repeat([]byte{'A'}, captureLimit), uint8(endFlood))
	f.Add([]byte{}, uint8(endConnect))
	f.Add([]byte("\n"), uint8(endReset))
	judges := []func(*Target, *exchange) Outcome{judgeOneLine, judgeSize, judgeBytes, judgeSpaces, judgeInTime,
		judgeValid, judgeMagic, judgeNonceEcho, judgeNumbers, judgeSynced, judgeBase64, judgeMAC,
		judgeUncertainty, judgePlausible}
	f.Fuzz(func(t *testing.T, raw []byte, end uint8) {
		if len(raw) > captureLimit {
			raw = raw[:captureLimit]
		}
		now := time.Now()
		x := &exchange{nonce: n, limit: time.Second, raw: raw, end: endKind(end % 5), sent: now, endAt: now.Add(time.Millisecond)}
		if x.end != endEOF {
			x.err = os.ErrDeadlineExceeded
		}
		if bytes.IndexByte(raw, '\n') >= 0 {
			x.lfAt, x.lfWall = now.Add(time.Microsecond), now
		}
		for _, j := range append(judges, func(_ *Target, x *exchange) Outcome { return judgePipelined(x, n) },
			func(_ *Target, x *exchange) Outcome { return judgeUnanswered(x) }) {
			o := j(t0, x)
			if o.Detail == "" {
				t.Fatalf("a verdict without detail for %q", raw)
			}
			if len(bounded(o.Detail)) > maxDetail+len("…") {
				t.Fatalf("unbounded detail")
			}
		}
	})
}
