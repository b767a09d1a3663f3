package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus); CI installs it")
	}
	return p
}

// promtool check rules/config and promtool test rules: every alert has a
// unit test that fires it and one that must not (alerts_test.yml).
func TestAlertRulesPromtool(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yml"},
		{"check", "config", "prometheus/prometheus.yml"},
		{"test", "rules", "prometheus/alerts_test.yml"},
	} {
		out, err := exec.Command(pt, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert in alerts.yml is named in alerts_test.yml.
	rules, _ := os.ReadFile("prometheus/alerts.yml")
	tests, _ := os.ReadFile("prometheus/alerts_test.yml")
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(string(rules), -1) {
		if !strings.Contains(string(tests), "alertname: "+m[1]+"\n") {
			t.Errorf("alert %s has no promtool unit test", m[1])
		}
	}
}

// metricNames are the TCKCLK series an expression reads.
var metricName = regexp.MustCompile(`\b(?:clock|raft|gossip|node|ticket|tickets|tckclk_agent|mesh)_[a-z_]+\b`)

// A real Prometheus (Debian's prometheus) scrapes the demo's three-node
// cluster and its agent (deploy/demo.sh): every dashboard query returns
// series, and every metric an alert reads exists — a renamed metric or a
// typo in a dashboard would fail here, not on an operator's screen.
func TestDashboardAndAlertsAgainstLiveCluster(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian package prometheus); CI installs it")
	}
	p, work := runDemo(t, 9)

	// Prometheus scraping the three nodes and the agent every second.
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: ticketd
    static_configs: [{targets: ["127.0.0.1:%d", "127.0.0.1:%d", "127.0.0.1:%d"]}]
  - job_name: tckclk-agent
    static_configs: [{targets: ["127.0.0.1:%d"]}]
`, mustAbs(t, "prometheus/alerts.yml"), p[0], p[1], p[2], p[7])
	cfgPath := filepath.Join(work, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := fmt.Sprintf("127.0.0.1:%d", p[8])
	pc := exec.Command(prom, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(work, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	var promLog strings.Builder
	pc.Stdout, pc.Stderr = &promLog, &promLog
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	promDone := make(chan struct{})
	go func() { pc.Wait(); close(promDone) }()
	t.Cleanup(func() {
		pc.Process.Signal(syscall.SIGTERM)
		select {
		case <-promDone:
		case <-time.After(20 * time.Second):
			pc.Process.Kill()
			<-promDone
		}
	})
	query := func(q string) (int, error) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Error  string
			Data   struct{ Result []json.RawMessage }
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s: %s", q, r.Error)
		}
		return len(r.Data.Result), nil
	}
	// Four targets up, each scraped a few times (rate needs two samples).
	deadline := time.Now().Add(90 * time.Second)
	for {
		n, err := query(`count_over_time(up[1m]) >= 4 and up == 1`)
		if err == nil && n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus does not see 4 healthy targets (%d, %v):\n%s", n, err, promLog.String())
		}
		time.Sleep(250 * time.Millisecond) // polling Prometheus's API until its scrapes land
	}

	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	data, err := os.ReadFile("grafana/tckclk.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/tckclk.json: %v", err)
	}
	queries := 0
	for _, panel := range dash.Panels {
		for _, tg := range panel.Targets {
			queries++
			if n, err := query(tg.Expr); err != nil || n == 0 {
				t.Errorf("dashboard panel %q: %q returns %d series (%v)", panel.Title, tg.Expr, n, err)
			}
		}
	}
	if queries < 12 {
		t.Errorf("the dashboard has %d queries", queries)
	}
	rules, _ := os.ReadFile("prometheus/alerts.yml")
	seen := map[string]bool{}
	for _, m := range metricName.FindAllString(string(rules), -1) {
		if seen[m] {
			continue
		}
		seen[m] = true
		if n, err := query(fmt.Sprintf(`count({__name__=%q})`, m)); err != nil || n == 0 {
			t.Errorf("alerts.yml reads %s, which no target exports (%v)", m, err)
		}
	}
	if len(seen) < 8 {
		t.Errorf("found only %d metrics in alerts.yml: %v", len(seen), seen)
	}
	// The alerts that hold on a healthy demo cluster: only the
	// development-reference warning may be pending or firing.
	resp, err := http.Get("http://" + promAddr + "/api/v1/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var alerts struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts.Data.Alerts {
		if a.Labels["alertname"] != "TckclkDevReference" {
			t.Errorf("alert %s %s on a healthy cluster", a.Labels["alertname"], a.State)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
