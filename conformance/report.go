package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// Format is an output format of the command (SPEC §8).
type Format string

// Formats.
const (
	FormatText  Format = "text"
	FormatJSON  Format = "json"
	FormatJUnit Format = "junit"
)

// ParseFormat accepts text, json or junit.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatText, FormatJSON, FormatJUnit:
		return f, nil
	}
	return "", fmt.Errorf("format %q is not text, json or junit", s)
}

// Write renders r in format f.
func (r *Report) Write(w io.Writer, f Format) error {
	switch f {
	case FormatJSON:
		return r.WriteJSON(w)
	case FormatJUnit:
		return r.WriteJUnit(w)
	}
	return r.WriteText(w)
}

// Summary is the closing line: "N passed, N failed, N warned".
func (r *Report) Summary() string {
	p, f, w := r.Counts()
	return fmt.Sprintf("%d passed, %d failed, %d warned", p, f, w)
}

func (r *Report) keyName() string {
	if r.Dev {
		return "dev_key (--dev: a development reference)"
	}
	return "the secret"
}

// WriteText writes the table: ID, section, level, result and requirement on
// one line, the detail (expected vs actual on failure) indented below it,
// then the summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tckclk-conformance %s: MAC under %s, timeout %s, %d checks in %s\n\n",
		r.Target, r.keyName(), r.Timeout, len(r.Results), r.Duration.Round(time.Millisecond))
	idW := len("ID")
	for _, res := range r.Results {
		idW = max(idW, len(res.ID))
	}
	row := func(id, section, level, result, text string) {
		fmt.Fprintf(&b, "%-*s  %-7s  %-6s  %-6s  %s\n", idW, id, section, level, result, text)
	}
	row("ID", "SECTION", "LEVEL", "RESULT", "REQUIREMENT / DETAIL")
	indent := strings.Repeat(" ", idW+2+7+2+6+2+6+2)
	for _, res := range r.Results {
		row(res.ID, "§"+res.Section, string(res.Level), string(res.Status), res.Requirement)
		if res.Detail != "" {
			b.WriteString(indent + "↳ " + res.Detail + "\n")
		}
	}
	b.WriteString("\n" + r.Summary() + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

type jsonResult struct {
	Result
	DurationMs float64 `json:"duration_ms"`
}

type jsonReport struct {
	Tool       string       `json:"tool"`
	Target     string       `json:"target"`
	Dev        bool         `json:"dev"`
	TimeoutMs  int64        `json:"timeout_ms"`
	Started    time.Time    `json:"started"`
	DurationMs float64      `json:"duration_ms"`
	Passed     int          `json:"passed"`
	Failed     int          `json:"failed"`
	Warned     int          `json:"warned"`
	Results    []jsonResult `json:"results"`
}

func msFloat(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	out := jsonReport{Tool: "tckclk-conformance", Target: r.Target, Dev: r.Dev,
		TimeoutMs: r.Timeout.Milliseconds(), Started: r.Started.UTC(), DurationMs: msFloat(r.Duration),
		Results: make([]jsonResult, len(r.Results))}
	out.Passed, out.Failed, out.Warned = r.Counts()
	for i, res := range r.Results {
		out.Results[i] = jsonResult{Result: res, DurationMs: msFloat(res.Duration)}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

type junitSuites struct {
	XMLName  xml.Name   `xml:"testsuites"`
	Name     string     `xml:"name,attr"`
	Tests    int        `xml:"tests,attr"`
	Failures int        `xml:"failures,attr"`
	Time     string     `xml:"time,attr"`
	Suites   []junitSub `xml:"testsuite"`
}

type junitSub struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	ClassName string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the report as JUnit XML: a FAIL is a <failure>, a WARN
// passes with "WARN: detail" in <system-out> (JUnit has no warning).
func (r *Report) WriteJUnit(w io.Writer) error {
	_, failed, warned := r.Counts()
	sub := junitSub{Name: "tckclk-conformance " + r.Target, Tests: len(r.Results), Failures: failed,
		Time: seconds(r.Duration), Timestamp: r.Started.UTC().Format(time.RFC3339),
		Properties: []junitProperty{
			{"target", r.Target}, {"dev", fmt.Sprint(r.Dev)}, {"timeout", r.Timeout.String()},
			{"warned", fmt.Sprint(warned)},
		}}
	for _, res := range r.Results {
		c := junitCase{ClassName: "SPEC §" + res.Section, Name: res.ID + " " + string(res.Level) + ": " + res.Requirement,
			Time: seconds(res.Duration)}
		switch res.Status {
		case Fail:
			c.Failure = &junitFailure{Message: res.Detail, Type: string(res.Level), Text: res.Detail}
		default:
			c.SystemOut = string(res.Status) + ": " + res.Detail
		}
		sub.Cases = append(sub.Cases, c)
	}
	doc := junitSuites{Name: "tckclk-conformance", Tests: len(r.Results), Failures: failed,
		Time: seconds(r.Duration), Suites: []junitSub{sub}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
