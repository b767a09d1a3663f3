package membership

import (
	"crypto/ed25519"
	"errors"
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
	"github.com/tckclk/tckclk/node/cluster/identity"
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

// vet is the trust check of a claim about a member: its name is in
// the trust map and its metadata is signed by that name's key (which it
// advertises) for a NodeId of that name. It returns the verified metadata,
// or the refusal reason. Nothing else puts metadata into this node's view;
// whether it is newer than the view's is older's question.
func (d *delegate) vet(n *memberlist.Node) (Meta, string) {
	key, ok := d.m.cfg.Trust.Lookup(n.Name)
	if !ok {
		return Meta{}, ReasonUntrustedName
	}
	if meta, ok := d.m.verifiedBefore(n.Name, n.Meta, key); ok {
		return meta, ""
	}
	meta, err := Decode(n.Meta, key)
	switch {
	case errors.Is(err, ErrUnsigned):
		return Meta{}, ReasonUnsigned
	case errors.Is(err, ErrKeyMismatch):
		return Meta{}, ReasonKeyMismatch
	case errors.Is(err, ErrBadSignature):
		return Meta{}, ReasonBadSignature
	case err != nil:
		return Meta{}, ReasonMalformedMeta
	case identity.TrustName(meta.NodeID) != n.Name:
		return Meta{}, ReasonNodeID
	}
	d.m.noteVerified(n.Name, n.Meta, meta)
	return meta, ""
}

// verifiedMeta is the last metadata of a name that passed vet, with its
// encoding: gossip repeats the same bytes (rebroadcasts, every push/pull,
// NotifyAlive then NotifyUpdate), which need no second ed25519 check.
type verifiedMeta struct {
	raw  string
	meta Meta
}

// verifiedBefore returns the metadata raw decoded to when it last passed
// vet for name, if its key is still key.
func (m *Membership) verifiedBefore(name string, raw []byte, key ed25519.PublicKey) (Meta, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.verified[name]
	if !ok || v.raw != string(raw) || !keyEqual(key, v.meta.PublicKey) {
		return Meta{}, false
	}
	return v.meta, true
}

// noteVerified records raw as name's last verified metadata (one entry
// per trusted name).
func (m *Membership) noteVerified(name string, raw []byte, meta Meta) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.verified[name] = verifiedMeta{raw: string(raw), meta: meta}
}

// older reports whether meta is older than the metadata this node's view
// holds for id: a lower sequence, or the same one with other contents.
func (m *Membership) older(id string, meta Meta) bool {
	prev, ok := m.member(id)
	return ok && (meta.Seq < prev.Meta.Seq || meta.Seq == prev.Meta.Seq && meta != prev.Meta)
}

// vetSelf handles a claim about this node, which memberlist refutes
// whatever it says: metadata this node's key signed with a higher
// sequence than it advertises now (gossip about an earlier run) raises its
// sequence; a forgery is counted and logged.
func (d *delegate) vetSelf(n *memberlist.Node) {
	meta, reason := d.vet(n)
	if reason != "" {
		d.m.refuse(n.Name, nodeAddr(n), reason)
		return
	}
	d.m.noteOwnSeq(meta.Seq)
}

var (
	errRefused      = errors.New("membership: peer refused by the trust check")
	errMergeRefused = errors.New("membership: merge refused: no live peer in it passes the trust check")
)

// NotifyAlive refuses an alive message that fails the trust check, before
// memberlist looks at it; a verified newer metadata of a known member is
// taken at once (advanceMeta). A verified older one passes: memberlist
// drops it by its incarnation number (gossip relayed late), or applies it
// because a gossip-key holder replayed it with a higher incarnation —
// alive then counts the replay and keeps the newer metadata. Claims about
// this node pass: memberlist refutes them.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if n.Name == d.m.cfg.NodeName {
		d.vetSelf(n)
		return nil
	}
	meta, reason := d.vet(n)
	if reason != "" {
		d.m.refuse(n.Name, nodeAddr(n), reason)
		return errRefused
	}
	d.m.advanceMeta(n.Name, meta)
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
	var meta Meta
	if n.Name == d.m.cfg.NodeName {
		// memberlist applies only this node's own NodeMeta to its entry
		meta = d.m.localMeta()
	} else {
		var reason string
		if meta, reason = d.vet(n); reason != "" { // the trust map changed since NotifyAlive
			d.m.refuse(n.Name, nodeAddr(n), reason)
			return
		}
		if d.m.older(n.Name, meta) {
			// memberlist took an older metadata (a replay with a forged
			// incarnation): its liveness claim stands, unsigned as ever;
			// the view keeps the newer metadata.
			d.m.refuse(n.Name, nodeAddr(n), ReasonReplay)
			prev, _ := d.m.member(n.Name)
			meta = prev.Meta
		}
	}
	mem := Member{ID: nodeID(n.Name, meta), Name: n.Name, Addr: nodeAddr(n), Meta: meta, State: StateAlive}
	prev, had := d.m.member(n.Name)
	d.m.setMember(mem)
	if t == EventUpdate && had && prev == mem {
		return // advanceMeta already took this metadata and said so
	}
	d.m.events.push(Event{Type: t, Member: mem})
}

// nodeID is the NodeId of the member named name whose metadata is meta.
func nodeID(name string, meta Meta) string {
	if meta.NodeID != "" {
		return meta.NodeID
	}
	return name
}

// NotifyLeave records a member left (its last metadata said Leaving) or
// dead (failure detection).
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	mem, ok := d.m.member(n.Name)
	if !ok {
		return // never accepted
	}
	// mem.Meta is the last verified metadata: n.Meta is at most that
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
