package node

import (
	"net"
	"os"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
	"github.com/tckclk/tckclk/node/consensus"
	"go.yaml.in/yaml/v3"
)

// Defaults of SPEC §4.1 and §8.
const (
	DefaultAPIAddr  = "127.0.0.1:7980"
	DefaultDataDir  = "./ticketd-data"
	DefaultNodeName = "node-1"
	// DefaultAPIMaxConns caps concurrent API connections.
	DefaultAPIMaxConns = 1024
	// The API's connection timeouts: a request header must arrive within
	// DefaultAPIReadHeaderTimeout; an authenticated connection may idle
	// DefaultAPIIdleTimeout between requests, one that never
	// authenticated DefaultAPIUnauthIdleTimeout.
	DefaultAPIReadHeaderTimeout = 5 * time.Second
	DefaultAPIIdleTimeout       = 2 * time.Minute
	DefaultAPIUnauthIdleTimeout = 5 * time.Second
	// DefaultMaxWaiters and DefaultMaxWatchers cap blocking grants and
	// blocking reads per node (each holds an API connection).
	DefaultMaxWaiters  = 256
	DefaultMaxWatchers = 256
)

// Config is ticketd.yaml (SPEC §6, §8). The cluster keys keep the seed's
// shape (cluster.enabled, name, failure_domain, membership.*, internode.*,
// raft.*) so the cluster mode can grow into them.
type Config struct {
	Cluster cluster.Config     `yaml:"cluster"`
	Clock   clockhealth.Config `yaml:"clock"`
	API     APIConfig          `yaml:"api"`
	Log     LogConfig          `yaml:"log"`
}

// APIConfig is the `api:` section (SPEC §4.1).
type APIConfig struct {
	Addr           string       `yaml:"addr"`             // --http
	TokenFile      string       `yaml:"token_file"`       // client bearer token (optional)
	AdminTokenFile string       `yaml:"admin_token_file"` // guards /v1/cluster/...; unset: admin API off
	TLS            APITLSConfig `yaml:"tls"`
	// HealthAddr, when set, is a second listener serving only /livez,
	// /readyz and /metrics, without token, for probes and Prometheus; the
	// main listener keeps serving them too.
	HealthAddr string `yaml:"health_addr"`
	// MaxConns caps concurrent API connections; a new one beyond it evicts
	// an idle one or is closed at once (node/api/connlimit).
	MaxConns int `yaml:"max_conns"`
	// ReservedConns of MaxConns are for connections that have
	// authenticated (a request with a valid client or admin token, or any
	// authorized request when no token is set): unauthenticated ones hold
	// at most MaxConns − ReservedConns. 0: a quarter of MaxConns.
	ReservedConns int `yaml:"reserved_conns"`
	// MaxConnsPerSource caps the unauthenticated connections of one
	// remote address (IPv6: one /64). 0: half of MaxConns.
	MaxConnsPerSource int `yaml:"max_conns_per_source"`
	// ReadHeaderTimeout bounds a TLS handshake and a request header.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes an authenticated connection idle this long;
	// UnauthIdleTimeout one that never authenticated.
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	UnauthIdleTimeout time.Duration `yaml:"unauthenticated_idle_timeout"`
	// MaxWaiters caps blocking grants ("wait_ms") waiting on this node at
	// once, forwarded ones included; one more is a 429 (SPEC §4.2).
	MaxWaiters int `yaml:"max_waiters"`
	// MaxWatchers caps blocking reads (?wait=) on this node; one more is a 429.
	MaxWatchers int `yaml:"max_watchers"`
	// MaxWaitersPerCaller and MaxWatchersPerCaller cap what one caller (a
	// client address; IPv6: its /64) holds of them on the node it calls.
	// 0: a quarter of the cap.
	MaxWaitersPerCaller  int `yaml:"max_waiters_per_caller"`
	MaxWatchersPerCaller int `yaml:"max_watchers_per_caller"`
}

// APITLSConfig is api.tls: server certificate and key, optional client CA
// (then clients must present a certificate it signed).
type APITLSConfig struct {
	Enabled      bool   `yaml:"enabled"`
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// LogConfig is the `log:` section.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text, json
}

