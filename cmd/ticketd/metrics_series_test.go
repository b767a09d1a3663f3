package main

import (
	"bufio"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/agent/source"
	"github.com/tckclk/tckclk/node/api"
)

// scrape reads every sample line of url (a /metrics) into series → value
// text.
func scrape(t *testing.T, c *http.Client, url string) map[string]string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		out[line[:i]] = line[i+1:]
	}
	return out
}

// Prometheus instrumentation guidelines ("avoid missing metrics"): a
// fresh ticketd — ready, no ticket op served yet — lists every known
// ticket_ops_total{op,result}, ticket_op_duration_seconds{op} and
// ticket_batch_requests_total{result} series at 0, and a fresh
// tckclk-agent every tckclk_agent_source_polls_total{source,result} of
// its sources, so dashboards and alerts (rate(...{result="held"})) see a
// series from the start.
func TestFreshNodeListsLabelledSeries(t *testing.T) {
	t.Parallel()
	secretFile := writeSecret(t, bbSecret)
	agentAddr, agentHTTP := startDevAgentHTTP(t, []string{binary(t, "tckclk-agent")}, "127.0.0.1:0", secretFile)
	p, ok := startProc(t, "--config", clockConfig(t, filepath.Join(t.TempDir(), "data"), agentAddr, secretFile,
		"  dev_reference: true\n  probe_interval_ms: 200\n  probe_timeout_ms: 200\n"))
	if !ok {
		t.Fatalf("ticketd exited: %v", <-p.done)
	}
	if err := p.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: p.tr, Timeout: 10 * time.Second}
	node := scrape(t, hc, "http://"+p.addr+"/metrics")
	var want []string
	for op, results := range api.KnownResults {
		if op == "batch" {
			for _, r := range results {
				want = append(want, `ticket_batch_requests_total{result="`+r+`"}`)
			}
			continue
		}
		want = append(want, `ticket_op_duration_seconds_count{op="`+op+`"}`)
		for _, r := range results {
			want = append(want, `ticket_ops_total{op="`+op+`",result="`+r+`"}`)
		}
	}
	for _, s := range append(want, `ticket_ops_total{op="grant",result="ok"}`, `ticket_ops_total{op="expire",result="noop"}`) {
		if v, ok := node[s]; !ok || v != "0" {
			t.Errorf("fresh ticketd: %s = %q (present %v), want 0", s, v, ok)
		}
	}

	agent := scrape(t, hc, "http://"+agentHTTP+"/metrics")
	polls := regexp.MustCompile(`^tckclk_agent_source_polls_total\{result="[a-z_]+",source="([^"]+)"\}$`)
	sources := map[string]bool{}
	for s := range agent {
		if m := polls.FindStringSubmatch(s); m != nil {
			sources[m[1]] = true
		}
	}
	if !sources["dev"] {
		t.Fatalf("the --dev agent lists no poll series for its source dev: %v", sources)
	}
	results := []string{"ok"}
	for _, r := range source.Reasons() {
		results = append(results, string(r))
	}
	for src := range sources {
		for _, r := range results {
			s := `tckclk_agent_source_polls_total{result="` + r + `",source="` + src + `"}`
			if _, ok := agent[s]; !ok {
				t.Errorf("fresh agent: %s missing", s)
			}
		}
	}
	for _, s := range []string{`tckclk_agent_source_polls_total{result="unreachable",source="dev"}`, `tckclk_agent_secret_reloads_total{result="error"}`} {
		if agent[s] != "0" {
			t.Errorf("fresh agent: %s = %q, want 0", s, agent[s])
		}
	}
}
