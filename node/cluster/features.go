package cluster

import (
	"fmt"
	"sync"

	"github.com/tckclk/tckclk/internal/version"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/ticket"
)

// Log-entry formats in a mixed cluster (SPEC §4: an entry of an unknown
// version stops the node that reads it). A node advertises, in its signed
// gossip metadata, the newest entry version it reads (membership's
// software-version marker). The leader proposes an entry of a newer
// version than the previous release reads — a KeepAlive, entry version 4
// — only while every server of its Raft configuration, voters and
// non-voters alike (each applies the log), advertises that it reads it;
// otherwise the node writes the entries of the previous release (single
// Renews). A server gossip does not show, or shows without the marker (a
// release from before it), counts as one that does not read it.

// softwareVersion is this build's Meta.Version: its revision and the
// newest entry version it reads.
var softwareVersion = sync.OnceValue(func() string {
	return membership.SoftwareVersion(version.Rev(), ticket.EntryVersion)
})

// entryFeatures remembers the last verdict, to log its changes.
type entryFeatures struct {
	mu   sync.Mutex
	why  string
	seen bool // a verdict has been logged
}

// KeepAliveEntries reports whether this node may propose KeepAlive
// entries (entry version 4) now: every server of its Raft configuration
// advertises that it reads them. False while Raft is not open. It is
// decided anew at every call (the configuration and the members' metadata
// as they are now; cheap for a handful of servers, beside the proposal it
// decides): a server added or downgraded after it may still be sent the
// entries it allowed (it stops, fail closed; docs/operations.md,
// Upgrading).
func (cl *Node) KeepAliveEntries() bool {
	return cl.readsEntries(4)
}

func (cl *Node) readsEntries(v int) bool {
	why := cl.entriesWhy(v)
	f := &cl.features
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seen || why != f.why {
		if why == "" {
			cl.log.Info("every server reads the newest log entries: proposing them", "entry_version", v)
		} else {
			cl.log.Info("not every server reads the newest log entries: proposing those of the previous release", "entry_version", v, "why", why)
		}
		f.seen, f.why = true, why
	}
	return why == ""
}

// entriesWhy is "" when every server of the Raft configuration
// advertises that it reads entry version v, else why not.
func (cl *Node) entriesWhy(v int) string {
	r := cl.raft()
	if r == nil || cl.mem == nil {
		return "raft or gossip is not open"
	}
	cf := r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Sprintf("the raft configuration: %v", err)
	}
	servers := cf.Configuration().Servers
	if len(servers) == 0 {
		return "no raft configuration yet"
	}
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	return entriesWhy(v, ids, cl.mem.Members())
}

// entriesWhy is "" when every server in ids has a member whose signed
// metadata says it reads entry version v, else why not (the first that
// does not, in the order of ids).
func entriesWhy(v int, ids []string, members []membership.Member) string {
	byID := make(map[string]*membership.Member, len(members))
	for i := range members {
		byID[members[i].ID] = &members[i]
	}
	for _, id := range ids {
		m, ok := byID[id]
		switch {
		case !ok:
			return fmt.Sprintf("server %s is not in gossip", id)
		case m.Meta.EntryVersion() < v:
			return fmt.Sprintf("server %s does not advertise entry version %d (software version %q)", id, v, m.Meta.Version)
		}
	}
	return ""
}