// DefaultConfig is the embedded default: one node, data in ./ticketd-data,
// API on 127.0.0.1:7980, no agent (host clock), Δ 500 ms.
func DefaultConfig() Config {
	return Config{
		Cluster: cluster.Config{
			Name: DefaultNodeName,
			Membership: cluster.MembershipConfig{
				BindPort: 7946,
			},
			Raft: cluster.RaftConfig{
				DataDir:           DefaultDataDir,
				BootstrapExpect:   1,
				Eligible:          true,
				MaxVoters:         cluster.DefaultMaxVoters,
				MaxStandbys:       cluster.DefaultMaxStandby,
				ReconcileDebounce: reconcile.DefaultDebounce,
				DeadVoterGrace:    reconcile.DefaultDeadVoterGrace,
				SnapshotThreshold: 8192,
				SnapshotInterval:  30 * time.Second,
				TrailingLogs:      10240,
				LogStore:          consensus.LogStoreAuto,
				CrashDetectMs:     cluster.DefaultCrashDetectMs,
			},
			Liveness:       cluster.DefaultLivenessConfig(),
			AutoReplace:    true,
			AutoReplaceMax: cluster.DefaultAutoReplaceMax,
		},
		Clock: clockhealth.DefaultConfig(),
		API: APIConfig{Addr: DefaultAPIAddr, MaxConns: DefaultAPIMaxConns, ReadHeaderTimeout: DefaultAPIReadHeaderTimeout,
			IdleTimeout: DefaultAPIIdleTimeout, UnauthIdleTimeout: DefaultAPIUnauthIdleTimeout,
			MaxWaiters: DefaultMaxWaiters, MaxWatchers: DefaultMaxWatchers},
		Log: LogConfig{Level: "info", Format: "text"},
	}
}

