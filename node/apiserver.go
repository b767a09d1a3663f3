package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/api"
)

// apiServer is the running HTTP API.
type apiServer struct {
	srv  *http.Server
	errc chan error // Serve's failure (never ErrServerClosed)
	wg   sync.WaitGroup
}

// startAPI listens (unless ln is given) and serves the API; probes see
// every stage from here on.
func (n *Node) startAPI(ln net.Listener) (*apiServer, error) {
	tlsConf, err := apiTLS(&n.cfg.API.TLS)
	if err != nil {
		return nil, err
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", n.cfg.API.Addr); err != nil {
			return nil, fmt.Errorf("node: api.addr: %w", err)
		}
	}
	// The cap sits under TLS, so a handshake holds a slot too.
	ln = netutil.LimitListener(ln, n.cfg.API.MaxConns)
	scheme := "http"
	if tlsConf != nil {
		ln, scheme = tls.NewListener(ln, tlsConf), "https"
	}
	if exposed := !isLoopback(ln.Addr()); exposed && (tlsConf == nil || n.secrets.client == nil) {
		n.log.Warn("THE API IS REACHABLE BEYOND LOOPBACK WITHOUT TLS OR A CLIENT TOKEN: anyone who can reach it can grant and release tickets; "+
			"set api.tls and api.token_file, or listen on 127.0.0.1", "addr", ln.Addr().String(), "tls", tlsConf != nil, "client_token", n.secrets.client != nil)
	}
	n.log.Info("ticketd starting", "node_id", n.cfg.Cluster.Name, "mode", n.mode(),
		"data_dir", n.dir.Path(), "delta_ms", n.cfg.Clock.DeltaMs, "clock", n.clockMode(),
		"api", scheme+"://"+ln.Addr().String(), "client_token", n.secrets.client != nil, "admin_api", n.secrets.admin != nil)
	if until, cause := n.hold.until, n.hold.cause; !until.IsZero() {
		n.log.Warn("refusing Grant and Expire until the hold-off instant", "until", until.UTC().Format(time.RFC3339Nano), "cause", cause)
	}
	s := &apiServer{errc: make(chan error, 1), srv: &http.Server{
		Handler: api.NewHandler(api.Options{
			Backend: n, Metrics: n.metrics, Gatherer: n.reg,
			ClientToken: n.secrets.client, AdminToken: n.secrets.admin, Logger: n.log,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(n.log.With("component", "http").Handler(), slog.LevelWarn),
	}}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.errc <- err
		}
	})
	n.log.Info("API listening", "addr", ln.Addr().String())
	return s, nil
}

// stop lets in-flight requests finish (5 s at most), then closes.
func (s *apiServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	s.wg.Wait()
}

// isLoopback reports whether addr is a loopback TCP address.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func apiTLS(t *APITLSConfig) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, config.Errorf("api.tls.cert_file", "loading %s and %s: %v", t.CertFile, t.KeyFile, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, config.Errorf("api.tls.client_ca_file", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, config.Errorf("api.tls.client_ca_file", "%s holds no PEM certificate", t.ClientCAFile)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}
