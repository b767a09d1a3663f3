package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Failover (issue 16 item 5, kill -9 part): per trial, kill -9 the
// leader of a 3-node cluster and time until a lock cycle succeeds again
// through the surviving nodes; then restart the killed node and wait for
// the cluster to be whole before the next trial.
type failoverResult struct {
	Target string          `json:"target"`
	Trials []time.Duration `json:"trials_ns"`
	Errors []string        `json:"errors,omitempty"`
}

// leaderOf asks every live node who leads; -1 when none does yet, an
// error when a live node does not answer.
func leaderOf(ctx context.Context, s *server) (int, error) {
	lead := -1
	for i, a := range s.addrs {
		if s.procs[i].exited() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		isLeader, err := nodeIsLeader(sctx, s.system, a)
		cancel()
		if err != nil {
			return -1, fmt.Errorf("%s: %w", a, err)
		}
		if isLeader {
			lead = i
		}
	}
	return lead, nil
}

func nodeIsLeader(ctx context.Context, system, addr string) (bool, error) {
	if system == "etcd" {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return false, err
		}
		defer cli.Close()
		st, err := cli.Status(ctx, addr)
		if err != nil {
			return false, err
		}
		return st.Leader != 0 && st.Leader == st.Header.MemberId, nil
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := client.New(addr, client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		return false, err
	}
	if _, err := c.Ready(ctx); err != nil {
		return false, err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return false, err
	}
	return st.Role == "leader", nil
}

// prober does one lock cycle through the nodes in addrs.
type prober interface {
	try(ctx context.Context) error
	close()
}

type ticketdProber struct {
	cs []*client.Client
	tr *http.Transport
	n  int
}

func newTicketdProber(addrs []string) (*ticketdProber, error) {
	p := &ticketdProber{tr: &http.Transport{}}
	for _, a := range addrs {
		c, err := client.New(a, client.WithHTTPClient(&http.Client{Transport: p.tr, Timeout: time.Second}))
		if err != nil {
			return nil, err
		}
		p.cs = append(p.cs, c)
	}
	return p, nil
}

// try grants and releases the probe ticket through the next node (a
// follower forwards to the leader).
func (p *ticketdProber) try(ctx context.Context) error {
	c := p.cs[p.n%len(p.cs)]
	p.n++
	l, err := c.Grant(ctx, "failover-probe", "prober", 5)
	if err != nil {
		return err
	}
	_, _ = c.Release(ctx, "failover-probe", "prober", l.Token)
	return nil
}

func (p *ticketdProber) close() { p.tr.CloseIdleConnections() }

type etcdProber struct {
	cli *clientv3.Client
	s   *concurrency.Session
	m   *concurrency.Mutex
}

func newEtcdProber(ctx context.Context, addrs []string) (*etcdProber, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(30), concurrency.WithContext(ctx))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdProber{cli: cli, s: s, m: concurrency.NewMutex(s, "/bench/failover-probe")}, nil
}

func (p *etcdProber) try(ctx context.Context) error {
	if err := p.m.TryLock(ctx); err != nil {
		return err
	}
	return p.m.Unlock(ctx)
}

func (p *etcdProber) close() { p.s.Close(); p.cli.Close() }

// summary is the median and the maximum of the trials.
func (r failoverResult) summary() (median, maximum time.Duration) {
	if len(r.Trials) == 0 {
		return 0, 0
	}
	t := append([]time.Duration(nil), r.Trials...)
	slices.Sort(t)
	return t[len(t)/2], t[len(t)-1]
}

func failover(ctx context.Context, e *env, s *server, trials int, out io.Writer) failoverResult {
	res := failoverResult{Target: s.label}
	for t := 1; t <= trials && ctx.Err() == nil; t++ {
		d, err := failoverTrial(ctx, e, s)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("trial %d: %v", t, err))
			fmt.Fprintf(out, "failover %-10s trial %2d: %v\n", s.label, t, err)
			continue
		}
		res.Trials = append(res.Trials, d)
		fmt.Fprintf(out, "failover %-10s trial %2d: kill -9 of the leader to the first successful lock %v\n", s.label, t, d.Round(time.Millisecond))
	}
	return res
}

func failoverTrial(ctx context.Context, e *env, s *server) (time.Duration, error) {
	// The cluster whole, a leader known.
	var lead int
	err := poll(ctx, 60*time.Second, nil, func() error {
		var err error
		if lead, err = leaderOf(ctx, s); err == nil && lead < 0 {
			err = errors.New("no leader")
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("before the kill: %w", err)
	}
	var survivors []string
	for i, a := range s.addrs {
		if i != lead {
			survivors = append(survivors, a)
		}
	}
	var p prober
	if s.system == "etcd" {
		p, err = newEtcdProber(ctx, survivors)
	} else {
		p, err = newTicketdProber(survivors)
	}
	if err != nil {
		return 0, err
	}
	defer p.close()
	if err := p.try(ctx); err != nil {
		return 0, fmt.Errorf("probe before the kill: %w", err)
	}
	victim := s.procs[lead]
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		return 0, err
	}
	var took time.Duration
	deadline := killed.Add(60 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err := p.try(actx)
		cancel()
		if err == nil {
			took = time.Since(killed)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("no successful lock within 60 s of the kill: %w", err)
		}
		time.Sleep(5 * time.Millisecond) // probe pacing (the figure's resolution)
	}
	if err := e.restart(victim); err != nil {
		return took, fmt.Errorf("restart: %w", err)
	}
	// Whole again: every node answers and one leads.
	err = poll(ctx, 120*time.Second, s.procs, func() error {
		l, err := leaderOf(ctx, s)
		if err == nil && l < 0 {
			err = errors.New("no leader")
		}
		return err
	})
	if err != nil {
		return took, fmt.Errorf("after the restart: %w", err)
	}
	return took, nil
}
