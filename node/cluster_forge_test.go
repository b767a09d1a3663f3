package node

import (
	"crypto/ed25519"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/internal/clustertest/gossipforge"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
)

// SPEC §5 "Identity", §3.4: a holder of the gossip key alone cannot retire
// a voter. Forged encrypted alive messages about a follower (at its own
// gossip address, with its public key, Retired and a FAILED clock, an
// incarnation far above its own) — unsigned as the earlier release's
// metadata, or signed by another key — reach the leader: both are counted
// on /metrics, the leader's view keeps the follower's own metadata, the
// replicated state does not record it retired, the reconciler's input
// says healthy and not retired, and it is still a voter. The real-process
// variant (reconcile rounds and a quorum check after a kill -9) is
// cmd/ticketd's TestForgedGossipRetiresNobody.
func TestForgedGossipClaimRetiresNobody(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	victim := tc.others(leader)[0]
	vid := victim.n.cfg.Cluster.Name
	secret := []byte("0123456789abcdef") // gossipSecret, decoded
	pub := clusterOf(victim.n).PublicKey()
	own, ok := memberMeta(lc.n, vid)
	if !ok {
		t.Fatalf("%s does not see %s", leader, vid)
	}

	claim := own
	claim.Retired, claim.ClockState, claim.Seq = true, membership.ClockFailed, own.Seq+1
	_, mallory, _ := ed25519.GenerateKey(nil)
	copy(claim.PublicKey[:], mallory.Public().(ed25519.PublicKey))
	misSigned, err := membership.Encode(claim, mallory)
	if err != nil {
		t.Fatal(err)
	}
	copy(misSigned[2:34], pub)
	host, port, _ := net.SplitHostPort(victim.gossipAddr())
	p, _ := strconv.Atoi(port)
	send := func(meta []byte) {
		pkt, err := gossipforge.AlivePacket(secret, gossipforge.Alive{
			Incarnation: 1 << 30, Node: vid, Addr: net.ParseIP(host).To4(), Port: uint16(p), Meta: meta, Vsn: gossipforge.Vsn,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := gossipforge.Send(lc.gossipAddr(), pkt); err != nil {
			t.Fatal(err)
		}
	}
	counted := func() bool {
		raw := do(t, lc.tn, "GET", "/metrics", "").raw
		return !strings.Contains(raw, "\n"+`gossip_meta_refused_total{reason="unsigned"} 0`) &&
			!strings.Contains(raw, "\n"+`gossip_meta_refused_total{reason="bad_signature"} 0`) &&
			strings.Contains(raw, "\ngossip_meta_refused_total{")
	}
	waitFor(t, "the leader counts both forgeries", 10*time.Second, func() bool {
		send(gossipforge.LegacyMeta(pub, own.DeltaMs, own.MeshAddr))
		send(misSigned)
		return counted()
	})
	// What the leader's retire watch and reconciler act on: its gossip
	// view, the replicated retired list, the reconciler's inputs.
	m, _ := memberMeta(lc.n, vid)
	if m.Retired || m.ClockState != membership.ClockHealthy || m.Seq < own.Seq || lc.n.fsm.IsRetired(vid) {
		t.Fatalf("after the forgery: %s's view of %s %+v, recorded retired %v", leader, vid, m, lc.n.fsm.IsRetired(vid))
	}
	for _, rm := range clusterOf(lc.n).WithRetired(clusterOf(lc.n).ReconcileMembers(lc.n.raft())) {
		if rm.ID == vid && (rm.Retired || !rm.ClockHealthy || !rm.Eligible) {
			t.Fatalf("the reconciler's input for %s after the forgery: %+v", vid, rm)
		}
	}
	if s := suffrages(lc); s[vid] != raft.Voter {
		t.Fatalf("%s is no longer a voter: %v", vid, s)
	}
}

// SPEC §5 "Identity", "Reconciler": memberlist's dead claims are unsigned,
// and one with the highest incarnation cannot even be refuted (the
// victim's refutation wraps to 0). Forged to the leader about a follower,
// it makes the follower gossip-dead there — and nothing more: the mesh
// still has the follower's key and mesh address from its signed metadata
// (a handshake after any reconnect succeeds), the leader still hears it in
// Raft, so the reconciler's input says alive in Raft and it stays a
// voter. Before, AdvertisedKey answered only for alive members: after the
// next reconnect the follower was cut off, silent in Raft, and removed.
func TestForgedDeadKeepsMeshKey(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	victim := tc.others(leader)[0]
	vid := victim.n.cfg.Cluster.Name
	from := tc.others(leader)[1].n.cfg.Cluster.Name
	own, _ := memberMeta(lc.n, vid)
	pkt, err := gossipforge.DeadPacket([]byte("0123456789abcdef"), gossipforge.Dead{Incarnation: ^uint32(0), Node: vid, From: from})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, leader+" sees "+vid+" dead", 10*time.Second, func() bool {
		if err := gossipforge.Send(lc.gossipAddr(), pkt); err != nil {
			t.Fatal(err)
		}
		g, _ := gossipState(t, lc, vid)
		return g == "dead"
	})
	if k, ok := clusterOf(lc.n).AdvertisedKey(vid); !ok || !k.Equal(clusterOf(victim.n).PublicKey()) {
		t.Fatalf("the mesh lost %s's key with a forged dead: %x %v", vid, k, ok)
	}
	if addr, err := clusterOf(lc.n).ServerAddr(raft.ServerID(vid)); err != nil || addr != mesh.RaftAddress(raft.ServerID(vid), own.MeshAddr) {
		t.Fatalf("Raft's address of %s after a forged dead: %q %v, want %s at %s", vid, addr, err, vid, own.MeshAddr)
	}
	waitFor(t, leader+" hears "+vid+" in Raft", 10*time.Second, func() bool { return clusterOf(lc.n).InContact(vid) })
	for _, rm := range clusterOf(lc.n).WithRetired(clusterOf(lc.n).ReconcileMembers(lc.n.raft())) {
		if rm.ID == vid && (rm.Alive || !rm.RaftContact || rm.Retired) {
			t.Fatalf("the reconciler's input for %s: %+v (want gossip-dead, in Raft contact)", vid, rm)
		}
	}
	if s := suffrages(lc); s[vid] != raft.Voter {
		t.Fatalf("%s is no longer a voter: %v", vid, s)
	}
	if g, _ := gossipState(t, lc, vid); g != "dead" {
		t.Fatalf("%s refuted the forged dead (%s): the case tests nothing", vid, g)
	}
}
