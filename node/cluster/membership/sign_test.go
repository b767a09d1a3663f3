package membership

import (
	"bytes"
	"crypto/ed25519"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// signedPeer is a trusted peer whose metadata a test signs itself.
type signedPeer struct {
	name string
	key  ed25519.PrivateKey
	meta Meta
}

func newSignedPeer(t *testing.T, trust *trustMap, name string) *signedPeer {
	pub := newKey(t)
	trust.set(name, pub)
	p := &signedPeer{name: name, key: privOf(t, pub), meta: sampleMeta()}
	p.meta.NodeID = name
	copy(p.meta.PublicKey[:], pub)
	return p
}

// node is memberlist's view of an alive message about p carrying b.
func (p *signedPeer) node(b []byte) *memberlist.Node {
	return &memberlist.Node{Name: p.name, Addr: net.IPv4(127, 0, 0, 9), Port: 7946, Meta: b}
}

func (p *signedPeer) sign(t *testing.T, seq uint64, f func(*Meta)) []byte {
	t.Helper()
	m := p.meta
	m.Seq = seq
	if f != nil {
		f(&m)
	}
	b, err := Encode(m, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SPEC §5 "Identity": memberlist's delegate admits only metadata signed by
// the named node's own key; unsigned, badly signed, another key's or
// another NodeId's metadata is refused before memberlist acts on the
// message, and counted by reason; a replay of an older sequence that
// memberlist applies (a forged higher incarnation) is counted and leaves
// the view on the newer metadata.
func TestDelegateVerifiesClaims(t *testing.T) {
	trust := newTrust()
	ka := newKey(t)
	trust.set("node-a", ka)
	n := newTestNode(t, "node-a", ka, trust) // not started: the delegate is driven by hand
	d := &delegate{n.m}
	peer := newSignedPeer(t, trust, "node-b")

	first := peer.sign(t, 100, nil)
	if err := d.NotifyAlive(peer.node(first)); err != nil {
		t.Fatalf("a signed alive refused: %v", err)
	}
	d.NotifyJoin(peer.node(first))
	if m, ok := find(n.m.Members(), "node-b"); !ok || m.Meta.Seq != 100 {
		t.Fatalf("node-b not in the view with its signed metadata: %s", describeView(n.m.Members()))
	}

	retiredFailed := func(m *Meta) { m.Retired, m.ClockState = true, ClockFailed }
	mallory := privOf(t, newKey(t))
	unsigned := bytes.Clone(first)
	unsigned[0] = unsignedVersion
	forgedSig := peer.sign(t, 200, retiredFailed)
	copy(forgedSig[len(forgedSig)-ed25519.SignatureSize:], ed25519.Sign(mallory, signedBytes(forgedSig[:len(forgedSig)-ed25519.SignatureSize])))
	otherID := peer.sign(t, 200, func(m *Meta) { retiredFailed(m); m.NodeID = "node-c" })
	for reason, b := range map[string][]byte{
		ReasonUnsigned:      unsigned,
		ReasonBadSignature:  forgedSig,
		ReasonNodeID:        otherID,
		ReasonMalformedMeta: {2, 0, 1},
	} {
		if err := d.NotifyAlive(peer.node(b)); err == nil {
			t.Errorf("%s: alive accepted", reason)
		}
		var got float64
		if isMetaReason(reason) {
			got = counterValue(t, n.m.met.metaRefused.WithLabelValues(reason))
		} else {
			got = counterValue(t, n.m.met.refused.WithLabelValues(reason))
		}
		if got != 1 {
			t.Errorf("%s: counted %v times, want 1", reason, got)
		}
		n.logs.waitLog(t, time.Second, "peer refused", `"node-b"`, "reason="+reason)
	}
	imp := &memberlist.Node{Name: "node-b", Meta: func() []byte {
		m := sampleMeta()
		m.NodeID = "node-b"
		copy(m.PublicKey[:], mallory.Public().(ed25519.PublicKey))
		b, _ := Encode(m, mallory)
		return b
	}()}
	if err := d.NotifyAlive(imp); err == nil || counterValue(t, n.m.met.refused.WithLabelValues(ReasonKeyMismatch)) != 1 {
		t.Fatalf("an impostor's own key: %v", err)
	}
	if m, _ := find(n.m.Members(), "node-b"); m.Meta.Retired || m.Meta.ClockState == ClockFailed || m.Meta.Seq != 100 {
		t.Fatalf("a refused claim reached the view: %+v", m.Meta)
	}

	// A newer signed metadata is taken at once, even if memberlist then
	// drops the message (an incarnation it thinks old).
	newer := peer.sign(t, 300, func(m *Meta) { m.Role = RoleStandby })
	if err := d.NotifyAlive(peer.node(newer)); err != nil {
		t.Fatal(err)
	}
	if m, _ := find(n.m.Members(), "node-b"); m.Meta.Seq != 300 || m.Meta.Role != RoleStandby {
		t.Fatalf("newer signed metadata not taken: %+v", m.Meta)
	}
	// The first one replayed: NotifyAlive lets it through (memberlist
	// drops late gossip by incarnation, counting nothing); if memberlist
	// applies it anyway, the replay is counted and the view stays newer.
	if err := d.NotifyAlive(peer.node(first)); err != nil {
		t.Fatalf("a genuine older alive refused before memberlist's incarnation check: %v", err)
	}
	if got := counterValue(t, n.m.met.metaRefused.WithLabelValues(ReasonReplay)); got != 0 {
		t.Fatalf("late gossip counted as a replay: %v", got)
	}
	d.NotifyUpdate(peer.node(first))
	if got := counterValue(t, n.m.met.metaRefused.WithLabelValues(ReasonReplay)); got != 1 {
		t.Fatalf("gossip_meta_refused_total{reason=replay} = %v, want 1", got)
	}
	if m, _ := find(n.m.Members(), "node-b"); m.Meta.Seq != 300 || m.State != StateAlive {
		t.Fatalf("a replay moved the view back: %+v", m)
	}
	// The same sequence with other contents is no newer either.
	same := peer.sign(t, 300, func(m *Meta) { m.Role = RoleVoter })
	d.NotifyUpdate(peer.node(same))
	if m, _ := find(n.m.Members(), "node-b"); m.Meta.Role != RoleStandby {
		t.Fatalf("a second metadata with the same sequence replaced the first: %+v", m.Meta)
	}
	// A dead message (unsigned in memberlist) keeps the signed metadata.
	d.NotifyLeave(peer.node(first))
	if m, _ := find(n.m.Members(), "node-b"); m.State != StateDead || m.Meta.Seq != 300 {
		t.Fatalf("after a dead message: %+v", m)
	}
	// "dead" is unsigned: the mesh still has node-b's signed key. Only its
	// own signed Leaving flag takes the key away.
	if k, ok := n.m.AdvertisedKey("node-b"); !ok || !k.Equal(peer.key.Public().(ed25519.PublicKey)) {
		t.Fatalf("AdvertisedKey of a member gossip calls dead: %x %v", k, ok)
	}
	leaving := peer.sign(t, 400, func(m *Meta) { m.Leaving = true })
	_ = d.NotifyAlive(peer.node(leaving))
	d.NotifyLeave(peer.node(leaving))
	if m, _ := find(n.m.Members(), "node-b"); m.State != StateLeft {
		t.Fatalf("after a signed leave: %+v", m)
	}
	if _, ok := n.m.AdvertisedKey("node-b"); ok {
		t.Fatal("AdvertisedKey of a member that signed its leave")
	}
}

// SPEC §5 "Identity": this node's sequence only grows, is seeded from the
// wall clock (a restart starts above the previous run's), and moves above
// a higher sequence of its own that gossip shows it (an earlier run on a
// clock that was ahead), so peers accept its metadata again.
func TestOwnSequence(t *testing.T) {
	trust, clk := newTrust(), newFakeClock()
	n := clockedNode(t, trust, clk)
	first := n.m.localMeta()
	if want := uint64(clk.Now().UnixNano()); first.Seq != want || first.NodeID != "node-a" {
		t.Fatalf("first metadata: seq %d node id %q, want %d %q", first.Seq, first.NodeID, want, "node-a")
	}
	if err := n.m.refreshMeta(); err != nil || n.m.localMeta().Seq != first.Seq {
		t.Fatalf("unchanged metadata re-signed: %v, seq %d", err, n.m.localMeta().Seq)
	}
	n.setMeta(func(m *Meta) { m.ClockBoundMs++ })
	if err := n.m.refreshMeta(); err != nil || n.m.localMeta().Seq != first.Seq+1 {
		t.Fatalf("changed metadata on a clock that did not move: %v, seq %d, want %d", err, n.m.localMeta().Seq, first.Seq+1)
	}
	// A forged claim about this node raises nothing; a genuine one from an
	// earlier run does.
	d := &delegate{n.m}
	ahead := n.m.localMeta()
	ahead.Seq += uint64(time.Hour)
	mallory := privOf(t, newKey(t))
	forged, _ := Encode(func() Meta { m := ahead; copy(m.PublicKey[:], mallory.Public().(ed25519.PublicKey)); return m }(), mallory)
	copy(forged[2:34], n.key)
	if err := d.NotifyAlive(&memberlist.Node{Name: "node-a", Meta: forged}); err != nil {
		t.Fatalf("a claim about this node must reach memberlist (which refutes it): %v", err)
	}
	if n.m.seqFloor.Load() != 0 {
		t.Fatal("a forged claim moved this node's sequence")
	}
	if got := counterValue(t, n.m.met.metaRefused.WithLabelValues(ReasonBadSignature)); got != 1 {
		t.Fatalf("a forged claim about this node counted %v times, want 1", got)
	}
	genuine, err := Encode(ahead, privOf(t, n.key))
	if err != nil {
		t.Fatal(err)
	}
	_ = d.NotifyAlive(&memberlist.Node{Name: "node-a", Meta: genuine})
	if err := n.m.refreshMeta(); err != nil || n.m.localMeta().Seq != ahead.Seq+1 {
		t.Fatalf("after gossip showed seq %d of this node: %v, seq %d", ahead.Seq, err, n.m.localMeta().Seq)
	}
	// A restart: a new Membership on a later clock starts above.
	clk.mu.Lock()
	clk.now = clk.now.Add(2 * time.Hour)
	clk.mu.Unlock()
	again := newTestNode(t, "node-a", n.key, trust, func(c *Config) { c.Clock = clk })
	if again.m.localMeta().Seq <= n.m.localMeta().Seq {
		t.Fatalf("a restart signs seq %d, not above the previous run's %d", again.m.localMeta().Seq, n.m.localMeta().Seq)
	}
}

// Refusal lines are rate limited: a flood of forged claims (a new address
// each, so none is a repeat) writes refusalLogBurst lines per reason and
// window, and when the window ends one line says how many were held back.
func TestRefusalLogRateLimited(t *testing.T) {
	trust, clk := newTrust(), newFakeClock()
	n := clockedNode(t, trust, clk)
	peer := newSignedPeer(t, trust, "node-b")
	unsigned := peer.sign(t, 5, nil)
	unsigned[0] = unsignedVersion
	d := &delegate{n.m}
	const flood = 1000
	for i := range flood {
		nd := peer.node(unsigned)
		nd.Port = uint16(10000 + i)
		_ = d.NotifyAlive(nd)
	}
	if got := counterValue(t, n.m.met.metaRefused.WithLabelValues(ReasonUnsigned)); got != flood {
		t.Fatalf("counted %v of %d refusals", got, flood)
	}
	if got := n.logs.count("peer refused"); got != refusalLogBurst {
		t.Fatalf("%d refusal lines for %d refusals, want %d", got, flood, refusalLogBurst)
	}
	clk.mu.Lock()
	clk.now = clk.now.Add(refusalLogInterval)
	clk.mu.Unlock()
	nd := peer.node(unsigned)
	nd.Port = 9
	_ = d.NotifyAlive(nd)
	n.logs.waitLog(t, time.Second, "peer refused", "rate-limited", "suppressed="+strconv.Itoa(flood-refusalLogBurst))
}

// clockedNode is node-a, trusted, on the manual clock clk (not started).
func clockedNode(t *testing.T, trust *trustMap, clk *fakeClock) *testNode {
	t.Helper()
	ka := newKey(t)
	trust.set("node-a", ka)
	return newTestNode(t, "node-a", ka, trust, func(c *Config) { c.Clock = clk })
}
