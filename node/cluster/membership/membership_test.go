package membership

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

const converge = 15 * time.Second // generous: the host is a shared 2-core machine

// cluster3 starts a, b and c (b and c join a) sharing one trust map.
func cluster3(t *testing.T) (trust *trustMap, a, b, c *testNode) {
	trust = newTrust()
	ka, kb, kc := newKey(t), newKey(t), newKey(t)
	trust.set("node-a", ka)
	trust.set("node-b", kb)
	trust.set("node-c", kc)
	a = startTestNode(t, "node-a", ka, trust)
	b = startTestNode(t, "node-b", kb, trust, withJoin(a.m.LocalAddr()))
	c = startTestNode(t, "node-c", kc, trust, withJoin(a.m.LocalAddr()))
	for _, n := range []*testNode{a, b, c} {
		waitView(t, n, converge, "3 alive with their meta", aliveWith(a, b, c))
	}
	return trust, a, b, c
}

// SPEC §5 "Membership": three members form and see each other's metadata;
// a metadata update propagates to every view as an update event.
func TestThreeMembersFormAndMetaPropagates(t *testing.T) {
	_, a, b, c := cluster3(t)
	for _, n := range []*testNode{a, b, c} {
		for _, peer := range []*testNode{a, b, c} {
			k, ok := n.m.AdvertisedKey(peer.name)
			if !ok || !k.Equal(peer.key) {
				t.Fatalf("%s: AdvertisedKey(%s) = %x, %v", n.name, peer.name, k, ok)
			}
		}
		if got := counterValue(t, n.m.met.members.WithLabelValues("alive")); got != 3 {
			t.Fatalf("%s: gossip_members{state=alive} = %v, want 3", n.name, got)
		}
	}
	if _, ok := a.m.AdvertisedKey("nobody"); ok {
		t.Fatal("AdvertisedKey of an unknown member")
	}
	if a.m.HealthScore() != 0 {
		t.Fatalf("health score %d on an idle loopback cluster", a.m.HealthScore())
	}
	if n, _ := histogram(t, b.m.met.convergence); n != 1 {
		t.Fatalf("b: gossip_convergence_seconds count %d, want 1 (one join)", n)
	}

	b.setMeta(func(m *Meta) { m.ClockState, m.Role, m.ClockBoundMs = ClockFailed, RoleStandby, 77 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.m.UpdateMeta(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{a, c} {
		deadline := time.After(converge)
		for got := false; !got; {
			select {
			case e := <-n.m.Events():
				got = e.Type == EventUpdate && e.Member.ID == "node-b" && content(e.Member.Meta) == b.currentMeta()
			case <-deadline:
				t.Fatalf("%s: no update event for node-b's new meta; view %s", n.name, describeView(n.m.Members()))
			}
		}
		m, _ := find(n.m.Members(), "node-b")
		if m.Meta.ClockState != ClockFailed || m.Meta.Role != RoleStandby || m.Meta.ClockBoundMs != 77 {
			t.Fatalf("%s: node-b meta %+v", n.name, m.Meta)
		}
	}

	// Invalid metadata is refused and the previous one kept.
	b.setMeta(func(m *Meta) { m.DeltaMs = 1 })
	if err := b.m.UpdateMeta(ctx); !errors.Is(err, ErrMalformedMeta) {
		t.Fatalf("UpdateMeta with Δ 1: %v", err)
	}
	b.setMeta(func(m *Meta) { m.DeltaMs = 500; m.PublicKey[0] ^= 1 })
	if err := b.m.UpdateMeta(ctx); !errors.Is(err, ErrSelfTrust) {
		t.Fatalf("UpdateMeta with a foreign key: %v", err)
	}

	// No log line carries the gossip secret.
	for _, n := range []*testNode{a, b, c} {
		n.logs.mu.Lock()
		for _, l := range n.logs.lines {
			if strings.Contains(l, string(testSecret)) || strings.Contains(l, base64.StdEncoding.EncodeToString(testSecret)) {
				t.Errorf("%s logged the secret: %s", n.name, l)
			}
		}
		n.logs.mu.Unlock()
	}

	// A graceful leave is "left", not "failed".
	if err := c.m.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitView(t, a, converge, "node-c left", func(ms []Member) bool {
		m, ok := find(ms, "node-c")
		return ok && m.State == StateLeft
	})
	if got := counterValue(t, a.m.met.members.WithLabelValues("left")); got != 1 {
		t.Fatalf("gossip_members{state=left} = %v, want 1", got)
	}
	if _, ok := a.m.AdvertisedKey("node-c"); ok {
		t.Fatal("AdvertisedKey of a member that left")
	}
}

// SPEC §5 "Membership": a member with a wrong gossip key is kept out.
func TestWrongGossipKeyKeptOut(t *testing.T) {
	trust := newTrust()
	ka, kw := newKey(t), newKey(t)
	trust.set("node-a", ka)
	trust.set("node-w", kw)
	a := startTestNode(t, "node-a", ka, trust)
	w := newTestNode(t, "node-w", kw, trust, withJoin(a.m.LocalAddr()), func(c *Config) {
		c.Secret = []byte("fedcba9876543210fedcba9876543210")
	})
	if err := w.m.Start(); err != nil {
		t.Fatal(err)
	}
	w.logs.waitLog(t, converge, "join failed")
	w.logs.waitLog(t, converge, "join failed", "retry_in=100ms") // back-off doubled: it retried
	a.logs.waitLog(t, converge, "decrypt")
	if _, ok := find(a.m.Members(), "node-w"); ok {
		t.Fatalf("a let in a member with the wrong gossip key: %s", describeView(a.m.Members()))
	}
	if _, ok := find(w.m.Members(), "node-a"); ok {
		t.Fatal("w sees a through a wrong gossip key")
	}
}

// SPEC §5 "Identity": an untrusted name and a trust-map/advertised-key
// mismatch are kept out, logged with name, address and reason, and counted.
func TestUntrustedAndMismatchedKeptOut(t *testing.T) {
	trust := newTrust()
	ka, kb := newKey(t), newKey(t)
	trust.set("node-a", ka)
	trust.set("node-b", kb)
	a := startTestNode(t, "node-a", ka, trust)
	b := startTestNode(t, "node-b", kb, trust, withJoin(a.m.LocalAddr()))
	waitView(t, a, converge, "a and b", aliveWith(a, b))

	// mallory trusts itself and a; a does not know mallory.
	mTrust := newTrust()
	km := newKey(t)
	mTrust.set("mallory", km)
	mTrust.set("node-a", ka)
	mTrust.set("node-b", kb)
	mal := startTestNode(t, "mallory", km, mTrust, withJoin(a.m.LocalAddr()))
	line := a.logs.waitLog(t, converge, "peer refused", `"mallory"`, "reason="+ReasonUntrustedName)
	if !containsAll(line, []string{"addr=" + mal.m.LocalAddr()}) {
		t.Fatalf("refusal log lacks the address: %s", line)
	}

	b.logs.waitLog(t, converge, "peer refused", `"mallory"`, "reason="+ReasonUntrustedName)

	// An impostor claims the name node-x, which a and b trust with another key.
	kx, kImp := newKey(t), newKey(t)
	trust.set("node-x", kx)
	iTrust := newTrust()
	iTrust.set("node-x", kImp)
	iTrust.set("node-a", ka)
	iTrust.set("node-b", kb) // so it gossips to b as well
	startTestNode(t, "node-x", kImp, iTrust, withJoin(a.m.LocalAddr()))
	a.logs.waitLog(t, converge, "peer refused", `"node-x"`, "reason="+ReasonKeyMismatch)
	b.logs.waitLog(t, converge, "peer refused", `"node-x"`, "reason="+ReasonKeyMismatch)

	for _, n := range []*testNode{a, b} {
		if ms := n.m.Members(); len(ms) != 2 {
			t.Fatalf("%s let a stranger in: %s", n.name, describeView(ms))
		}
		if _, ok := n.m.AdvertisedKey("node-x"); ok {
			t.Fatalf("%s: AdvertisedKey of a refused member", n.name)
		}
	}
	// A trust-map reload hides a member at once.
	trust.del("node-b")
	if _, ok := find(a.m.Members(), "node-b"); ok {
		t.Fatal("a member removed from the trust map is still listed")
	}
	if _, ok := a.m.AdvertisedKey("node-b"); ok {
		t.Fatal("AdvertisedKey of a member removed from the trust map")
	}
	if got := counterValue(t, a.m.met.refused.WithLabelValues(ReasonUntrustedName)); got < 1 {
		t.Fatalf("gossip_refused_total{reason=untrusted_name} = %v", got)
	}
	if got := counterValue(t, a.m.met.refused.WithLabelValues(ReasonKeyMismatch)); got < 1 {
		t.Fatalf("gossip_refused_total{reason=key_mismatch} = %v", got)
	}
	if got := counterValue(t, a.m.met.refused.WithLabelValues(ReasonForeignMerge)); got < 2 {
		t.Fatalf("gossip_refused_total{reason=foreign_merge} = %v, want both joins refused", got)
	}
}

// rawDelegate advertises whatever bytes it is given as metadata.
type rawDelegate struct{ meta []byte }

func (d rawDelegate) NodeMeta(int) []byte           { return d.meta }
func (rawDelegate) NotifyMsg([]byte)                {}
func (rawDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (rawDelegate) LocalState(bool) []byte          { return nil }
func (rawDelegate) MergeRemoteState([]byte, bool)   {}

// SPEC §5 "Membership" (bad input): a trusted name advertising malformed
// metadata is ignored and logged, never a crash.
func TestMalformedMetaIgnored(t *testing.T) {
	trust := newTrust()
	ka := newKey(t)
	trust.set("node-a", ka)
	trust.set("node-bad", newKey(t))
	a := startTestNode(t, "node-a", ka, trust)

	logs := newLogSink(t, "raw")
	mc := memberlist.DefaultLocalConfig()
	mc.Name = "node-bad"
	mc.BindAddr = "127.0.0.1"
	mc.BindPort = 0
	mc.SecretKey = testSecret
	mc.ProbeInterval, mc.ProbeTimeout = 100*time.Millisecond, 80*time.Millisecond
	mc.Delegate = rawDelegate{meta: []byte{MetaVersion, 0xff, 'g', 'a', 'r', 'b', 'a', 'g', 'e'}}
	mc.Logger = newMemberlistLogger(slog.New(logs))
	raw, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Shutdown() }()
	if _, err := raw.Join([]string{a.m.LocalAddr()}); err == nil {
		t.Log("raw join merged (a refused the peer but answered)")
	}
	a.logs.waitLog(t, converge, "peer refused", `"node-bad"`, "reason="+ReasonMalformedMeta)
	if _, ok := find(a.m.Members(), "node-bad"); ok {
		t.Fatal("a member with malformed meta got in")
	}
	if got := counterValue(t, a.m.met.refused.WithLabelValues(ReasonMalformedMeta)); got < 1 {
		t.Fatalf("gossip_refused_total{reason=malformed_meta} = %v", got)
	}
}

// SPEC §5 "Membership": a member restarted on a new port rejoins and the
// others see it at its new address.
func TestRestartOnNewPortRejoins(t *testing.T) {
	trust, a, b, c := cluster3(t)
	oldAddr := b.m.LocalAddr()
	if err := b.m.Close(); err != nil { // a crash: no leave broadcast
		t.Fatal(err)
	}
	b2 := startTestNode(t, "node-b", b.key, trust, withJoin(a.m.LocalAddr(), c.m.LocalAddr()))
	newAddr := b2.m.LocalAddr()
	if newAddr == oldAddr {
		t.Fatalf("restart kept the address %s", oldAddr)
	}
	for _, n := range []*testNode{a, c} {
		waitView(t, n, converge, "node-b alive at "+newAddr, func(ms []Member) bool {
			m, ok := find(ms, "node-b")
			return ok && m.State == StateAlive && m.Addr == newAddr
		})
	}
	waitView(t, b2, converge, "3 alive", aliveWith(a, b2, c))
}

// SPEC §5 "Membership": an isolated member (alone in its view) rejoins
// through its join addresses once the others are reachable again.
func TestIsolatedMemberRejoins(t *testing.T) {
	pn := &partNet{isolated: map[string]bool{}}
	trust := newTrust()
	ka, kb, kc := newKey(t), newKey(t), newKey(t)
	trust.set("node-a", ka)
	trust.set("node-b", kb)
	trust.set("node-c", kc)
	a := startTestNode(t, "node-a", ka, trust, withPartition(t, pn))
	b := startTestNode(t, "node-b", kb, trust, withPartition(t, pn), withJoin(a.m.LocalAddr()))
	c := startTestNode(t, "node-c", kc, trust, withPartition(t, pn), withJoin(a.m.LocalAddr(), b.m.LocalAddr()))
	for _, n := range []*testNode{a, b, c} {
		waitView(t, n, converge, "3 alive", aliveWith(a, b, c))
	}

	pn.isolate(c.m.LocalAddr(), true)
	waitView(t, c, converge, "alone", func(ms []Member) bool {
		ma, _ := find(ms, "node-a")
		mb, _ := find(ms, "node-b")
		return ma.State == StateDead && mb.State == StateDead
	})
	for _, n := range []*testNode{a, b} {
		waitView(t, n, converge, "node-c dead", func(ms []Member) bool {
			m, ok := find(ms, "node-c")
			return ok && m.State == StateDead
		})
	}
	c.logs.waitLog(t, converge, "isolated")
	c.logs.waitLog(t, converge, "join failed") // rejoin attempts while partitioned

	pn.isolate(c.m.LocalAddr(), false)
	for _, n := range []*testNode{a, b, c} {
		waitView(t, n, converge, "3 alive after the partition healed", aliveWith(a, b, c))
	}
	// The rejoin is measured whether c's join or the others' gossip to
	// the dead brought the view back first (both race on a healed network).
	waitCount(t, "c: gossip_convergence_seconds count (join, rejoin)", 2, func() float64 {
		n, _ := histogram(t, c.m.met.convergence)
		return float64(n)
	})
	if n, _ := histogram(t, c.m.met.convergence); n != 2 {
		t.Fatalf("c: gossip_convergence_seconds count %d, want 2 (join, rejoin)", n)
	}
}

// The join loop backs off exponentially within bounds, measures
// convergence on the injected clock, then checks for isolation every
// RejoinInterval.
func TestJoinBackoffAndConvergenceMetric(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close() // nobody listens here until node-a starts on it

	trust := newTrust()
	ka, kj := newKey(t), newKey(t)
	trust.set("node-a", ka)
	trust.set("node-j", kj)
	clk := newFakeClock()
	j := startTestNode(t, "node-j", kj, trust, withJoin("127.0.0.1:"+strconv.Itoa(port)), func(c *Config) {
		c.Clock = clk
		c.JoinBackoffMin, c.JoinBackoffMax, c.RejoinInterval = time.Second, 5*time.Second, time.Minute
	})
	if j.m.LocalAddr() == "127.0.0.1:"+strconv.Itoa(port) {
		t.Skip("the kernel reused the closed port for node-j itself")
	}
	var pending *fakeTimer
	var waited time.Duration
	for i, want := range []time.Duration{1, 2, 4, 5, 5} {
		ft := clk.next(t)
		if ft.d != want*time.Second {
			t.Fatalf("wait %d: back-off %v, want %v", i+1, ft.d, want*time.Second)
		}
		if i == 4 {
			pending = ft
			break
		}
		waited += ft.d
		ft.fire()
	}
	if n, _ := histogram(t, j.m.met.convergence); n != 0 {
		t.Fatal("convergence observed before any join succeeded")
	}
	if got := counterValue(t, j.m.met.joins.WithLabelValues("error")); got != 5 {
		t.Fatalf("failed join attempts %v, want 5", got)
	}
	a := startTestNode(t, "node-a", ka, trust, func(c *Config) { c.BindPort = port })
	waited += pending.d
	pending.fire()
	if ft := clk.next(t); ft.d != time.Minute { // joined: next is the isolation check
		t.Fatalf("after a join the loop waits %v, want RejoinInterval", ft.d)
	}
	n, sum := histogram(t, j.m.met.convergence)
	if n != 1 || sum != waited.Seconds() {
		t.Fatalf("gossip_convergence_seconds count %d sum %v, want 1 and %v", n, sum, waited.Seconds())
	}
	waitView(t, a, converge, "node-j", aliveWith(a, j))
}

// SPEC §3.4: a later generation NAME~G gossips under NAME (its trust-map
// and memberlist name) with NodeID NAME~G in its signed metadata: peers
// list it with ID NAME~G and Name NAME, one entry for the name, its key
// advertised under NAME; metadata naming another name's generation is
// refused before it is signed.
func TestGenerationGossipsUnderItsName(t *testing.T) {
	trust := newTrust()
	ka, kb := newKey(t), newKey(t)
	trust.set("node-a", ka)
	trust.set("node-b", kb)
	a := startTestNode(t, "node-a", ka, trust)
	b := startTestNode(t, "node-b", kb, trust, withJoin(a.m.LocalAddr()))
	waitView(t, a, converge, "node-b", func(ms []Member) bool { _, ok := find(ms, "node-b"); return ok })
	b.setMeta(func(m *Meta) { m.NodeID = "node-b~2" })
	if err := b.m.UpdateMeta(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitView(t, a, converge, "node-b~2", func(ms []Member) bool { _, ok := find(ms, "node-b~2"); return ok })
	ms := a.m.Members()
	if len(ms) != 2 {
		t.Fatalf("a's view %s: want node-a and one entry for node-b", describeView(ms))
	}
	m, _ := find(ms, "node-b~2")
	if m.Name != "node-b" || m.Meta.NodeID != "node-b~2" || m.State != StateAlive {
		t.Fatalf("node-b~2 listed as %+v", m)
	}
	if k, ok := a.m.AdvertisedKey("node-b"); !ok || !k.Equal(kb) {
		t.Fatalf("AdvertisedKey(node-b) = %x, %v", k, ok)
	}
	b.setMeta(func(m *Meta) { m.NodeID = "node-a~3" })
	if err := b.m.UpdateMeta(t.Context()); !errors.Is(err, ErrSelfTrust) {
		t.Fatalf("metadata naming node-a~3 signed by node-b: %v, want ErrSelfTrust", err)
	}
}
