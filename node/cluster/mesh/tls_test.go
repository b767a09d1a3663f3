package mesh

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/config"
)

type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return pki{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a leaf certificate (server and client auth, no host names)
// and its key under dir; it returns a TLSConfig naming the files.
func issue(t *testing.T, ca pki, dir, name string) TLSConfig {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
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
	kder, _ := x509.MarshalECPrivateKey(key)
	c := TLSConfig{Enabled: true, CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), CAFile: filepath.Join(dir, "ca.pem")}
	write(t, c.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(t, c.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	write(t, c.CAFile, ca.pem)
	return c
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func loadTLS(t *testing.T, c TLSConfig) *tls.Config {
	t.Helper()
	tc, err := LoadTLS(c)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// SPEC §5 Mesh (TLS): bad or partial TLS config refuses to start, naming
// the key; TLS off with no paths is plaintext.
func TestLoadTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "cluster CA")
	good := issue(t, ca, dir, "node-a")
	other := issue(t, ca, t.TempDir(), "node-b")
	garbage := filepath.Join(dir, "garbage")
	write(t, garbage, []byte("not PEM"))
	missing := filepath.Join(dir, "missing")
	with := func(f func(*TLSConfig)) TLSConfig { c := good; f(&c); return c }
	cases := []struct {
		name string
		c    TLSConfig
		path string // "" = accepted
		msg  string
	}{
		{"enabled", good, "", ""},
		{"cert without enabled", TLSConfig{CertFile: good.CertFile}, TLSEnabledPath, "cert_file is set but enabled is not true"},
		{"ca without enabled", TLSConfig{CAFile: good.CAFile}, TLSEnabledPath, "ca_file is set"},
		{"no cert_file", with(func(c *TLSConfig) { c.CertFile = "" }), TLSCertPath, "is required"},
		{"no key_file", with(func(c *TLSConfig) { c.KeyFile = "" }), TLSKeyPath, "is required"},
		{"no ca_file", with(func(c *TLSConfig) { c.CAFile = "" }), TLSCAPath, "is required"},
		{"cert missing", with(func(c *TLSConfig) { c.CertFile = missing }), TLSCertPath, "no such file"},
		{"cert garbage", with(func(c *TLSConfig) { c.CertFile = garbage }), TLSCertPath, "no PEM CERTIFICATE"},
		{"key missing", with(func(c *TLSConfig) { c.KeyFile = missing }), TLSKeyPath, "no such file"},
		{"key of another cert", with(func(c *TLSConfig) { c.KeyFile = other.KeyFile }), TLSKeyPath, "does not hold the private key"},
		{"ca garbage", with(func(c *TLSConfig) { c.CAFile = garbage }), TLSCAPath, "no PEM CERTIFICATE"},
		{"ca missing", with(func(c *TLSConfig) { c.CAFile = missing }), TLSCAPath, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc, err := LoadTLS(c.c)
			if c.path == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.MinVersion != tls.VersionTLS12 || tc.ClientAuth != tls.RequireAndVerifyClientCert {
					t.Fatalf("MinVersion %x ClientAuth %v", tc.MinVersion, tc.ClientAuth)
				}
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path != c.path || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v; want %s and %q", err, c.path, c.msg)
			}
		})
	}
	if tc, err := LoadTLS(TLSConfig{}); tc != nil || err != nil {
		t.Fatalf("disabled: %v %v", tc, err)
	}
}

// SPEC §5 Mesh (TLS): TLS meshes connect; a TLS and a plaintext node never
// do; a certificate from another CA is refused.
func TestMeshTLS(t *testing.T) {
	ca := newCA(t, "cluster CA")
	dir := t.TempDir()
	trust := newKeyMap("node-a", "node-b")
	tlsNode := func(id string, ca pki) *node {
		cfg := testConfig(t, id, trust)
		cfg.TLS = loadTLS(t, issue(t, ca, dir, id+ca.cert.Subject.CommonName))
		return start(t, cfg)
	}
	a, b := tlsNode("node-a", ca), tlsNode("node-b", ca)
	l := b.Listener(ClassRaft)
	s := dial(t, a, b, "node-b", ClassRaft)
	got := accept(t, l)
	echo(t, s, got)
	if got.PeerID() != "node-a" {
		t.Fatalf("peer %q", got.PeerID())
	}

	plain := start(t, testConfig(t, "node-a", trust))
	stranger := tlsNode("node-a", newCA(t, "another CA"))
	for _, c := range []struct {
		name     string
		from, to *node
		atTo     Reason
	}{
		{"plaintext dials TLS", plain, b, ReasonTLS},
		{"TLS dials plaintext", a, start(t, testConfig(t, "node-b", trust)), ReasonTLS},
		{"certificate from another CA", stranger, b, ReasonTLS},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.to.handshakes(t, c.atTo)
			_, err := c.from.Dial(context.Background(), c.to.Addr(), "", ClassRaft) // by address: a already has a session with the TLS node-b
			var he *HandshakeError
			if !errors.As(err, &he) {
				t.Fatalf("Dial: %v", err)
			}
			eventually(t, "acceptor counted "+string(c.atTo), func() bool { return c.to.handshakes(t, c.atTo) == before+1 })
		})
	}
}
