package node

import (
	"time"

	"github.com/tckclk/tckclk/internal/config"
)

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

// validate checks the keys under prefix ("cluster.liveness").
func (l *LivenessConfig) validate(prefix string) error {
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
