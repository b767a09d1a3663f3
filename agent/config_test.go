package agent

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/internal/config"
)

// SPEC §6: strict YAML; every bad value names its key.
func TestConfigErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		yaml string
		path string
	}{
		{"listn: 1.2.3.4:5", "listn"},
		{"sources:\n  ntp:\n    server: [a]", "sources.ntp.server"},
		{"max_conns: many", "max_conns"},
		{"dev: yes please", "dev"},
		{"read_timeout_ms: 1\nread_timeout_ms: 2", "read_timeout_ms"},
		{"sources: [ntp]", "sources"},
		{"sources:\n  kernel:\n    enabled: 1", "sources.kernel.enabled"},
	}
	for _, c := range cases {
		_, err := LoadConfig([]byte(c.yaml))
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Path != c.path {
			t.Errorf("%q: got %v, want an error naming %s", c.yaml, err, c.path)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := func() Config {
		c := DefaultConfig()
		c.Sources.Kernel.Enabled = true
		return c
	}
	if c := ok(); c.Validate() != nil {
		t.Fatalf("defaults + kernel: %v", c.Validate())
	}
	cases := []struct {
		name string
		edit func(*Config)
		path string
	}{
		{"no source", func(c *Config) { c.Sources.Kernel.Enabled = false }, "sources"},
		{"listen", func(c *Config) { c.Listen = "7970" }, "listen"},
		{"http port", func(c *Config) { c.HTTP = "127.0.0.1:http" }, "http"},
		{"dev not loopback", func(c *Config) { c.Dev = true; c.Listen = "10.0.0.1:7970" }, "listen"},
		{"dev http not loopback", func(c *Config) { c.Dev = true; c.Listen = "127.0.0.1:1"; c.HTTP = "0.0.0.0:7971" }, "http"},
		{"read timeout above 10 s", func(c *Config) { c.ReadTimeoutMs = 10001 }, "read_timeout_ms"},
		{"read timeout 0", func(c *Config) { c.ReadTimeoutMs = 0 }, "read_timeout_ms"},
		{"max conns 0", func(c *Config) { c.MaxConns = 0 }, "max_conns"},
		{"drift 0", func(c *Config) { c.MaxDriftPPM = 0 }, "max_drift_ppm"},
		{"source age", func(c *Config) { c.MaxSourceAgeMs = 3600001 }, "max_source_age_ms"},
		{"ntp server", func(c *Config) { c.Sources.NTP.Servers = []string{"ok.example", "bad host:1"} }, "sources.ntp.servers[1]"},
		{"ntp truechimers", func(c *Config) { c.Sources.NTP.Servers = []string{"a"}; c.Sources.NTP.MinTruechimers = 2 }, "sources.ntp.min_truechimers"},
		{"ntp stratum", func(c *Config) { c.Sources.NTP.MaxStratum = 16 }, "sources.ntp.max_stratum"},
		{"ntp poll", func(c *Config) { c.Sources.NTP.PollIntervalMs = 0 }, "sources.ntp.poll_interval_ms"},
		{"chrony scheme", func(c *Config) { c.Sources.Chrony.Address = "tcp://127.0.0.1:323" }, "sources.chrony.address"},
		{"chrony relative", func(c *Config) { c.Sources.Chrony.Address = "unix://run/chrony.sock" }, "sources.chrony.address"},
		{"chrony no port", func(c *Config) { c.Sources.Chrony.Address = "udp://127.0.0.1" }, "sources.chrony.address"},
		{"ptp relative", func(c *Config) { c.Sources.PTP.UDS = "ptp4l" }, "sources.ptp.uds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok()
			c.edit(&cfg)
			err := cfg.Validate()
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path != c.path {
				t.Fatalf("got %v, want an error naming %s", err, c.path)
			}
			if !strings.Contains(err.Error(), c.path) {
				t.Fatalf("message %q lacks the key", err)
			}
		})
	}
}

func TestAddressForms(t *testing.T) {
	for in, want := range map[string]string{"a.example": "a.example:123", "a.example:1123": "a.example:1123", "[::1]:9": "[::1]:9", "::1": "[::1]:123", "10.0.0.1": "10.0.0.1:123"} {
		if got, err := NTPServerAddr(in); err != nil || got != want {
			t.Errorf("NTPServerAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string][2]string{"unix:///run/chrony/chronyd.sock": {"unix", "/run/chrony/chronyd.sock"}, "udp://127.0.0.1:323": {"udp", "127.0.0.1:323"}} {
		n, a, err := ChronyAddr(in)
		if err != nil || n != want[0] || a != want[1] {
			t.Errorf("ChronyAddr(%q) = %q %q %v", in, n, a, err)
		}
	}
	for _, h := range []string{"127.0.0.1", "127.9.9.9", "::1", "localhost", "::ffff:127.0.0.1"} {
		if !IsLoopback(h) {
			t.Errorf("%s is loopback", h)
		}
	}
	for _, h := range []string{"0.0.0.0", "10.0.0.1", "", "example.com", "::"} {
		if IsLoopback(h) {
			t.Errorf("%s is not loopback", h)
		}
	}
}

// The example deploy/agent/agent.yaml decodes strictly and validates.
func TestExampleConfig(t *testing.T) {
	data, err := os.ReadFile("../deploy/agent/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Dev || !cfg.Sources.Kernel.Enabled && cfg.Sources.Chrony.Address == "" {
		t.Fatalf("example %+v", cfg)
	}
}
