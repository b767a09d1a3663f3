package node

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
	"github.com/tckclk/tckclk/node/consensus"
	"go.yaml.in/yaml/v3"
)

// Defaults of SPEC §4.1 and §8.
const (
	DefaultAPIAddr    = "127.0.0.1:7980"
	DefaultDataDir    = "./ticketd-data"
	DefaultNodeName   = "node-1"
	DefaultMaxVoters  = 5
	DefaultMaxStandby = 4
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
	// DefaultCrashDetectMs is cluster.raft.crash_detect_ms (SPEC §5
	// "Crash failover"); minCrashDetectMs its least value but 0 (off).
	DefaultCrashDetectMs = 100
	minCrashDetectMs     = 10
	// DefaultAutoReplaceMax is cluster.auto_replace_max: replacements of
	// one NAME by a new generation per hour (SPEC §3.4).
	DefaultAutoReplaceMax = 3
)

// Config is ticketd.yaml (SPEC §6, §8). The cluster keys keep the seed's
// shape (cluster.enabled, name, failure_domain, membership.*, internode.*,
// raft.*) so the cluster mode can grow into them.
type Config struct {
	Cluster ClusterConfig      `yaml:"cluster"`
	Clock   clockhealth.Config `yaml:"clock"`
	API     APIConfig          `yaml:"api"`
	Log     LogConfig          `yaml:"log"`
}

// ClusterConfig is the `cluster:` section: enabled false is one durable
// Raft voter without gossip; true is cluster mode (cluster.go).
type ClusterConfig struct {
	Enabled       bool             `yaml:"enabled"`
	Name          string           `yaml:"name"` // this node's NodeId (the Raft server ID)
	FailureDomain string           `yaml:"failure_domain"`
	Membership    MembershipConfig `yaml:"membership"`
	Internode     InternodeConfig  `yaml:"internode"`
	Raft          RaftConfig       `yaml:"raft"`
	Liveness      LivenessConfig   `yaml:"liveness"`
	// AutoReplace: a node started on its retired data dir (its clock
	// FAILED after it joined) moves that dir aside and comes back as the
	// next generation NAME~G (SPEC §3.4, node/generation.go); off, it
	// refuses to start.
	AutoReplace bool `yaml:"auto_replace"`
	// AutoReplaceMax caps those replacements of NAME within an hour; one
	// more is refused (0: never replace).
	AutoReplaceMax int `yaml:"auto_replace_max"`
}

// MembershipConfig is cluster.membership (gossip; cluster mode only).
type MembershipConfig struct {
	JoinAddrs  string       `yaml:"join_addrs"` // "host:7946,host:7946"
	SecretKey  SecretString `yaml:"secret_key" flag:"-"`
	SecretFile string       `yaml:"secret_file"`
	BindAddr   string       `yaml:"bind_addr"`
	BindPort   int          `yaml:"bind_port"`
}

// InternodeConfig is cluster.internode (mesh identity; cluster mode only).
type InternodeConfig struct {
	IdentityKey     SecretString      `yaml:"identity_key" flag:"-"`
	IdentityKeyFile string            `yaml:"identity_key_file"`
	TrustedPeerKeys map[string]string `yaml:"trusted_peer_keys" flag:"-"`
	BindPort        int               `yaml:"bind_port"`
	TLS             TLSConfig         `yaml:"tls"`
}

