package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// wrapFunc runs node i's argv somewhere else (netLab.wrap); nil: as is.
type wrapFunc func(i int, argv []string) []string

func (e *env) startWrapped(name string, wrap wrapFunc, i int, argv ...string) (*proc, error) {
	if wrap != nil {
		argv = wrap(i, argv)
	}
	return e.start(name, nil, argv[0], argv[1:]...)
}

// startEtcdHosts starts a fresh 3-member etcd cluster, member i on
// hosts[i] (run through wrap), data and logs named by prefix, and waits
// for a leader. fsync on: etcd's default.
func (e *env) startEtcdHosts(ctx context.Context, prefix string, hosts []string, wrap wrapFunc) (*server, error) {
	n := len(hosts)
	ports, err := clustertest.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial, eps []string
	for i, h := range hosts {
		initial = append(initial, fmt.Sprintf("e%d=http://%s:%d", i+1, h, ports[n+i]))
		eps = append(eps, fmt.Sprintf("%s:%d", h, ports[i]))
	}
	s := &server{label: fmt.Sprintf("etcd ×%d", n), system: "etcd", nodes: n, addrs: eps}
	for i, h := range hosts {
		name := fmt.Sprintf("e%d", i+1)
		cu, pu := "http://"+eps[i], fmt.Sprintf("http://%s:%d", h, ports[n+i])
		p, err := e.startWrapped(prefix+"-"+name, wrap, i, e.etcd, "--name", name,
			"--data-dir", filepath.Join(e.dir, prefix+"-"+name),
			"--listen-client-urls", cu, "--advertise-client-urls", cu,
			"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "tckbench-"+prefix, "--logger", "zap", "--log-level", "error")
		if err != nil {
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	err = poll(ctx, 60*time.Second, s.procs, func() error {
		for i, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if err != nil {
				return err
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				s.endpoint, s.leader = ep, i
				return nil
			}
		}
		return errors.New("no leader yet")
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.label, err)
	}
	return s, nil
}

// Ports inside the lab's namespaces (each node has its own address).
const (
	labAPIPort    = 7980
	labGossipPort = 7946
	labAgent      = "127.0.0.1:7970" // each namespace's own tckclk-agent --dev
	labAgentHTTP  = "127.0.0.1:7971"
)

// startTicketdLab starts a fresh 3-node ticketd cluster in lab's
// namespaces, node i at lab.addrs[i] with its own `tckclk-agent --dev` on
// its namespace's loopback, keys from deploy/cluster-keys.sh, clock
// limits widened (clockFlags) as the load clusters'.
func (e *env) startTicketdLab(ctx context.Context, prefix string, lab *netLab, extra []string) (*server, error) {
	n := len(lab.addrs)
	keys := filepath.Join(e.dir, prefix+"keys")
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("node-%d", i+1))
	}
	same := func(v int) string { return strings.TrimSpace(strings.Repeat(fmt.Sprint(v)+" ", n)) }
	cmd := exec.Command("sh", append([]string{filepath.Join(e.repo, "deploy", "cluster-keys.sh"), keys}, names...)...)
	cmd.Env = append(os.Environ(), "TCKCLK_API_PORTS="+same(labAPIPort), "TCKCLK_GOSSIP_PORTS="+same(labGossipPort), "TCKCLK_AGENT_ADDR="+labAgent)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cluster-keys.sh: %w\n%s", err, out)
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s := &server{label: fmt.Sprintf("ticketd ×%d", n), system: "ticketd", nodes: n, keys: keys, prefix: prefix,
		adminToken: base64.RawURLEncoding.EncodeToString(tok)}
	if err := os.WriteFile(filepath.Join(keys, "admin.token"), []byte(s.adminToken), 0o600); err != nil {
		return nil, err
	}
	agentBin := filepath.Join(e.bin, "tckclk-agent")
	var agents []*proc
	for i := range n {
		a, err := e.startWrapped(fmt.Sprintf("%sagent-%d", prefix, i+1), lab.wrap, i, agentBin, "--dev", "--listen", labAgent,
			"--http", labAgentHTTP, "--secret-file", filepath.Join(keys, "clock.secret"))
		if err != nil {
			return nil, err
		}
		agents = append(agents, a)
	}
	err := poll(ctx, 30*time.Second, agents, func() error {
		for _, a := range agents {
			if b, _ := os.ReadFile(a.log); !strings.Contains(string(b), `msg="source healthy"`) {
				return fmt.Errorf("%s has no healthy source yet", a.name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		var join []string
		for j, a := range lab.addrs {
			if j != i {
				join = append(join, fmt.Sprintf("%s:%d", a, labGossipPort))
			}
		}
		api := fmt.Sprintf("%s:%d", lab.addrs[i], labAPIPort)
		args := append(clusterArgs(keys, name), "--http", api, "--clock.agent_addr", labAgent,
			"--cluster.membership.bind_addr", lab.addrs[i], "--cluster.membership.join_addrs", strings.Join(join, ","))
		p, err := e.startWrapped(prefix+"ticketd3-"+name, lab.wrap, i, append([]string{filepath.Join(e.bin, "ticketd")}, append(args, slices.Clone(extra)...)...)...)
		if err != nil {
			return nil, err
		}
		s.procs = append(s.procs, p)
		s.addrs = append(s.addrs, "http://"+api)
	}
	if err := waitTicketd(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}