// ParseConfig decodes a ticketd.yaml document over the defaults (strict:
// unknown keys, duplicate keys and wrong types are errors naming the key).
// Call Normalize and Validate afterwards.
func ParseConfig(data []byte) (Config, error) {
	cfg := DefaultConfig()
	if err := config.DecodeYAML(data, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Normalize fills derived defaults (the clock limits that depend on Δ).
func (c *Config) Normalize() {
	c.Clock.Normalize()
	c.API.normalize()
}

// normalize fills the api keys whose default follows another key.
func (a *APIConfig) normalize() {
	if a.ReservedConns == 0 {
		a.ReservedConns = a.MaxConns / 4
	}
	if a.MaxConnsPerSource == 0 {
		a.MaxConnsPerSource = max(1, a.MaxConns/2)
	}
	if a.MaxWaitersPerCaller == 0 {
		a.MaxWaitersPerCaller = max(1, a.MaxWaiters/4)
	}
	if a.MaxWatchersPerCaller == 0 {
		a.MaxWatchersPerCaller = max(1, a.MaxWatchers/4)
	}
}

// Validate checks every key; errors are *config.Error naming the key path.
func (c *Config) Validate() error {
	if err := c.Cluster.Validate(c.Clock.HasAgent()); err != nil {
		return err
	}
	if err := c.Clock.Validate("clock"); err != nil {
		return err
	}
	if c.API.Addr == "" {
		return config.Errorf("api.addr", "must not be empty")
	}
	if c.API.MaxConns < 1 || c.API.MaxConns > 1_000_000 {
		return config.Errorf("api.max_conns", "%d is outside 1..=1000000", c.API.MaxConns)
	}
	if err := c.API.validateConns(); err != nil {
		return err
	}
	if c.API.MaxWaiters < 1 || c.API.MaxWaiters > 1_000_000 {
		return config.Errorf("api.max_waiters", "%d is outside 1..=1000000", c.API.MaxWaiters)
	}
	if c.API.MaxWatchers < 1 || c.API.MaxWatchers > 1_000_000 {
		return config.Errorf("api.max_watchers", "%d is outside 1..=1000000", c.API.MaxWatchers)
	}
	if c.API.MaxWaitersPerCaller < 1 || c.API.MaxWaitersPerCaller > c.API.MaxWaiters {
		return config.Errorf("api.max_waiters_per_caller", "%d is outside 1..=%d (api.max_waiters)", c.API.MaxWaitersPerCaller, c.API.MaxWaiters)
	}
	if c.API.MaxWatchersPerCaller < 1 || c.API.MaxWatchersPerCaller > c.API.MaxWatchers {
		return config.Errorf("api.max_watchers_per_caller", "%d is outside 1..=%d (api.max_watchers)", c.API.MaxWatchersPerCaller, c.API.MaxWatchers)
	}
	if _, _, err := net.SplitHostPort(c.API.Addr); err != nil {
		return config.Errorf("api.addr", "%q is not HOST:PORT", c.API.Addr)
	}
	if c.API.HealthAddr != "" {
		if _, _, err := net.SplitHostPort(c.API.HealthAddr); err != nil {
			return config.Errorf("api.health_addr", "%q is not HOST:PORT", c.API.HealthAddr)
		}
		if c.API.HealthAddr == c.API.Addr {
			return config.Errorf("api.health_addr", "%q is api.addr too; give the health listener its own port, or leave it unset", c.API.HealthAddr)
		}
	}
	t := c.API.TLS
	switch {
	case !t.Enabled && (t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != ""):
		return config.Errorf("api.tls.enabled", "TLS files are set but enabled is false; set enabled: true or remove them (never a silent plaintext fallback)")
	case t.Enabled && t.CertFile == "":
		return config.Errorf("api.tls.cert_file", "required when api.tls.enabled is true")
	case t.Enabled && t.KeyFile == "":
		return config.Errorf("api.tls.key_file", "required when api.tls.enabled is true")
	}
	if c.API.TokenFile != "" && c.API.TokenFile == c.API.AdminTokenFile {
		return config.Errorf("api.admin_token_file", "is the same file as api.token_file; the admin token must differ from the client token")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return config.Errorf("log.level", "%q is not debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return config.Errorf("log.format", "%q is not text or json", c.Log.Format)
	}
	return nil
}

// validateConns checks the connection limits and timeouts of api.
func (a *APIConfig) validateConns() error {
	switch {
	case a.ReservedConns < 0 || a.ReservedConns >= a.MaxConns:
		return config.Errorf("api.reserved_conns", "%d is outside 0..=%d (below api.max_conns %d)", a.ReservedConns, a.MaxConns-1, a.MaxConns)
	case a.MaxConnsPerSource < 1 || a.MaxConnsPerSource > a.MaxConns:
		return config.Errorf("api.max_conns_per_source", "%d is outside 1..=%d (api.max_conns)", a.MaxConnsPerSource, a.MaxConns)
	case a.ReadHeaderTimeout < 100*time.Millisecond || a.ReadHeaderTimeout > time.Minute:
		return config.Errorf("api.read_header_timeout", "%v is outside 100ms..=1m", a.ReadHeaderTimeout)
	case a.IdleTimeout < time.Second || a.IdleTimeout > time.Hour:
		return config.Errorf("api.idle_timeout", "%v is outside 1s..=1h", a.IdleTimeout)
	case a.UnauthIdleTimeout < 100*time.Millisecond || a.UnauthIdleTimeout > a.IdleTimeout:
		return config.Errorf("api.unauthenticated_idle_timeout", "%v is outside 100ms..=%v (api.idle_timeout)", a.UnauthIdleTimeout, a.IdleTimeout)
	}
	return nil
}

// CheckConfig runs every check a start runs before it opens the data dir
// (ticketd --print-config calls it, so a config it prints is one that
// starts): the config's own rules, then the secrets — the clock secret(s)
// when an agent is configured, the API tokens, their distinctness from each
// other and from the gossip key — and in cluster mode the identity key, the
// trust map and its self entry, the gossip key and the mesh's TLS files.
// env is nil for the process environment.
func CheckConfig(cfg Config, env secret.Lookup) error {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if env == nil {
		env = os.LookupEnv
	}
	if _, _, err := loadAllSecrets(&cfg, env, true); err != nil {
		return err
	}
	if cfg.Cluster.Enabled {
		if err := cluster.CheckKeys(&cfg.Cluster); err != nil {
			return err
		}
	}
	return nil
}

// YAML renders the effective configuration with secrets redacted (the
// files that hold secrets are paths, and are shown).
func (c *Config) YAML() ([]byte, error) {
	return yaml.Marshal(c)
}
