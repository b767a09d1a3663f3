package membership

import (
	"bytes"
	"crypto/ed25519"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest/gossipforge"
)

// forgeAlive sends to's gossip port an encrypted alive message about
// victim at victim's own gossip address, as a gossip-key holder can.
func forgeAlive(t *testing.T, to, victim *testNode, incarnation uint32, meta []byte) {
	t.Helper()
	host, port, _ := net.SplitHostPort(victim.m.LocalAddr())
	p, _ := strconv.Atoi(port)
	pkt, err := gossipforge.AlivePacket(testSecret, gossipforge.Alive{
		Incarnation: incarnation, Node: victim.name, Addr: net.ParseIP(host).To4(), Port: uint16(p),
		Meta: meta, Vsn: gossipforge.Vsn,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := gossipforge.Send(to.m.LocalAddr(), pkt); err != nil {
		t.Fatal(err)
	}
}

// waitCount waits until c's counter reaches want.
func waitCount(t *testing.T, what string, want float64, get func() float64) {
	t.Helper()
	deadline := time.Now().Add(converge)
	for get() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v within %v, want %v", what, get(), converge, want)
		}
		time.Sleep(10 * time.Millisecond) // polling a counter with a deadline
	}
}

// SPEC §5 "Identity": with only the gossip key, a forged alive message
// about a member — at its own address, with its public key, Retired and a
// FAILED clock, an incarnation far above its own — changes no view: the
// unsigned and the badly signed forms are refused and counted; a replay of
// the member's own older signed metadata with a forged incarnation is
// counted and the views keep its newer metadata.
func TestForgedAliveChangesNothing(t *testing.T) {
	_, a, b, c := cluster3(t)
	victim := b.m.localMeta()
	forgedMeta := victim
	forgedMeta.Retired, forgedMeta.ClockState, forgedMeta.Seq = true, ClockFailed, victim.Seq+1

	// The earlier release's unsigned format (the trial's message).
	unsigned := gossipforge.LegacyMeta(victim.PublicKey[:], victim.DeltaMs, victim.MeshAddr)
	forgeAlive(t, a, b, 1<<30, unsigned)
	waitCount(t, "a: unsigned refusals", 1, func() float64 { return counterValue(t, a.m.met.metaRefused.WithLabelValues(ReasonUnsigned)) })

	// Signed, but by mallory's key over the victim's public key.
	_, mallory, _ := ed25519.GenerateKey(nil)
	body, err := Encode(func() Meta { m := forgedMeta; copy(m.PublicKey[:], mallory.Public().(ed25519.PublicKey)); return m }(), mallory)
	if err != nil {
		t.Fatal(err)
	}
	copy(body[2:34], victim.PublicKey[:])
	n := len(body) - ed25519.SignatureSize
	copy(body[n:], ed25519.Sign(mallory, signedBytes(body[:n])))
	forgeAlive(t, a, b, 1<<30, body)
	waitCount(t, "a: bad signatures", 1, func() float64 { return counterValue(t, a.m.met.metaRefused.WithLabelValues(ReasonBadSignature)) })

	// A replay: b's current signed metadata captured, b moves on, the
	// capture comes back with a far higher incarnation.
	b.m.metaMu.Lock()
	captured := bytes.Clone(b.m.metaBytes)
	b.m.metaMu.Unlock()
	b.setMeta(func(m *Meta) { m.Role = RoleStandby })
	if err := b.m.UpdateMeta(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{a, c} { // c too: it is checked below
		waitView(t, n, converge, "b's new metadata", func(ms []Member) bool {
			m, ok := find(ms, "node-b")
			return ok && m.Meta.Role == RoleStandby
		})
	}
	forgeAlive(t, a, b, 1<<31, captured)
	waitCount(t, "a: replays", 1, func() float64 { return counterValue(t, a.m.met.metaRefused.WithLabelValues(ReasonReplay)) })

	for _, n := range []*testNode{a, c} {
		m, ok := find(n.m.Members(), "node-b")
		if !ok || m.State != StateAlive || m.Meta.Retired || m.Meta.ClockState != ClockHealthy || m.Meta.Role != RoleStandby {
			t.Fatalf("%s: node-b after the forgeries: %+v", n.name, m)
		}
	}
	if got := counterValue(t, c.m.met.metaRefused.WithLabelValues(ReasonBadSignature)); got != 0 {
		// a does not relay what it refused
		t.Fatalf("c counted %v bad signatures: a relayed a refused message", got)
	}
}
