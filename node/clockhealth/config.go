package clockhealth

import (
	"fmt"
	"net"
	"strconv"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/protocol"
)

// Config is the `clock:` section of ticketd.yaml (SPEC §3.3, §8). Zero
// values of the derived limits mean "the default for this Δ"; Normalize
// fills them, Validate checks every rule and names the key path.
type Config struct {
	AgentAddr      string   `yaml:"agent_addr"`       // one agent, HOST:PORT
	AgentAddrs     []string `yaml:"agent_addrs"`      // several agents (SPEC §3.1)
	SecretFile     string   `yaml:"secret_file"`      // SPEC §1.4
	NextSecretFile string   `yaml:"next_secret_file"` // rotation: a MAC valid under either passes
	DeltaMs        uint64   `yaml:"delta_ms"`         // Δ, 2..=60000, default 500
	DevReference   bool     `yaml:"dev_reference"`    // accept only dev_key samples (SPEC §2.2)

	ProbeIntervalMs  uint64 `yaml:"probe_interval_ms"`  // default 1000
	ProbeTimeoutMs   uint64 `yaml:"probe_timeout_ms"`   // default 500, per exchange
	Burst            uint64 `yaml:"burst"`              // exchanges per agent per round at most (SPEC §3.1), default 3, 1..=8
	MaxRTTMs         uint64 `yaml:"max_rtt_ms"`         // default max(1, Δ/4), within [1, Δ/2]
	MaxUncertaintyMs uint64 `yaml:"max_uncertainty_ms"` // default max(1, Δ/4), within [1, Δ/2]
	MaxOffsetMs      uint64 `yaml:"max_offset_ms"`      // default max(1, Δ/4), within [1, Δ/2]
	StalenessMs      uint64 `yaml:"staleness_ms"`       // default 3 × interval, ≥ 2 × interval
	MaxSourceAgeMs   uint64 `yaml:"max_source_age_ms"`  // default 120000, 1..=3600000
	MaxDriftPPM      uint64 `yaml:"max_drift_ppm"`      // default 500, 1..=100000
}

// Defaults of SPEC §3.3.
const (
	DefaultProbeIntervalMs = 1000
	DefaultProbeTimeoutMs  = 500
	DefaultBurst           = 3
	MaxBurst               = 8
	DefaultMaxSourceAgeMs  = 120000
	DefaultMaxDriftPPM     = 500
	MaxMaxSourceAgeMs      = 3600000
	MaxMaxDriftPPM         = 100000
)

// DefaultConfig returns the defaults; derived limits stay zero until
// Normalize, since they depend on Δ.
func DefaultConfig() Config {
	return Config{
		DeltaMs:         protocol.DefaultDeltaMs,
		ProbeIntervalMs: DefaultProbeIntervalMs,
		ProbeTimeoutMs:  DefaultProbeTimeoutMs,
		Burst:           DefaultBurst,
		MaxSourceAgeMs:  DefaultMaxSourceAgeMs,
		MaxDriftPPM:     DefaultMaxDriftPPM,
	}
}

// Agents returns the configured agent addresses (agent_addr or agent_addrs).
func (c *Config) Agents() []string {
	if c.AgentAddr != "" {
		return []string{c.AgentAddr}
	}
	return c.AgentAddrs
}

// HasAgent reports whether any agent is configured.
func (c *Config) HasAgent() bool { return len(c.Agents()) > 0 }

// Normalize fills the derived defaults of SPEC §3.3 from Δ and the interval.
func (c *Config) Normalize() {
	quarter := max(1, c.DeltaMs/4)
	if c.MaxRTTMs == 0 {
		c.MaxRTTMs = quarter
	}
	if c.MaxUncertaintyMs == 0 {
		c.MaxUncertaintyMs = quarter
	}
	if c.MaxOffsetMs == 0 {
		c.MaxOffsetMs = quarter
	}
	if c.StalenessMs == 0 {
		c.StalenessMs = 3 * c.ProbeIntervalMs
	}
}

// Validate checks every rule of SPEC §3.2–3.3 after Normalize; errors name
// the key under prefix (normally "clock").
func (c *Config) Validate(prefix string) error {
	p := func(k string) string { return prefix + "." + k }
	if err := protocol.ValidateDelta(c.DeltaMs); err != nil {
		return config.Errorf(p("delta_ms"), "%d is outside %d..=%d", c.DeltaMs, protocol.MinDeltaMs, protocol.MaxDeltaMs)
	}
	if c.AgentAddr != "" && len(c.AgentAddrs) > 0 {
		return config.Errorf(p("agent_addrs"), "set agent_addr or agent_addrs, not both")
	}
	seen := map[string]int{}
	for i, a := range c.Agents() {
		key := p("agent_addr")
		if c.AgentAddr == "" {
			key = fmt.Sprintf("%s[%d]", p("agent_addrs"), i)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return config.Errorf(key, "%q is not HOST:PORT", a)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return config.Errorf(key, "%q: port must be 1..=65535", a)
		}
		if j, dup := seen[a]; dup {
			return config.Errorf(key, "%q is listed twice (also at index %d)", a, j)
		}
		seen[a] = i
	}
	if c.DevReference && !c.HasAgent() {
		return config.Errorf(p("dev_reference"), "set, but no agent is configured (agent_addr or agent_addrs)")
	}
	if c.NextSecretFile != "" && c.SecretFile == "" {
		return config.Errorf(p("next_secret_file"), "needs secret_file too (rotation keeps both)")
	}
	if c.ProbeIntervalMs == 0 || c.ProbeIntervalMs > 60000 {
		return config.Errorf(p("probe_interval_ms"), "%d is outside 1..=60000", c.ProbeIntervalMs)
	}
	if c.ProbeTimeoutMs == 0 || c.ProbeTimeoutMs > c.ProbeIntervalMs {
		return config.Errorf(p("probe_timeout_ms"), "%d is outside 1..=probe_interval_ms (%d)", c.ProbeTimeoutMs, c.ProbeIntervalMs)
	}
	if c.Burst < 1 || c.Burst > MaxBurst {
		return config.Errorf(p("burst"), "%d is outside 1..=%d", c.Burst, MaxBurst)
	}
	half := c.DeltaMs / 2
	for _, lim := range []struct {
		key string
		v   uint64
	}{{"max_rtt_ms", c.MaxRTTMs}, {"max_uncertainty_ms", c.MaxUncertaintyMs}, {"max_offset_ms", c.MaxOffsetMs}} {
		if lim.v < 1 || lim.v > half {
			return config.Errorf(p(lim.key), "%d is outside 1..=Δ/2 (%d for delta_ms %d)", lim.v, half, c.DeltaMs)
		}
	}
	if c.StalenessMs < 2*c.ProbeIntervalMs {
		return config.Errorf(p("staleness_ms"), "%d is below 2 × probe_interval_ms (%d)", c.StalenessMs, 2*c.ProbeIntervalMs)
	}
	if c.MaxSourceAgeMs < 1 || c.MaxSourceAgeMs > MaxMaxSourceAgeMs {
		return config.Errorf(p("max_source_age_ms"), "%d is outside 1..=%d", c.MaxSourceAgeMs, MaxMaxSourceAgeMs)
	}
	if c.MaxDriftPPM < 1 || c.MaxDriftPPM > MaxMaxDriftPPM {
		return config.Errorf(p("max_drift_ppm"), "%d is outside 1..=%d", c.MaxDriftPPM, MaxMaxDriftPPM)
	}
	return nil
}
