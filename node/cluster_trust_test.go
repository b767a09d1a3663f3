package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/cluster"
	"github.com/tckclk/tckclk/node/cluster/mesh"
)

// trustCA is a test certificate authority for the mesh's mutual TLS.
type trustCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA's PEM file
}

func newTrustCA(t *testing.T, name string) *trustCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, t.TempDir(), "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o644)
	return &trustCA{cert: cert, key: key, file: file}
}

// leaf issues a serverAuth+clientAuth certificate and returns the PEM
// files of the certificate and its key.
func (ca *trustCA) leaf(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile = writeFile(t, dir, name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o644)
	keyFile = writeFile(t, dir, name+".key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})), 0o600)
	return certFile, keyFile
}

// clusterConfig is a valid cluster node "a" (with a running agent) whose
// config edit is applied last; Deps are the agent node's.
func clusterConfig(t *testing.T, edit func(*Config)) *agentNode {
	t.Helper()
	tc := newTestCluster(t, "a", "b")
	return newAgentNode(t, t.TempDir(), []byte(clockSecret), func(c *Config) {
		c.Cluster.Enabled = true
		c.Cluster.Name = "a"
		c.Cluster.Membership.BindAddr = "127.0.0.1"
		c.Cluster.Membership.SecretKey = cluster.SecretString(gossipSecret)
		c.Cluster.Internode.IdentityKey = cluster.SecretString(base64.StdEncoding.EncodeToString(tc.keys["a"].Seed()))
		c.Cluster.Internode.TrustedPeerKeys = maps.Clone(tc.trust)
		c.Cluster.Raft.BootstrapExpect = 1
		if edit != nil {
			edit(c)
		}
	})
}

// SPEC §5, issue 11 items 2, 6 and "Bad input": every identity, trust,
// gossip-secret and TLS misconfiguration of a cluster node refuses
// start-up on the node's own start path with a *config.Error naming the
// key (ticketd's exit 2), before the node serves or proves its clock.
func TestClusterStartupRefusals(t *testing.T) {
	dir := t.TempDir()
	seedA := base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(make([]byte, 32)).Seed())
	ca := newTrustCA(t, "ca")
	certA, keyA := ca.leaf(t, "a")
	_, keyOther := ca.leaf(t, "other")
	otherPub := base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(bytesOf(9, 32)).Public().(ed25519.PublicKey))
	const (
		idKey     = "cluster.internode.identity_key"
		idKeyFile = "cluster.internode.identity_key_file"
		trust     = "cluster.internode.trusted_peer_keys"
		secret    = "cluster.membership.secret_key"
		secretF   = "cluster.membership.secret_file"
	)
	cases := []struct {
		name, path, says string
		edit             func(*Config)
	}{
		{"no identity key", idKey, "identity is required", func(c *Config) { c.Cluster.Internode.IdentityKey = "" }},
		{"inline and file", idKey, "not both", func(c *Config) {
			c.Cluster.Internode.IdentityKeyFile = writeFile(t, dir, "both.key", seedA, 0o600)
		}},
		{"bad base64", idKey, "base64", func(c *Config) { c.Cluster.Internode.IdentityKey = "not*base64!" }},
		{"wrong length", idKey, "decodes to 16 bytes", func(c *Config) {
			c.Cluster.Internode.IdentityKey = cluster.SecretString(base64.StdEncoding.EncodeToString(bytesOf(1, 16)))
		}},
		{"key file mode 0644", idKeyFile, "", func(c *Config) {
			c.Cluster.Internode.IdentityKey = ""
			c.Cluster.Internode.IdentityKeyFile = writeFile(t, dir, "open.key", seedA, 0o644)
		}},
		{"trust map without this node", trust, "no entry for this node", func(c *Config) { delete(c.Cluster.Internode.TrustedPeerKeys, "a") }},
		{"trust map with another key for this node", trust + ".a", "not this node's public key", func(c *Config) {
			c.Cluster.Internode.TrustedPeerKeys["a"] = otherPub
		}},
		{"bad trust entry", trust + ".b", "", func(c *Config) { c.Cluster.Internode.TrustedPeerKeys["b"] = "%%%" }},
		{"empty trust map", trust, "empty", func(c *Config) { c.Cluster.Internode.TrustedPeerKeys = nil }},
		{"no gossip secret", secret, "always encrypted", func(c *Config) { c.Cluster.Membership.SecretKey = "" }},
		{"both gossip secret forms", secretF, "not both", func(c *Config) {
			c.Cluster.Membership.SecretFile = writeFile(t, dir, "gossip.key", base64.StdEncoding.EncodeToString(bytesOf(3, 16)), 0o600)
		}},
		{"gossip secret of a bad length", secret, "want 16, 24 or 32", func(c *Config) {
			c.Cluster.Membership.SecretKey = cluster.SecretString(base64.StdEncoding.EncodeToString(bytesOf(2, 20)))
		}},
		{"tls paths without enabled", "cluster.internode.tls.enabled", "enabled is not true", func(c *Config) {
			c.Cluster.Internode.TLS = cluster.TLSConfig{CertFile: certA, KeyFile: keyA, CAFile: ca.file}
		}},
		{"tls enabled with a missing cert", "cluster.internode.tls.cert_file", "", func(c *Config) {
			c.Cluster.Internode.TLS = cluster.TLSConfig{Enabled: true, CertFile: filepath.Join(dir, "absent.pem"), KeyFile: keyA, CAFile: ca.file}
		}},
		{"tls enabled without a CA", "cluster.internode.tls.ca_file", "required", func(c *Config) {
			c.Cluster.Internode.TLS = cluster.TLSConfig{Enabled: true, CertFile: certA, KeyFile: keyA}
		}},
		{"tls cert/key mismatch", "cluster.internode.tls.key_file", "does not hold the private key", func(c *Config) {
			c.Cluster.Internode.TLS = cluster.TLSConfig{Enabled: true, CertFile: certA, KeyFile: keyOther, CAFile: ca.file}
		}},
		{"no agent configured", "clock.agent_addr", "clock health", func(c *Config) { c.Clock.AgentAddr = "" }},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			an := clusterConfig(t, tt.edit)
			err := runRefused(t, an.cfg, an.deps)
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path != tt.path {
				t.Fatalf("Run = %v; want a *config.Error naming %s", err, tt.path)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Run = %v; want it to say %q", err, tt.says)
			}
			// Secrets never appear in the refusal.
			for _, s := range []string{seedA, gossipSecret, string(an.cfg.Cluster.Internode.IdentityKey)} {
				if s != "" && strings.Contains(err.Error(), s) {
					t.Fatalf("the refusal echoes a secret: %v", err)
				}
			}
		})
	}
}

