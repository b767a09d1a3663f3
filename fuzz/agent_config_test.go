package fuzz

import (
	"errors"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tckclk/tckclk/agent"
	"github.com/tckclk/tckclk/internal/config"
)

// FuzzAgentConfig: agent.yaml decoding and validation never panic; every
// rejection is a *config.Error (it names the key); an accepted config
// re-encodes to YAML that decodes to the same config.
func FuzzAgentConfig(f *testing.F) {
	for _, s := range []string{
		"",
		"listen: 127.0.0.1:7970\nsources:\n  kernel:\n    enabled: true\n",
		"dev: true\nlisten: 127.0.0.1:0\nhttp: '[::1]:0'\n",
		"sources:\n  ntp:\n    servers: [a.example, '[::1]:123', 10.0.0.1]\n    min_truechimers: 2\n",
		"sources:\n  chrony:\n    address: unix:///run/chrony/chronyd.sock\n  ptp:\n    uds: /var/run/ptp4l\n    domain: 24\n",
		"read_timeout_ms: 99999999999999999999\n",
		"max_conns: -1\nmax_drift_ppm: 0\n",
		"sources: &a {ntp: *a}\n",
		"listen: [1, 2]\n",
		"sources:\n  ntp:\n    servers: [a]\n    servers: [b]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := agent.LoadConfig(data)
		var ce *config.Error
		if err != nil {
			if !errors.As(err, &ce) {
				t.Fatalf("decode error is not a *config.Error: %T %v", err, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			if !errors.As(err, &ce) || ce.Path == "" {
				t.Fatalf("validation error without a key: %T %v", err, err)
			}
			return
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := agent.LoadConfig(out)
		if err != nil {
			t.Fatalf("re-decoding the printed config: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(normalize(cfg), normalize(again)) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, again)
		}
	})
}

// normalize treats a nil and an empty server list alike.
func normalize(c agent.Config) agent.Config {
	if len(c.Sources.NTP.Servers) == 0 {
		c.Sources.NTP.Servers = nil
	}
	return c
}
