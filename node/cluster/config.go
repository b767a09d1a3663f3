package cluster

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
	"github.com/tckclk/tckclk/node/cluster/reconcile"
	"github.com/tckclk/tckclk/node/consensus"
)

// Defaults of the cluster section (SPEC §5, §8).
const (
	DefaultMaxVoters  = 5
	DefaultMaxStandby = 4
	// DefaultCrashDetectMs is cluster.raft.crash_detect_ms (SPEC §5
	// "Crash failover"); minCrashDetectMs its least value but 0 (off).
	DefaultCrashDetectMs = 100
	minCrashDetectMs     = 10
	// DefaultAutoReplaceMax is cluster.auto_replace_max: replacements of
	// one NAME by a new generation per hour (SPEC §3.4).
	DefaultAutoReplaceMax = 3
)

// Config is the `cluster:` section: enabled false is one durable
// Raft voter without gossip; true is cluster mode (package cluster).
type Config struct {
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

// Validate checks every cluster.* key (errors are *config.Error naming
// the key path); hasAgent says whether the clock section names an agent,
// which cluster mode needs. Files and secrets are checked when they are
// loaded, at start-up.
func (c *Config) Validate(hasAgent bool) error {
	if c.Enabled {
		if err := c.validateEnabled(hasAgent); err != nil {
			return err
		}
	}
	if name, gen, ok := strings.Cut(c.Name, identity.GenerationSep); ok {
		return config.Errorf("cluster.name", "%q carries a generation suffix (%s%s): set cluster.name to %q; a node picks its generation itself when it replaces a retired one (SPEC §3.4)",
			c.Name, identity.GenerationSep, gen, name)
	}
	if err := ValidNodeName(c.Name); err != nil {
		return config.Errorf("cluster.name", "%v", err)
	}
	if c.AutoReplaceMax < 0 {
		return config.Errorf("cluster.auto_replace_max", "%d is negative (0: never replace a retired node by a new generation)", c.AutoReplaceMax)
	}
	r := &c.Raft
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
	if err := c.Liveness.Validate("cluster.liveness"); err != nil {
		return err
	}
	return nil
}

// validateEnabled checks the keys of a cluster node (files and
// secrets are checked when they are loaded, at start-up).
func (c *Config) validateEnabled(hasAgent bool) error {
	if !hasAgent {
		return config.Errorf("clock.agent_addr", "cluster mode needs clock health from an agent (SPEC §3): set clock.agent_addr or clock.agent_addrs")
	}
	m := &c.Membership
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
	if p := c.Internode.BindPort; p < 0 || p > 65535 {
		return config.Errorf("cluster.internode.bind_port", "%d is outside 0..65535 (0: the first free port in %d–%d)", p, mesh.AutoPortFirst, mesh.AutoPortLast)
	}
	if len(c.FailureDomain) > membership.MaxFailureDomainLen {
		return config.Errorf("cluster.failure_domain", "longer than %d bytes", membership.MaxFailureDomainLen)
	}
	if e := c.Raft.BootstrapExpect; e > membership.MaxBootstrapExpect {
		return config.Errorf("cluster.raft.bootstrap_expect", "%d is above %d", e, membership.MaxBootstrapExpect)
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

// ValidNodeName checks a cluster.name: 1 to 64 letters, digits, '-', '_'
// and '.'.
func ValidNodeName(name string) error {
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

// GossipName is this node's gossip name, trust-map name and mesh id:
// NAME, also while its NodeId (Name, the Raft server ID) is a later
// generation NAME~G (SPEC §3.4; node/generation.go decides the NodeId).
func (c *Config) GossipName() string { return identity.TrustName(c.Name) }

// LivenessConfig is cluster.liveness: the thresholds of /livez in cluster
// mode (SPEC §5 "Liveness checks"). A single node judges only its clock.
type LivenessConfig struct {
	// BootGrace: gossip's health score is not judged this long after
	// start (memberlist's awareness starts high while it settles).
	BootGrace time.Duration `yaml:"boot_grace"`
	// MaxHealthScore: memberlist's awareness at or above it means this
	// node misses its own probe deadlines (0 healthy, 7 worst).
	MaxHealthScore int `yaml:"max_health_score"`
	// VoterLastContact, StandbyLastContact: Raft last contact a follower
	// voter (strict) or a standby (lenient) may go without; the leader
	// always passes.
	VoterLastContact   time.Duration `yaml:"voter_last_contact"`
	StandbyLastContact time.Duration `yaml:"standby_last_contact"`
}

// Liveness bounds: memberlist's awareness score is 0..=7 (its default
// AwarenessMaxMultiplier is 8); a last-contact limit below a second would
// fail a voter over one slow heartbeat round.
const (
	maxLivenessScore   = 7
	minLastContact     = time.Second
	maxLivenessTimeout = time.Hour
)

// DefaultLivenessConfig: 30 s boot grace, health score 6, voters 15 s,
// standbys 2 min.
func DefaultLivenessConfig() LivenessConfig {
	return LivenessConfig{BootGrace: 30 * time.Second, MaxHealthScore: 6, VoterLastContact: 15 * time.Second, StandbyLastContact: 2 * time.Minute}
}

// Validate checks the keys under prefix ("cluster.liveness").
func (l *LivenessConfig) Validate(prefix string) error {
	if l.BootGrace < 0 || l.BootGrace > maxLivenessTimeout {
		return config.Errorf(prefix+".boot_grace", "%v is outside 0s..=%v", l.BootGrace, maxLivenessTimeout)
	}
	if l.MaxHealthScore < 1 || l.MaxHealthScore > maxLivenessScore {
		return config.Errorf(prefix+".max_health_score", "%d is outside 1..=%d (memberlist's awareness score)", l.MaxHealthScore, maxLivenessScore)
	}
	if l.VoterLastContact < minLastContact || l.VoterLastContact > maxLivenessTimeout {
		return config.Errorf(prefix+".voter_last_contact", "%v is outside %v..=%v", l.VoterLastContact, minLastContact, maxLivenessTimeout)
	}
	if l.StandbyLastContact < l.VoterLastContact || l.StandbyLastContact > maxLivenessTimeout {
		return config.Errorf(prefix+".standby_last_contact", "%v is outside voter_last_contact (%v)..=%v: a standby is judged no more strictly than a voter", l.StandbyLastContact, l.VoterLastContact, maxLivenessTimeout)
	}
	return nil
}