func bytesOf(b byte, n int) []byte { return []byte(strings.Repeat(string([]byte{b}), n)) }

// metricSum adds the values of every /metrics series line starting with
// prefix (e.g. `gossip_join_attempts_total{`).
func metricSum(t *testing.T, tn *testNode, prefix string) float64 {
	t.Helper()
	var sum float64
	for _, l := range strings.Split(do(t, tn, "GET", "/metrics", "").raw, "\n") {
		if strings.HasPrefix(l, prefix) {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// SPEC §5, issue 11 items 2 and 8: a node whose key is not in the others'
// trust map joins their gossip again and again and is never let in: not
// in the Raft configuration, not alive in /v1/cluster/members; the
// refusals are counted; the cluster keeps granting.
func TestClusterUntrustedNodeKeptOut(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3", "x")
	own := maps.Clone(tc.trust)
	delete(tc.trust, "x") // the cluster does not trust x
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	leader := tc.leader()
	x := tc.startWith("x", first.gossipAddr(), 0, func(c *Config) { c.Cluster.Internode.TrustedPeerKeys = own })
	waitFor(t, "x joined the gossip (it trusts the cluster)", 20*time.Second, func() bool {
		return metricSum(t, x.tn, `gossip_join_attempts_total{result="ok"}`) >= 1
	})
	waitFor(t, "the cluster refused x 3 times", 10*time.Second, func() bool {
		return metricSum(t, first.tn, `gossip_refused_total{reason="untrusted_name"}`) >= 3
	})
	assertKeptOut(t, tc.nodes[leader], tc.nodes["n2"], "x")
}

// SPEC §5, issue 11 items 1 and 8: a trusted node with the wrong gossip
// key never gets in: its joins fail (counted on its /metrics), it is not
// in the Raft configuration nor alive in members, the cluster grants.
func TestClusterWrongGossipKeyKeptOut(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	tc.names = append(tc.names, "x")
	k := ed25519.NewKeyFromSeed(bytesOf(7, 32))
	tc.keys["x"] = k
	tc.trust["x"] = base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
	lc := tc.nodes[leader]
	x := tc.startWith("x", lc.gossipAddr(), 0, func(c *Config) {
		c.Cluster.Internode.TrustedPeerKeys = maps.Clone(tc.trust)
		c.Cluster.Membership.SecretKey = cluster.SecretString(base64.StdEncoding.EncodeToString(bytesOf(5, 16)))
	})
	waitFor(t, "x failed 3 join attempts", 20*time.Second, func() bool {
		return metricSum(t, x.tn, `gossip_join_attempts_total{result="error"}`) >= 3
	})
	assertKeptOut(t, lc, lc, "x")
}

// assertKeptOut: id is not in the leader's Raft configuration nor alive in
// its /v1/cluster/members, and a grant through via still succeeds.
func assertKeptOut(t *testing.T, leader, via *clusterMember, id string) {
	t.Helper()
	if slices.Contains(configIDs(leader), id) {
		t.Fatalf("%s is in the Raft configuration %v", id, configIDs(leader))
	}
	ms, err := leader.n.Members(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Members {
		if m.ID == id && m.Gossip == "alive" {
			t.Fatalf("%s is alive in /v1/cluster/members: %+v", id, m)
		}
	}
	grantRetry(t, via, "still", "w", 30) // the cluster keeps granting
}

// dialAs dials to's mesh from cm's mesh claiming cm's name (a bootstrap
// stream) and reports whether the handshake passed.
func dialAs(t *testing.T, cm, to *clusterMember) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	s, err := clusterOf(cm.n).Mesh().Dial(ctx, clusterOf(to.n).Mesh().Addr(), to.n.cfg.Cluster.Name, mesh.ClassBootstrap)
	if err == nil {
		s.Close()
	}
	return err
}

// SPEC §5 "Identity", issue 11 items 2 and 8: x is in everyone's trust map
// under its name with key K1 but runs with identity K2 (so it advertises
// K2 in gossip and proves K2 in the mesh handshake). The memberlist
// delegates refuse it (gossip_refused_total{reason="key_mismatch"}), the
// mesh refuses it (mesh_handshakes_total{result="key_mismatch"}), it is
// neither in Raft nor alive in members, and the cluster keeps granting.
func TestClusterTrustMapKeyMismatchKeptOut(t *testing.T) {
	t.Parallel()
	k1, k2 := ed25519.NewKeyFromSeed(bytesOf(11, 32)), ed25519.NewKeyFromSeed(bytesOf(12, 32))
	tc, leader := formThree(t, func(tc *testCluster) { tc.trust["x"] = pubB64(k1) })
	lc := tc.nodes[leader]
	tc.names = append(tc.names, "x")
	tc.keys["x"] = k2
	own := maps.Clone(tc.trust)
	own["x"] = pubB64(k2) // x's own map must hold its own key
	x := tc.startWith("x", lc.gossipAddr(), 0, func(c *Config) { c.Cluster.Internode.TrustedPeerKeys = own })
	waitFor(t, "the cluster refused x's advertised key", 20*time.Second, func() bool {
		return metricSum(t, lc.tn, `gossip_refused_total{reason="key_mismatch"}`) >= 1
	})
	before := metricSum(t, lc.tn, `mesh_handshakes_total{result="key_mismatch"}`)
	if err := dialAs(t, x, lc); err == nil {
		t.Fatal("the leader's mesh accepted x proving K2 while the trust map says K1")
	}
	waitFor(t, "the leader counted the mesh refusal", 10*time.Second, func() bool {
		return metricSum(t, lc.tn, `mesh_handshakes_total{result="key_mismatch"}`) > before
	})
	assertKeptOut(t, lc, tc.nodes[tc.follower(leader, "")], "x")
}

// SPEC §5 "Identity": a node claiming a member's name (n2 or whichever
// follower) with a key of its own is kept out: its gossip is refused, the
// mesh refuses its handshake (key_mismatch, counted), and the real member
// stays alive with its own key and keeps its vote.
func TestClusterNameClaimKeptOut(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	lc := tc.nodes[leader]
	victim := tc.follower(leader, "")
	fake := ed25519.NewKeyFromSeed(bytesOf(13, 32))
	imp := newTestCluster(t, victim) // its own nodes map: the name is taken in tc
	imp.keys[victim] = fake
	imp.trust = maps.Clone(tc.trust)
	imp.trust[victim] = pubB64(fake)
	ic := imp.startWith(victim, lc.gossipAddr(), 0, nil)
	waitFor(t, "the cluster refused the impostor's gossip", 20*time.Second, func() bool {
		return metricSum(t, lc.tn, `gossip_refused_total{reason="key_mismatch"}`)+
			metricSum(t, lc.tn, `gossip_refused_total{reason="foreign_merge"}`) >= 1
	})
	before := metricSum(t, lc.tn, `mesh_handshakes_total{result="key_mismatch"}`)
	if err := dialAs(t, ic, lc); err == nil {
		t.Fatalf("the leader's mesh accepted an impostor claiming %s", victim)
	}
	waitFor(t, "the leader counted the mesh refusal", 10*time.Second, func() bool {
		return metricSum(t, lc.tn, `mesh_handshakes_total{result="key_mismatch"}`) > before
	})
	m, ok := memberMeta(lc.n, victim)
	if !ok || string(m.PublicKey[:]) != string(tc.keys[victim].Public().(ed25519.PublicKey)) {
		t.Fatalf("the leader's gossip view of %s: %+v (found %v), want its own key", victim, m, ok)
	}
	if g, s := gossipState(t, lc, victim); g != "alive" || s != "voter" {
		t.Fatalf("%s after the impostor: gossip %q suffrage %q, want alive voter", victim, g, s)
	}
	grantRetry(t, lc, "after-impostor", "w", 30) // the cluster keeps granting
}

func pubB64(k ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
}
