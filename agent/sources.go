package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/tckclk/tckclk/agent/source"
	"github.com/tckclk/tckclk/agent/source/kernel"
)

// buildSources turns the configuration into poll specs, in a fixed order
// (ntp, chrony, ptp, kernel, dev): ties in uncertainty go to the earlier.
func buildSources(cfg *Config, clock source.Clock, log *slog.Logger) ([]SourceSpec, error) {
	var specs []SourceSpec
	s := &cfg.Sources
	if s.Kernel.Enabled {
		specs = append(specs, SourceSpec{Source: kernel.New(clock, nil), Interval: ms(s.Kernel.PollIntervalMs), Timeout: time.Second})
	}
	if cfg.Dev {
		specs = append(specs, SourceSpec{Source: devSource{clock: clock}, Interval: time.Second, Timeout: time.Second})
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
