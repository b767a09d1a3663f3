package clockhealth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/clockhealth"
)

// SPEC §3.2, §3.3: defaults derived from Δ.
func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct{ delta, quarter uint64 }{{500, 125}, {2, 1}, {7, 1}, {8, 2}, {60000, 15000}} {
		c := clockhealth.DefaultConfig()
		c.DeltaMs = tc.delta
		c.Normalize()
		if c.MaxRTTMs != tc.quarter || c.MaxUncertaintyMs != tc.quarter || c.MaxOffsetMs != tc.quarter {
			t.Fatalf("Δ %d: limits %d/%d/%d, want %d", tc.delta, c.MaxRTTMs, c.MaxUncertaintyMs, c.MaxOffsetMs, tc.quarter)
		}
		if c.StalenessMs != 3000 || c.ProbeIntervalMs != 1000 || c.ProbeTimeoutMs != 500 || c.Burst != 3 || c.MaxSourceAgeMs != 120000 || c.MaxDriftPPM != 500 {
			t.Fatalf("defaults %+v", c)
		}
		if err := c.Validate("clock"); err != nil {
			t.Fatalf("Δ %d: %v", tc.delta, err)
		}
	}
}

// SPEC §3.2, §3.3, §6: every limit at its edges; errors name the key path.
func TestConfigLimitsAtEdges(t *testing.T) {
	type edit func(*clockhealth.Config)
	cases := []struct {
		name    string
		e       edit
		wantKey string // "" = valid
	}{
		{"Δ 1", func(c *clockhealth.Config) { c.DeltaMs = 1 }, "clock.delta_ms"},
		{"Δ 2", func(c *clockhealth.Config) { c.DeltaMs = 2 }, ""},
		{"Δ 60000", func(c *clockhealth.Config) { c.DeltaMs = 60000 }, ""},
		{"Δ 60001", func(c *clockhealth.Config) { c.DeltaMs = 60001 }, "clock.delta_ms"},
		{"Δ 0", func(c *clockhealth.Config) { c.DeltaMs = 0 }, "clock.delta_ms"},
		{"max_rtt_ms 1", func(c *clockhealth.Config) { c.MaxRTTMs = 1 }, ""},
		{"max_rtt_ms Δ/2", func(c *clockhealth.Config) { c.MaxRTTMs = 250 }, ""},
		{"max_rtt_ms Δ/2+1", func(c *clockhealth.Config) { c.MaxRTTMs = 251 }, "clock.max_rtt_ms"},
		{"max_uncertainty_ms Δ/2", func(c *clockhealth.Config) { c.MaxUncertaintyMs = 250 }, ""},
		{"max_uncertainty_ms Δ/2+1", func(c *clockhealth.Config) { c.MaxUncertaintyMs = 251 }, "clock.max_uncertainty_ms"},
		{"max_offset_ms Δ/2", func(c *clockhealth.Config) { c.MaxOffsetMs = 250 }, ""},
		{"max_offset_ms Δ/2+1", func(c *clockhealth.Config) { c.MaxOffsetMs = 251 }, "clock.max_offset_ms"},
		{"limits at Δ=3 (Δ/2 = 1)", func(c *clockhealth.Config) { c.DeltaMs = 3; c.MaxRTTMs = 2 }, "clock.max_rtt_ms"},
		{"staleness 2×interval", func(c *clockhealth.Config) { c.StalenessMs = 2000 }, ""},
		{"staleness 2×interval−1", func(c *clockhealth.Config) { c.StalenessMs = 1999 }, "clock.staleness_ms"},
		{"max_source_age_ms 0", func(c *clockhealth.Config) { c.MaxSourceAgeMs = 0 }, "clock.max_source_age_ms"},
		{"max_source_age_ms 1", func(c *clockhealth.Config) { c.MaxSourceAgeMs = 1 }, ""},
		{"max_source_age_ms 3600000", func(c *clockhealth.Config) { c.MaxSourceAgeMs = 3600000 }, ""},
		{"max_source_age_ms 3600001", func(c *clockhealth.Config) { c.MaxSourceAgeMs = 3600001 }, "clock.max_source_age_ms"},
		{"max_drift_ppm 0", func(c *clockhealth.Config) { c.MaxDriftPPM = 0 }, "clock.max_drift_ppm"},
		{"max_drift_ppm 1", func(c *clockhealth.Config) { c.MaxDriftPPM = 1 }, ""},
		{"max_drift_ppm 100000", func(c *clockhealth.Config) { c.MaxDriftPPM = 100000 }, ""},
		{"max_drift_ppm 100001", func(c *clockhealth.Config) { c.MaxDriftPPM = 100001 }, "clock.max_drift_ppm"},
		{"probe_interval_ms 0", func(c *clockhealth.Config) { c.ProbeIntervalMs = 0 }, "clock.probe_interval_ms"},
		{"probe_interval_ms 60000", func(c *clockhealth.Config) { c.ProbeIntervalMs = 60000; c.StalenessMs = 120000 }, ""},
		{"probe_interval_ms 60001", func(c *clockhealth.Config) { c.ProbeIntervalMs = 60001; c.StalenessMs = 120002 }, "clock.probe_interval_ms"},
		{"probe_timeout_ms 0", func(c *clockhealth.Config) { c.ProbeTimeoutMs = 0 }, "clock.probe_timeout_ms"},
		{"probe_timeout_ms = interval", func(c *clockhealth.Config) { c.ProbeTimeoutMs = 1000 }, ""},
		{"probe_timeout_ms > interval", func(c *clockhealth.Config) { c.ProbeTimeoutMs = 1001 }, "clock.probe_timeout_ms"},
		{"burst 0", func(c *clockhealth.Config) { c.Burst = 0 }, "clock.burst"},
		{"burst 1", func(c *clockhealth.Config) { c.Burst = 1 }, ""},
		{"burst 8", func(c *clockhealth.Config) { c.Burst = 8 }, ""},
		{"burst 9", func(c *clockhealth.Config) { c.Burst = 9 }, "clock.burst"},
		{"agent_addr ok", func(c *clockhealth.Config) { c.AgentAddr = "10.0.0.1:7970" }, ""},
		{"agent_addr no port", func(c *clockhealth.Config) { c.AgentAddr = "10.0.0.1" }, "clock.agent_addr"},
		{"agent_addr port 0", func(c *clockhealth.Config) { c.AgentAddr = "10.0.0.1:0" }, "clock.agent_addr"},
		{"agent_addr port 65536", func(c *clockhealth.Config) { c.AgentAddr = "10.0.0.1:65536" }, "clock.agent_addr"},
		{"agent_addrs bad entry", func(c *clockhealth.Config) { c.AgentAddrs = []string{"a:1", ":2"} }, "clock.agent_addrs[1]"},
		{"agent_addrs duplicate", func(c *clockhealth.Config) { c.AgentAddrs = []string{"a:1", "b:1", "a:1"} }, "clock.agent_addrs[2]"},
		{"both agent keys", func(c *clockhealth.Config) { c.AgentAddr = "a:1"; c.AgentAddrs = []string{"b:1"} }, "clock.agent_addrs"},
		{"next_secret_file alone", func(c *clockhealth.Config) { c.NextSecretFile = "/x" }, "clock.next_secret_file"},
		{"dev_reference without agent", func(c *clockhealth.Config) { c.DevReference = true }, "clock.dev_reference"},
		{"dev_reference with agent", func(c *clockhealth.Config) { c.DevReference = true; c.AgentAddr = "127.0.0.1:7970" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clockhealth.DefaultConfig()
			tc.e(&c)
			c.Normalize()
			err := c.Validate("clock")
			if tc.wantKey == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path != tc.wantKey {
				t.Fatalf("got %v, want an error at %s", err, tc.wantKey)
			}
			// New refuses the same config with the same error.
			if _, err := clockhealth.New(clockhealth.Options{Config: c, Secret: []byte(vectorSecret)}); !errors.As(err, &ce) || ce.Path != tc.wantKey {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

// SPEC §6: the clock: section decodes strictly (unknown keys, wrong types).
func TestConfigYAML(t *testing.T) {
	var doc struct {
		Clock clockhealth.Config `yaml:"clock"`
	}
	doc.Clock = clockhealth.DefaultConfig()
	good := "clock:\n  agent_addrs: [\"10.0.0.1:7970\", \"10.0.0.2:7970\"]\n  delta_ms: 200\n  next_secret_file: /n\n  secret_file: /s\n  dev_reference: false\n  max_rtt_ms: 20\n"
	if err := config.DecodeYAML([]byte(good), &doc); err != nil {
		t.Fatal(err)
	}
	doc.Clock.Normalize()
	if err := doc.Clock.Validate("clock"); err != nil {
		t.Fatal(err)
	}
	if doc.Clock.DeltaMs != 200 || doc.Clock.MaxRTTMs != 20 || doc.Clock.MaxOffsetMs != 50 || len(doc.Clock.Agents()) != 2 {
		t.Fatalf("%+v", doc.Clock)
	}
	for in, key := range map[string]string{
		"clock:\n  delta: 5\n":      "clock.delta",
		"clock:\n  delta_ms: -5\n":  "clock.delta_ms",
		"clock:\n  delta_ms: abc\n": "clock.delta_ms",
	} {
		doc.Clock = clockhealth.DefaultConfig()
		var ce *config.Error
		if err := config.DecodeYAML([]byte(in), &doc); !errors.As(err, &ce) || ce.Path != key {
			t.Fatalf("%q: %v, want an error at %s", in, err, key)
		}
	}
}

// SPEC §1.4: secrets for rotation load from both files; a short or
// world-readable file is refused naming the key, never showing the value;
// a clock secret equal to another secret is detected.
func TestLoadSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cur := strings.Repeat("c", 32)
	next := strings.Repeat("n", 33)
	noEnv := func(string) (string, bool) { return "", false }
	cfg := clockhealth.Config{SecretFile: write("cur", cur+"\n", 0o600), NextSecretFile: write("next", next, 0o600)}
	s, err := clockhealth.LoadSecrets(&cfg, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Current.Bytes()) != cur || string(s.Next.Bytes()) != next {
		t.Fatal("secrets read wrongly")
	}
	if !s.Collides([]byte(next)) || !s.Collides([]byte(cur)) || s.Collides([]byte(strings.Repeat("z", 32))) || s.Collides(nil) {
		t.Fatal("Collides wrong")
	}
	bad := clockhealth.Config{SecretFile: cfg.SecretFile, NextSecretFile: write("short", "tooshort", 0o600)}
	if _, err := clockhealth.LoadSecrets(&bad, noEnv); err == nil || !strings.Contains(err.Error(), "clock.next_secret_file") || strings.Contains(err.Error(), "tooshort") {
		t.Fatalf("short next secret: %v", err)
	}
	open := clockhealth.Config{SecretFile: write("open", cur, 0o644)}
	if _, err := clockhealth.LoadSecrets(&open, noEnv); err == nil || !strings.Contains(err.Error(), "clock.secret_file") {
		t.Fatalf("world-readable secret: %v", err)
	}
	env := func(k string) (string, bool) {
		if k == "CLUSTER_CLOCK_AGENT_SECRET" {
			return cur, true
		}
		return "", false
	}
	if _, err := clockhealth.LoadSecrets(&cfg, env); err == nil {
		t.Fatal("environment and file together accepted")
	}
	// New refuses an agent config without a usable secret.
	c := baseConfig("127.0.0.1:7970")
	if _, err := clockhealth.New(clockhealth.Options{Config: c, Secret: []byte("short")}); err == nil {
		t.Fatal("short secret accepted by New")
	}
}

// DESIGN §6: a refusal names the limit it applies, computed from the
// config: staleness_ms against 2 × probe_interval_ms, the sample limits
// against Δ/2.
func TestConfigErrorsNameTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    func(*clockhealth.Config)
		want string
	}{
		{"staleness", func(c *clockhealth.Config) { c.ProbeIntervalMs = 1500; c.StalenessMs = 2999 }, "2999 is below 2 × probe_interval_ms (3000)"},
		{"max_rtt_ms", func(c *clockhealth.Config) { c.MaxRTTMs = 251 }, "251 is outside 1..=Δ/2 (250 for delta_ms 500)"},
	} {
		c := clockhealth.DefaultConfig()
		tc.e(&c)
		c.Normalize()
		if err := c.Validate("clock"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the text %q", tc.name, err, tc.want)
		}
	}
}
