package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/tckclk/tckclk/internal/config"
)

// Key paths of cluster.internode.tls.
const (
	TLSEnabledPath = "cluster.internode.tls.enabled"
	TLSCertPath    = "cluster.internode.tls.cert_file"
	TLSKeyPath     = "cluster.internode.tls.key_file"
	TLSCAPath      = "cluster.internode.tls.ca_file"
)

// TLSConfig is cluster.internode.tls.
type TLSConfig struct {
	Enabled  bool   `yaml:"enabled"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// LoadTLS builds the mesh's mutual-TLS configuration, or returns nil when
// TLS is disabled. Enabled needs all three files: a PEM certificate chain,
// its matching private key, and a PEM CA bundle that both ends verify the
// other's chain against (TLS ≥ 1.2, client certificates required). A path
// set without enabled: true is an error, never a silent plaintext mesh.
//
// Host names are not checked: a certificate proves membership of the CA's
// cluster, and which node is at the other end is proven by the ed25519
// handshake that runs inside TLS (SPEC §5). So one certificate may serve
// every node, and nodes may be dialed by any address. Certificates need
// the serverAuth and clientAuth extended key usages (or none at all).
func LoadTLS(c TLSConfig) (*tls.Config, error) {
	if !c.Enabled {
		for path, v := range map[string]string{TLSCertPath: c.CertFile, TLSKeyPath: c.KeyFile, TLSCAPath: c.CAFile} {
			if v != "" {
				return nil, config.Errorf(TLSEnabledPath, "%s is set but enabled is not true; set enabled: true or remove the TLS paths", path)
			}
		}
		return nil, nil
	}
	for _, f := range []struct{ path, v string }{{TLSCertPath, c.CertFile}, {TLSKeyPath, c.KeyFile}, {TLSCAPath, c.CAFile}} {
		if f.v == "" {
			return nil, config.Errorf(f.path, "is required when %s is true", TLSEnabledPath)
		}
	}
	certPEM, err := os.ReadFile(c.CertFile)
	if err != nil {
		return nil, config.Errorf(TLSCertPath, "%v", err)
	}
	if err := checkCertPEM(certPEM); err != nil {
		return nil, config.Errorf(TLSCertPath, "%s: %v", c.CertFile, err)
	}
	keyPEM, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, config.Errorf(TLSKeyPath, "%v", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	clear(keyPEM)
	if err != nil {
		return nil, config.Errorf(TLSKeyPath, "%s does not hold the private key of %s: %v", c.KeyFile, c.CertFile, err)
	}
	caPEM, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, config.Errorf(TLSCAPath, "%v", err)
	}
	if err := checkCertPEM(caPEM); err != nil {
		return nil, config.Errorf(TLSCAPath, "%s: %v", c.CAFile, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// The dialer checks the server's chain itself (below), without a
		// host name; the acceptor's check is ClientAuth's.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.VerifiedChains) > 0 {
				return nil // verified by ClientAuth (we are the acceptor)
			}
			return verifyServerChain(pool, cs.PeerCertificates)
		},
	}, nil
}

// checkCertPEM insists on at least one PEM CERTIFICATE block, every one
// of which parses.
func checkCertPEM(b []byte) error {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("certificate %d does not parse: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM CERTIFICATE block")
	}
	return nil
}

func verifyServerChain(roots *x509.CertPool, certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return errors.New("mesh: the peer sent no TLS certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return fmt.Errorf("mesh: the peer's TLS certificate: %w", err)
	}
	return nil
}