// TLSConfig is cluster.internode.tls.
type TLSConfig struct {
	Enabled  bool   `yaml:"enabled"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// RaftConfig is cluster.raft. DataDir and the snapshot keys apply in
// single-node mode too.
type RaftConfig struct {
	DataDir           string        `yaml:"data_dir"`
	BootstrapExpect   int           `yaml:"bootstrap_expect"`
	Role              string        `yaml:"role"` // "" (eligible member) or "client"
	Eligible          bool          `yaml:"eligible"`
	Priority          int           `yaml:"priority"`
	MaxVoters         int           `yaml:"max_voters"`
	MaxStandbys       int           `yaml:"max_standbys"`
	ReconcileDebounce time.Duration `yaml:"reconcile_debounce"`
	// DeadVoterGrace is how long a gone voter (gossip-dead or retired,
	// silent in Raft) keeps its slot when no caught-up replacement can
	// take it (SPEC §5); at least reconcile_debounce.
	DeadVoterGrace time.Duration `yaml:"dead_voter_grace"`
	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one; SnapshotInterval how often that is checked;
	// TrailingLogs how many entries a snapshot leaves in the log.
	SnapshotThreshold uint64        `yaml:"snapshot_threshold"`
	SnapshotInterval  time.Duration `yaml:"snapshot_interval"`
	TrailingLogs      uint64        `yaml:"trailing_logs"`
	// LogStore is the Raft log store of a new data dir: auto (the store
	// an existing dir holds, else wal), wal or bolt (node/consensus
	// logstore.go; docs/data-dir.md).
	LogStore string `yaml:"log_store"`
	// CrashDetectMs is the heartbeat timeout of a follower whose mesh
	// session to its leader ended from the leader's side, until a leader
	// is known again (SPEC §5 "Crash failover"; crashfailover.go); 0 off.
	CrashDetectMs uint64 `yaml:"crash_detect_ms"`
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

// SecretString is an inline secret: it never prints, and marshals as
// "[redacted]" so --print-config cannot show it.
type SecretString string

func (s SecretString) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString hides the value from %#v.
func (s SecretString) GoString() string { return s.String() }

// MarshalYAML hides the value.
func (s SecretString) MarshalYAML() (any, error) { return s.String(), nil }

// DefaultConfig is the embedded default: one node, data in ./ticketd-data,
// API on 127.0.0.1:7980, no agent (host clock), Δ 500 ms.
func DefaultConfig() Config {
	return Config{
		Cluster: ClusterConfig{
			Name: DefaultNodeName,
			Membership: MembershipConfig{
				BindPort: 7946,
			},
			Raft: RaftConfig{
				DataDir:           DefaultDataDir,
				BootstrapExpect:   1,
				Eligible:          true,
				MaxVoters:         DefaultMaxVoters,
				MaxStandbys:       DefaultMaxStandby,
				ReconcileDebounce: reconcile.DefaultDebounce,
				DeadVoterGrace:    reconcile.DefaultDeadVoterGrace,
				SnapshotThreshold: 8192,
				SnapshotInterval:  30 * time.Second,
				TrailingLogs:      10240,
				LogStore:          consensus.LogStoreAuto,
				CrashDetectMs:     DefaultCrashDetectMs,
			},
			Liveness:       DefaultLivenessConfig(),
			AutoReplace:    true,
			AutoReplaceMax: DefaultAutoReplaceMax,
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
	if c.Cluster.Enabled {
		if err := c.validateCluster(); err != nil {
			return err
		}
	}
	if name, gen, ok := strings.Cut(c.Cluster.Name, identity.GenerationSep); ok {
		return config.Errorf("cluster.name", "%q carries a generation suffix (%s%s): set cluster.name to %q; a node picks its generation itself when it replaces a retired one (SPEC §3.4)",
			c.Cluster.Name, identity.GenerationSep, gen, name)
	}
	if err := validName(c.Cluster.Name); err != nil {
		return config.Errorf("cluster.name", "%v", err)
	}
	if c.Cluster.AutoReplaceMax < 0 {
		return config.Errorf("cluster.auto_replace_max", "%d is negative (0: never replace a retired node by a new generation)", c.Cluster.AutoReplaceMax)
	}
	r := &c.Cluster.Raft
	if strings.TrimSpace(r.DataDir) == "" {
		return config.Errorf("cluster.raft.data_dir", "must not be empty")
	}
	if r.BootstrapExpect < 0 {
		return config.Errorf("cluster.raft.bootstrap_expect", "%d is negative", r.BootstrapExpect)
	}
	if r.Role != "" && r.Role != "client" {
		return config.Errorf("cluster.raft.role", "%q is not \"\" or \"client\"", r.Role)
	}
	if r.MaxVoters < 1 {
		return config.Errorf("cluster.raft.max_voters", "%d is below 1", r.MaxVoters)
	}
	if r.MaxStandbys < 0 {
		return config.Errorf("cluster.raft.max_standbys", "%d is negative", r.MaxStandbys)
	}
	if r.SnapshotThreshold < 1 {
		return config.Errorf("cluster.raft.snapshot_threshold", "must be at least 1")
	}
	if r.SnapshotInterval < 5*time.Millisecond {
		return config.Errorf("cluster.raft.snapshot_interval", "%v is below 5ms", r.SnapshotInterval)
	}
	if !slices.Contains(consensus.LogStores, r.LogStore) {
		return config.Errorf("cluster.raft.log_store", "%q is not one of %s", r.LogStore, strings.Join(consensus.LogStores, ", "))
	}
	if hb := consensus.ClusterTiming().Heartbeat; r.CrashDetectMs != 0 && (r.CrashDetectMs < minCrashDetectMs || r.CrashDetectMs >= uint64(hb.Milliseconds())) {
		return config.Errorf("cluster.raft.crash_detect_ms", "%d is outside %d..%d (below the heartbeat timeout, %v); 0 turns crash failover off", r.CrashDetectMs, minCrashDetectMs, hb.Milliseconds()-1, hb)
	}
	if r.ReconcileDebounce < 0 {
		return config.Errorf("cluster.raft.reconcile_debounce", "%v is negative", r.ReconcileDebounce)
	}
	// A grace shorter than the debounce would end before the reconciler
	// looked (SPEC §5).
	if debounce := cmp.Or(r.ReconcileDebounce, reconcile.DefaultDebounce); r.DeadVoterGrace < debounce {
		return config.Errorf("cluster.raft.dead_voter_grace", "%v is below cluster.raft.reconcile_debounce (%v): a gone voter must keep its slot at least until the reconciler looks again", r.DeadVoterGrace, debounce)
	}
	if err := c.Cluster.Liveness.validate("cluster.liveness"); err != nil {
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

// validateCluster checks the cluster.* keys of a cluster node (files and
// secrets are checked when they are loaded, at start-up).
func (c *Config) validateCluster() error {
	if !c.Clock.HasAgent() {
		return config.Errorf("clock.agent_addr", "cluster mode needs clock health from an agent (SPEC §3): set clock.agent_addr or clock.agent_addrs")
	}
	m := &c.Cluster.Membership
	if m.BindPort < 0 || m.BindPort > 65535 {
		return config.Errorf("cluster.membership.bind_port", "%d is outside 0..65535", m.BindPort)
	}
	if m.BindAddr != "" {
		ip := net.ParseIP(m.BindAddr)
		if ip == nil {
			return config.Errorf("cluster.membership.bind_addr", "%q is not an IP address", m.BindAddr)
		}
		if ip.IsUnspecified() {
			return config.Errorf("cluster.membership.bind_addr", "%q is unspecified; give the IP this node is reached at (it is advertised to the peers)", m.BindAddr)
		}
	}
	join, err := membership.ParseJoinAddrs(m.JoinAddrs)
	if err != nil {
		return err
	}
	// SPEC §5: gossip bound to loopback can never be reached from another
	// host; a node that joins one would retry "join failed" forever.
	if bind := cmp.Or(m.BindAddr, "127.0.0.1"); net.ParseIP(bind).IsLoopback() {
		for _, a := range join {
			if host, _, _ := net.SplitHostPort(a); !isLoopbackHost(host) {
				return config.Errorf("cluster.membership.bind_addr", "%s is loopback but cluster.membership.join_addrs names %s, which is not: no node there could ever reach this one; set bind_addr to the IP the peers reach this node at", bind, a)
			}
		}
	}
	if p := c.Cluster.Internode.BindPort; p < 0 || p > 65535 {
		return config.Errorf("cluster.internode.bind_port", "%d is outside 0..65535 (0: the first free port in %d–%d)", p, mesh.AutoPortFirst, mesh.AutoPortLast)
	}
	if len(c.Cluster.FailureDomain) > membership.MaxFailureDomainLen {
		return config.Errorf("cluster.failure_domain", "longer than %d bytes", membership.MaxFailureDomainLen)
	}
	if e := c.Cluster.Raft.BootstrapExpect; e > membership.MaxBootstrapExpect {
		return config.Errorf("cluster.raft.bootstrap_expect", "%d is above %d", e, membership.MaxBootstrapExpect)
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
		if _, err := loadClusterKeys(&cfg); err != nil {
			return err
		}
	}
	return nil
}

// isLoopbackHost: a loopback IP literal or "localhost"; any other name is
// taken as another host (it could resolve anywhere).
func isLoopbackHost(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

func validName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%q must be 1..=64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q has %q; use letters, digits, '-', '_' and '.'", name, c)
		}
	}
	return nil
}

// YAML renders the effective configuration with secrets redacted (the
// files that hold secrets are paths, and are shown).
func (c *Config) YAML() ([]byte, error) {
	return yaml.Marshal(c)
}
