package agent

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/config"
)

// Config is agent.yaml (SPEC §8). DefaultConfig fills every default; the
// file and then the flags that were set override it; Validate names the key.
type Config struct {
	Listen     string `yaml:"listen"`      // TCKCLK/2 TCP, HOST:PORT
	HTTP       string `yaml:"http"`        // ops: /metrics /livez /readyz /v1/status
	SecretFile string `yaml:"secret_file"` // SPEC §1.4 (or the environment)
	// Dev makes a loopback-only local reference for a one-host setup that
	// signs with dev_key (SPEC §2.2). Never for production.
	Dev bool `yaml:"dev"`

	ReadTimeoutMs     uint64 `yaml:"read_timeout_ms"`     // default 2000, 1..=10000
	WriteTimeoutMs    uint64 `yaml:"write_timeout_ms"`    // default 2000, 1..=10000
	MaxConns          int    `yaml:"max_conns"`           // default 16384
	ShutdownTimeoutMs uint64 `yaml:"shutdown_timeout_ms"` // default 5000
	MaxSourceAgeMs    uint64 `yaml:"max_source_age_ms"`   // default 120000, 1..=3600000
	MaxDriftPPM       uint64 `yaml:"max_drift_ppm"`       // default 50, 1..=100000

	Sources Sources `yaml:"sources"`
}

// Sources configures each source; a source with no address is off.
type Sources struct {
	NTP    NTPConfig    `yaml:"ntp"`
	Chrony ChronyConfig `yaml:"chrony"`
	PTP    PTPConfig    `yaml:"ptp"`
	Kernel KernelConfig `yaml:"kernel"`
}

// NTPConfig is the ntp source: on when servers is not empty.
type NTPConfig struct {
	Servers           []string `yaml:"servers"`              // HOST[:PORT], port 123 by default
	MinTruechimers    int      `yaml:"min_truechimers"`      // 0: a majority of servers
	PollIntervalMs    uint64   `yaml:"poll_interval_ms"`     // default 16000
	TimeoutMs         uint64   `yaml:"timeout_ms"`           // default 1000
	MaxRTTMs          uint64   `yaml:"max_rtt_ms"`           // default 500
	MaxRootDistanceMs uint64   `yaml:"max_root_distance_ms"` // default 1500
	MaxStratum        int      `yaml:"max_stratum"`          // default 15
}

// ChronyConfig is the chrony source: on when address is set.
type ChronyConfig struct {
	Address        string `yaml:"address"`          // unix:///run/chrony/chronyd.sock or udp://HOST:323
	PollIntervalMs uint64 `yaml:"poll_interval_ms"` // default 1000
	TimeoutMs      uint64 `yaml:"timeout_ms"`       // default 500
}

// PTPConfig is the ptp source: on when uds is set.
type PTPConfig struct {
	UDS            string `yaml:"uds"`              // ptp4l's uds_address, e.g. /var/run/ptp4l
	Domain         uint8  `yaml:"domain"`           // ptp4l domainNumber
	PollIntervalMs uint64 `yaml:"poll_interval_ms"` // default 1000
	TimeoutMs      uint64 `yaml:"timeout_ms"`       // default 500
}

// KernelConfig is the kernel (adjtimex) source.
type KernelConfig struct {
	Enabled        bool   `yaml:"enabled"`
	PollIntervalMs uint64 `yaml:"poll_interval_ms"` // default 1000
}

// Defaults.
const (
	DefaultListen         = "0.0.0.0:7970"
	DefaultHTTP           = "127.0.0.1:7971"
	DefaultReadTimeoutMs  = 2000
	DefaultMaxConns       = 16384
	DefaultMaxSourceAgeMs = 120000
	DefaultMaxDriftPPM    = 50
	// MaxReadTimeoutMs: SPEC §7 requires a silent client closed within 10 s.
	MaxReadTimeoutMs = 10000
)

