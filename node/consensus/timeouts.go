package consensus

import (
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hashicorp/raft"
)

// Timeouts are Raft's heartbeat and election timeouts now.
func (p *Raft) Timeouts() (heartbeat, election time.Duration) {
	rc := p.r.ReloadableConfig()
	return rc.HeartbeatTimeout, rc.ElectionTimeout
}

// SetTimeouts changes Raft's heartbeat and election timeouts while it runs
// (the other reloadable settings keep their values). A shorter heartbeat
// timeout wakes a follower's loop at once: it compares its last contact
// with the new value straight away. Not for concurrent use with itself.
//
// hashicorp/raft's ReloadConfig, used whenever it accepts the change,
// refuses a heartbeat timeout below the leader lease (raft.ValidateConfig),
// although the lease is only read by a leader and the heartbeat timeout
// by a follower (and by a leader for its heartbeat interval, a tenth of
// it). Crash failover (SPEC §5) needs a follower's heartbeat timeout
// below the lease for a few hundred milliseconds, and a lease as short
// would make a leader step down at every stall of a loaded machine: that
// one change is stored the way ReloadConfig stores it (setBelowLease).
func (p *Raft) SetTimeouts(heartbeat, election time.Duration) error {
	rc := p.r.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = heartbeat, election
	err := p.r.ReloadConfig(rc)
	if err == nil {
		return nil
	}
	if berr := p.setBelowLease(heartbeat, election); berr != nil {
		return fmt.Errorf("consensus: timeouts %v/%v: %w", heartbeat, election, errors.Join(err, berr))
	}
	return nil
}

// errRaftLayout: the hashicorp/raft in use does not hold its configuration
// as v1.7.3 does (TestSetTimeoutsBelowLease fails on an upgrade that
// changes it; crash failover then falls back to the heartbeat timeout).
var errRaftLayout = errors.New("this hashicorp/raft does not keep its configuration in conf (atomic.Value of raft.Config) with followerNotifyCh (chan struct{}): cannot set a heartbeat timeout below the leader lease")

// setBelowLease does what ReloadConfig does — store the configuration with
// the new timeouts, then wake a follower's loop when the heartbeat timeout
// shrank — for a configuration ValidateConfig refuses only because the
// heartbeat timeout is below the leader lease. hashicorp/raft v1.7.3 reads
// its configuration through conf.Load on every use (Raft.config) and
// stores it only in NewRaft and ReloadConfig; SetTimeouts, the only caller
// of ReloadConfig here, is not concurrent with itself.
func (p *Raft) setBelowLease(heartbeat, election time.Duration) error {
	v := reflect.ValueOf(p.r).Elem()
	conf, notify := v.FieldByName("conf"), v.FieldByName("followerNotifyCh")
	if !conf.IsValid() || conf.Type() != reflect.TypeFor[atomic.Value]() ||
		!notify.IsValid() || notify.Type() != reflect.TypeFor[chan struct{}]() {
		return errRaftLayout
	}
	stored := (*atomic.Value)(unsafe.Pointer(conf.UnsafeAddr()))
	old, ok := stored.Load().(raft.Config)
	if !ok {
		return errRaftLayout
	}
	c := old
	c.HeartbeatTimeout, c.ElectionTimeout = heartbeat, election
	check := c
	check.LeaderLeaseTimeout = min(check.LeaderLeaseTimeout, heartbeat)
	if err := raft.ValidateConfig(&check); err != nil {
		return err
	}
	stored.Store(c)
	if heartbeat < old.HeartbeatTimeout {
		select {
		case *(*chan struct{})(unsafe.Pointer(notify.UnsafeAddr())) <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	return nil
}
