package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/internal/clustertest/gossipforge"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/cluster/membership"
)

// SPEC §5 "Identity", §3.4 (issue 23, critical 1): with only the gossip
// key nobody can retire a voter. Three real ticketd processes; from the
// test process, forged encrypted memberlist alive messages about a
// follower — at its own gossip address, with its public key, Retired and a
// FAILED clock, an incarnation far above its own; once in the unsigned
// format the trial used, once signed by another key — go to the leader and
// the other follower. The refusals are counted (gossip_meta_refused_total);
// through several reconcile rounds the follower stays a voter, is never
// recorded retired and no node logs a retirement or a removal; and then a
// kill -9 of the other follower leaves the leader and the victim a quorum
// that grants. Before signed metadata the leader recorded the victim
// retired and removed it from the voters within a second.
func TestForgedGossipRetiresNobody(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four real processes")
	}
	gossip := clustertest.Ports(t, len(clusterNames))
	dir := runClusterKeys(t, clustertest.Ports(t, len(clusterNames)), gossip, "127.0.0.1:1")
	tokenFile := filepath.Join(dir, "admin.token")
	tok := make([]byte, 24)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pc := &procCluster{t: t, dir: dir, agentAddr: startDevAgent(t, filepath.Join(dir, "clock.secret")), procs: map[string]*proc{}}
	for _, name := range clusterNames {
		pc.start(name, "--api.admin_token_file", tokenFile)
	}
	leader := pc.waitLeader(60*time.Second, clusterNames...)
	var followers []string
	gossipAddr := map[string]string{}
	for i, name := range clusterNames {
		gossipAddr[name] = "127.0.0.1:" + strconv.Itoa(gossip[i])
		if name != leader {
			followers = append(followers, name)
		}
	}
	victim, other := followers[0], followers[1]
	members := func(via string) map[string]wire.Member {
		t.Helper()
		c, err := client.New(pc.procs[via].addr, client.WithAdminToken(token))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ms, err := c.Members(ctx)
		if err != nil {
			t.Fatalf("members through %s: %v", via, err)
		}
		out := map[string]wire.Member{}
		for _, m := range ms.Members {
			out[m.ID] = m
		}
		return out
	}
	before := members(leader)
	for _, name := range clusterNames {
		if m := before[name]; m.Suffrage != "voter" || m.Gossip != "alive" || m.Retired {
			t.Fatalf("before the forgery, %s is %+v", name, m)
		}
	}

	secret, err := membership.LoadSecret("", filepath.Join(dir, "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := identity.Load("", filepath.Join(dir, victim+".key"))
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	deltaMs, _ := strconv.Atoi(procClockFlags[1])
	unsigned := gossipforge.LegacyMeta(pub, uint16(deltaMs), before[victim].Address)

	// The same claims in the signed format, signed by a key that is not
	// the victim's, advertising the victim's public key.
	_, mallory, _ := ed25519.GenerateKey(nil)
	claim := membership.Meta{NodeID: victim, Seq: ^uint64(0) - 1, MeshAddr: before[victim].Address, DeltaMs: uint16(deltaMs),
		ProtocolVersion: 2, ClockState: membership.ClockFailed, RaftEligible: true, Role: membership.RoleVoter,
		Bootstrap: membership.BootstrapDone, BootstrapExpect: 3, Retired: true, DataDirOK: true}
	copy(claim.PublicKey[:], mallory.Public().(ed25519.PublicKey))
	badSig, err := membership.Encode(claim, mallory)
	if err != nil {
		t.Fatal(err)
	}
	copy(badSig[2:34], pub)

	host, port, _ := net.SplitHostPort(gossipAddr[victim])
	vport, _ := strconv.Atoi(port)
	forge := func(meta []byte, to string) {
		pkt, err := gossipforge.AlivePacket(secret, gossipforge.Alive{
			Incarnation: 1 << 30, Node: victim, Addr: net.ParseIP(host).To4(), Port: uint16(vport), Meta: meta, Vsn: gossipforge.Vsn,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := gossipforge.Send(gossipAddr[to], pkt); err != nil {
			t.Fatal(err)
		}
	}
	retiredLog := func() string {
		for _, name := range clusterNames {
			for _, l := range strings.Split(pc.procs[name].logText(), "\n") {
				if strings.Contains(l, "recorded retired") || strings.Contains(l, "why=retired") || strings.Contains(l, `"why":"retired"`) {
					return name + ": " + l
				}
			}
		}
		return ""
	}
	refused := func(reason string) float64 {
		return metricValue(t, pc.procs[leader], `gossip_meta_refused_total{reason="`+reason+`"}`)
	}
	// Send until the leader has counted both refusals (UDP), failing at
	// once if the forgery took effect.
	deadline := time.Now().Add(30 * time.Second)
	for refused("unsigned") < 1 || refused("bad_signature") < 1 {
		if l := retiredLog(); l != "" {
			t.Fatalf("a forged gossip claim retired %s: %s", victim, l)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader did not count the forged claims within 30 s (unsigned %v, bad_signature %v)", refused("unsigned"), refused("bad_signature"))
		}
		for _, to := range []string{leader, other} {
			forge(unsigned, to)
			forge(badSig, to)
		}
		time.Sleep(100 * time.Millisecond) // resend interval, bounded by the deadline
	}
	t.Logf("leader %s counted the forged claims about %s: unsigned %v, bad_signature %v", leader, victim, refused("unsigned"), refused("bad_signature"))

	// Several reconcile rounds (raft.reconcile_debounce 2 s): nothing moves.
	watchUntil := time.Now().Add(8 * time.Second)
	for time.Now().Before(watchUntil) {
		if l := retiredLog(); l != "" {
			t.Fatalf("a forged gossip claim retired %s: %s", victim, l)
		}
		for _, via := range []string{leader, other} {
			if m := members(via)[victim]; m.Suffrage != "voter" || m.Retired || m.Clock != "healthy" {
				t.Fatalf("%s's view of %s after the forgery: %+v", via, victim, m)
			}
		}
		time.Sleep(250 * time.Millisecond) // observation window: absence of an effect, polled
	}

	// The victim still counts toward quorum: without the other follower,
	// the leader and the victim elect and grant.
	p := pc.procs[other]
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.done <- <-p.done
	survivors := []string{leader, victim}
	now := pc.waitLeader(60*time.Second, survivors...)
	g := pc.grantVia(victim, "after-forgery", 30*time.Second)
	t.Logf("kill -9 %s: %s leads with %s; granted %s token %d through the victim", other, now, victim, g.Name, g.Token)
	if m := members(now)[victim]; m.Suffrage != "voter" || m.Retired {
		t.Fatalf("%s after the kill: %+v", victim, m)
	}
	if l := retiredLog(); l != "" {
		t.Fatal(l)
	}
}