// DefaultConfig returns every default.
func DefaultConfig() Config {
	return Config{
		Listen:            DefaultListen,
		HTTP:              DefaultHTTP,
		ReadTimeoutMs:     DefaultReadTimeoutMs,
		WriteTimeoutMs:    2000,
		MaxConns:          DefaultMaxConns,
		ShutdownTimeoutMs: 5000,
		MaxSourceAgeMs:    DefaultMaxSourceAgeMs,
		MaxDriftPPM:       DefaultMaxDriftPPM,
		Sources: Sources{
			NTP:    NTPConfig{PollIntervalMs: 16000, TimeoutMs: 1000, MaxRTTMs: 500, MaxRootDistanceMs: 1500, MaxStratum: 15},
			Chrony: ChronyConfig{PollIntervalMs: 1000, TimeoutMs: 500},
			PTP:    PTPConfig{PollIntervalMs: 1000, TimeoutMs: 500},
			Kernel: KernelConfig{PollIntervalMs: 1000},
		},
	}
}

// LoadConfig decodes agent.yaml over the defaults (strict: unknown keys,
// duplicates and wrong types name the key). It does not validate.
func LoadConfig(data []byte) (Config, error) {
	cfg := DefaultConfig()
	if err := config.DecodeYAML(data, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func (c *Config) readTimeout() time.Duration  { return ms(c.ReadTimeoutMs) }
func (c *Config) writeTimeout() time.Duration { return ms(c.WriteTimeoutMs) }
func ms(v uint64) time.Duration               { return time.Duration(v) * time.Millisecond }

// Validate checks every rule; the error is a *config.Error naming the key.
func (c *Config) Validate() error {
	if err := checkAddr("listen", c.Listen, c.Dev); err != nil {
		return err
	}
	if err := checkAddr("http", c.HTTP, c.Dev); err != nil {
		return err
	}
	for _, r := range []struct {
		key    string
		v, lo  uint64
		hi     uint64
		reason string
	}{
		{"read_timeout_ms", c.ReadTimeoutMs, 1, MaxReadTimeoutMs, " (a silent client must be closed within 10 s)"},
		{"write_timeout_ms", c.WriteTimeoutMs, 1, 10000, ""},
		{"shutdown_timeout_ms", c.ShutdownTimeoutMs, 1, 600000, ""},
		{"max_source_age_ms", c.MaxSourceAgeMs, 1, 3600000, ""},
		{"max_drift_ppm", c.MaxDriftPPM, 1, 100000, ""},
	} {
		if r.v < r.lo || r.v > r.hi {
			return config.Errorf(r.key, "%d is outside %d..=%d%s", r.v, r.lo, r.hi, r.reason)
		}
	}
	if c.MaxConns < 1 || c.MaxConns > 1<<20 {
		return config.Errorf("max_conns", "%d is outside 1..=%d", c.MaxConns, 1<<20)
	}
	if err := c.Sources.validate(); err != nil {
		return err
	}
	if !c.Dev && !c.Sources.any() {
		return config.Errorf("sources", "no source configured: set sources.ntp.servers (--ntp), sources.chrony.address (--chrony), sources.ptp.uds (--ptp4l) or sources.kernel.enabled (--kernel); --dev is a development reference only")
	}
	return nil
}

func (s *Sources) any() bool {
	return len(s.NTP.Servers) > 0 || s.Chrony.Address != "" || s.PTP.UDS != "" || s.Kernel.Enabled
}

func (s *Sources) validate() error {
	n := &s.NTP
	for i, srv := range n.Servers {
		if _, err := NTPServerAddr(srv); err != nil {
			return config.Errorf(fmt.Sprintf("sources.ntp.servers[%d]", i), "%v", err)
		}
	}
	if len(n.Servers) > 64 {
		return config.Errorf("sources.ntp.servers", "%d servers; at most 64", len(n.Servers))
	}
	if n.MinTruechimers < 0 || (len(n.Servers) > 0 && n.MinTruechimers > len(n.Servers)) {
		return config.Errorf("sources.ntp.min_truechimers", "%d is outside 0..=%d (the number of servers; 0 means a majority)", n.MinTruechimers, len(n.Servers))
	}
	if n.MaxStratum < 1 || n.MaxStratum > 15 {
		return config.Errorf("sources.ntp.max_stratum", "%d is outside 1..=15", n.MaxStratum)
	}
	for _, r := range []struct {
		key    string
		v, max uint64
	}{
		{"sources.ntp.poll_interval_ms", n.PollIntervalMs, 3600000},
		{"sources.ntp.timeout_ms", n.TimeoutMs, 60000},
		{"sources.ntp.max_rtt_ms", n.MaxRTTMs, 60000},
		{"sources.ntp.max_root_distance_ms", n.MaxRootDistanceMs, 16000},
		{"sources.chrony.poll_interval_ms", s.Chrony.PollIntervalMs, 3600000},
		{"sources.chrony.timeout_ms", s.Chrony.TimeoutMs, 60000},
		{"sources.ptp.poll_interval_ms", s.PTP.PollIntervalMs, 3600000},
		{"sources.ptp.timeout_ms", s.PTP.TimeoutMs, 60000},
		{"sources.kernel.poll_interval_ms", s.Kernel.PollIntervalMs, 3600000},
	} {
		if r.v < 1 || r.v > r.max {
			return config.Errorf(r.key, "%d is outside 1..=%d", r.v, r.max)
		}
	}
	if s.Chrony.Address != "" {
		if _, _, err := ChronyAddr(s.Chrony.Address); err != nil {
			return config.Errorf("sources.chrony.address", "%v", err)
		}
	}
	if p := s.PTP.UDS; p != "" && !strings.HasPrefix(p, "/") {
		return config.Errorf("sources.ptp.uds", "%q is not an absolute socket path", p)
	}
	return nil
}

// MinTruechimers resolves 0 to a majority of the configured servers.
func (n *NTPConfig) minTruechimers() int {
	if n.MinTruechimers > 0 {
		return n.MinTruechimers
	}
	return len(n.Servers)/2 + 1
}

// NTPServerAddr checks HOST[:PORT] and returns HOST:PORT (port 123 by default).
func NTPServerAddr(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("empty server address")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		bare := strings.Trim(s, "[]")
		if _, perr := netip.ParseAddr(bare); perr == nil || !strings.Contains(s, ":") {
			host, port = bare, "123" // a bare IPv6 address or a host without port
		} else {
			return "", fmt.Errorf("%q is not HOST[:PORT]: %w", s, err)
		}
	}
	if host == "" || strings.ContainsAny(host, " /") {
		return "", fmt.Errorf("%q has no valid host", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("%q has an invalid port", s)
	}
	return net.JoinHostPort(host, port), nil
}

// ChronyAddr parses unix:///path or udp://HOST:PORT into a network and an
// address.
func ChronyAddr(s string) (network, addr string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("%q is not unix:///PATH or udp://HOST:PORT", s)
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") || u.RawQuery != "" {
			return "", "", fmt.Errorf("%q: want unix:///absolute/path/chronyd.sock", s)
		}
		return "unix", u.Path, nil
	case "udp":
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil || host == "" || u.Path != "" {
			return "", "", fmt.Errorf("%q: want udp://HOST:PORT (chronyd's cmdport, 323 by default)", s)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return "", "", fmt.Errorf("%q has an invalid port", s)
		}
		return "udp", u.Host, nil
	}
	return "", "", fmt.Errorf("%q: the scheme must be unix:// or udp://", s)
}

// checkAddr checks HOST:PORT; with dev the host must be loopback.
func checkAddr(key, addr string, dev bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return config.Errorf(key, "%q is not HOST:PORT", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return config.Errorf(key, "%q has an invalid port", addr)
	}
	if dev && !IsLoopback(host) {
		return config.Errorf(key, "%q: --dev (a development reference) listens on loopback only (127.0.0.0/8, ::1, localhost)", addr)
	}
	return nil
}

// IsLoopback reports whether host is a loopback address or "localhost".
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
