package membership

import (
	"errors"
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// delegate implements memberlist's Delegate, EventDelegate, AliveDelegate,
// MergeDelegate and ConflictDelegate for a Membership. Every method runs on
// a memberlist goroutine, the event ones while memberlist holds its node
// lock: they take Membership's short locks only and never call memberlist.
type delegate struct{ m *Membership }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.MergeDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

func nodeAddr(n *memberlist.Node) string {
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// vet is the trust check: the name is in the trust map, the metadata
// decodes, and the advertised key equals the trusted one. It returns the
// refusal reason, "" when the peer passes. This node's own name always
// passes (memberlist refutes others' claims about it).
func (d *delegate) vet(n *memberlist.Node) (Meta, string) {
	meta, err := Decode(n.Meta)
	if n.Name == d.m.cfg.NodeName {
		return meta, ""
	}
	key, ok := d.m.cfg.Trust.Lookup(n.Name)
	switch {
	case !ok:
		return meta, ReasonUntrustedName
	case err != nil:
		return meta, ReasonMalformedMeta
	case !keyEqual(key, meta.PublicKey):
		return meta, ReasonKeyMismatch
	}
	return meta, ""
}

var (
	errRefused      = errors.New("membership: peer refused by the trust check")
	errMergeRefused = errors.New("membership: merge refused: no live peer in it passes the trust check")
)

// NotifyAlive refuses an alive message about an untrusted peer.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if _, reason := d.vet(n); reason != "" {
		d.m.refuse(n.Name, nodeAddr(n), reason)
		return errRefused
	}
	return nil
}

// NotifyMerge refuses a join merge in which no live peer (other than this
// node) passes the trust check: a stranger joining, or a foreign cluster
// sharing the gossip key. Refused peers inside an otherwise trusted merge
// are counted here and then refused one by one by NotifyAlive (memberlist
// routes every alive entry of a merge through it), so an inconsistent trust
// map during a rollout filters one peer instead of splitting the cluster.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	trusted, refused := 0, 0
	for _, n := range peers {
		if n.Name == d.m.cfg.NodeName || n.State == memberlist.StateDead || n.State == memberlist.StateLeft {
			continue
		}
		if _, reason := d.vet(n); reason != "" {
			refused++
			d.m.refuse(n.Name, nodeAddr(n), reason)
			continue
		}
		trusted++
	}
	if trusted == 0 && refused > 0 {
		d.m.met.refused.WithLabelValues(ReasonForeignMerge).Inc()
		return errMergeRefused
	}
	return nil
}

// NotifyConflict logs a name claimed from two addresses (a node restarted
// at a new address before its old one was declared dead).
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.m.log.Info("gossip: name claimed from a second address; kept the first until it is declared dead",
		"peer", strconv.Quote(existing.Name), "addr", nodeAddr(existing), "other_addr", nodeAddr(other))
}

// NotifyJoin records a member alive (first seen, or back from dead or left).
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.alive(n, EventJoin) }

// NotifyUpdate records a member's new metadata.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.alive(n, EventUpdate) }

func (d *delegate) alive(n *memberlist.Node, t EventType) {
	meta, reason := d.vet(n)
	if reason != "" { // cannot pass NotifyAlive and fail here unless the trust map changed in between
		d.m.refuse(n.Name, nodeAddr(n), reason)
		return
	}
	mem := Member{ID: n.Name, Addr: nodeAddr(n), Meta: meta, State: StateAlive}
	d.m.setMember(mem)
	d.m.events.push(Event{Type: t, Member: mem})
}

// NotifyLeave records a member left (its last metadata said Leaving) or
// dead (failure detection).
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	mem, ok := d.m.member(n.Name)
	if !ok {
		return // never accepted
	}
	if meta, err := Decode(n.Meta); err == nil {
		mem.Meta = meta
	}
	t := EventFailed
	mem.State = StateDead
	if mem.Meta.Leaving {
		t, mem.State = EventLeave, StateLeft
	}
	d.m.setMember(mem)
	d.m.events.push(Event{Type: t, Member: mem})
}

// NodeMeta hands memberlist this node's encoded metadata (≤ MaxMetaSize).
func (d *delegate) NodeMeta(limit int) []byte {
	d.m.metaMu.Lock()
	defer d.m.metaMu.Unlock()
	if len(d.m.metaBytes) > limit {
		return nil
	}
	return append([]byte(nil), d.m.metaBytes...)
}

// NotifyMsg ignores user messages: this package sends none.
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts has no user broadcasts.
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState has no user state for push/pull.
func (d *delegate) LocalState(bool) []byte { return nil }

// MergeRemoteState ignores remote user state.
func (d *delegate) MergeRemoteState([]byte, bool) {}
