package agent

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/tckclk/tckclk/agent/source"
	"github.com/tckclk/tckclk/agent/source/chrony"
	"github.com/tckclk/tckclk/agent/source/kernel"
	"github.com/tckclk/tckclk/agent/source/ntp"
	"github.com/tckclk/tckclk/agent/source/ptp"
	"github.com/tckclk/tckclk/internal/config"
)

// buildSources turns the configuration into poll specs, in a fixed order
// (ntp, chrony, ptp, kernel, dev): ties in uncertainty go to the earlier.
func buildSources(cfg *Config, clock source.Clock, env func(string) (string, bool), log *slog.Logger) ([]SourceSpec, error) {
	var specs []SourceSpec
	s := &cfg.Sources
	if n := &s.NTP; len(n.Servers) > 0 {
		servers := make([]string, len(n.Servers))
		for i, srv := range n.Servers {
			servers[i], _ = NTPServerAddr(srv) // checked by Validate
		}
		src := ntp.New(ntp.Config{Servers: servers, MinTruechimers: n.minTruechimers(), Timeout: ms(n.TimeoutMs),
			MaxRTT: ms(n.MaxRTTMs), MaxRootDistance: ms(n.MaxRootDistanceMs), MaxStratum: n.MaxStratum}, clock, nil)
		specs = append(specs, SourceSpec{Source: src, Interval: ms(n.PollIntervalMs), Timeout: ms(n.TimeoutMs) + 100*time.Millisecond})
	}
	if c := &s.Chrony; c.Address != "" {
		network, addr, _ := ChronyAddr(c.Address) // checked by Validate
		src, err := chrony.New(network, addr, cfg.Dev, clock)
		if err != nil {
			return nil, config.Errorf("sources.chrony.address", "%v", err)
		}
		specs = append(specs, SourceSpec{Source: src, Interval: ms(c.PollIntervalMs), Timeout: ms(c.TimeoutMs)})
	}
	if p := &s.PTP; p.UDS != "" {
		// ptp4l replies to a socket the agent binds: in systemd's
		// RuntimeDirectory when there is one (not a private /tmp).
		dir, ok := env("RUNTIME_DIRECTORY")
		if !ok || dir == "" {
			dir = os.TempDir()
		}
		specs = append(specs, SourceSpec{Source: ptp.New(p.UDS, dir, p.Domain, clock), Interval: ms(p.PollIntervalMs), Timeout: ms(p.TimeoutMs)})
	}
	if s.Kernel.Enabled {
		specs = append(specs, SourceSpec{Source: kernel.New(clock, nil), Interval: ms(s.Kernel.PollIntervalMs), Timeout: time.Second})
	}
	if cfg.Dev {
		specs = append(specs, SourceSpec{Source: devSource{clock: clock}, Interval: time.Second, Timeout: time.Second})
	}
	for _, sp := range specs {
		log.Info("source configured", "source", sp.Source.Name(), "poll_interval", sp.Interval)
	}
	return specs, nil
}

// devSource is the --dev local reference (SPEC §2.2): the host clock,
// answered as a reference only on loopback and only under dev_key, for a
// one-host setup where every node reads this very clock.
type devSource struct{ clock source.Clock }

// DevUncertainty is what the dev reference claims: every reader shares the
// clock, so the error is the read granularity, but a synced sample never
// claims 0 (SPEC §2.1).
const DevUncertainty = time.Millisecond

func (devSource) Name() string { return "dev" }

func (d devSource) Poll(context.Context) (source.Sample, error) {
	return source.Sample{At: d.clock.Now(), Uncertainty: DevUncertainty,
		Info: map[string]any{"dev_reference": true, "note": "local clock, development only"}}, nil
}
