package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Failover (the kill -9 part of -sections failover): per trial, kill -9 the
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

// allVoters checks that the Raft configuration, as leader l lists it,
// has every node as a voter.
func allVoters(ctx context.Context, s *server, l int) error {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := client.New(s.addrs[l], client.WithAdminToken(s.adminToken), client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ms, err := c.Members(sctx)
	if err != nil {
		return err
	}
	voters := 0
	for _, m := range ms.Members {
		if m.Suffrage == "voter" {
			voters++
		}
	}
	if voters != len(s.addrs) {
		return fmt.Errorf("%d voters of %d", voters, len(s.addrs))
	}
	return nil
}

// prober does one lock cycle through the nodes in addrs.
type prober interface {
	try(ctx context.Context, n int) error
	close()
}

type ticketdProber struct {
	cs []*client.Client
	tr *http.Transport
}

func newTicketdProber(addrs []string) (*ticketdProber, error) {
	p := &ticketdProber{tr: &http.Transport{}}
	for _, a := range addrs {
		c, err := client.New(a, client.WithHTTPClient(&http.Client{Transport: p.tr}))
		if err != nil {
			return nil, err
		}
		p.cs = append(p.cs, c)
	}
	return p, nil
}

// try grants probe ticket n through node n mod the survivors (a
// follower forwards to the leader) and releases it.
func (p *ticketdProber) try(ctx context.Context, n int) error {
	c := p.cs[n%len(p.cs)]
	name := fmt.Sprintf("failover-probe-%d", n)
	l, err := c.Grant(ctx, name, "prober", 5)
	if err != nil {
		return err
	}
	_, _ = c.Release(context.WithoutCancel(ctx), name, "prober", l.Token)
	return nil
}

func (p *ticketdProber) close() { p.tr.CloseIdleConnections() }

type etcdProber struct {
	cli *clientv3.Client
	s   *concurrency.Session
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
	return &etcdProber{cli: cli, s: s}, nil
}

// try locks and unlocks probe mutex n with the session opened before the kill.
func (p *etcdProber) try(ctx context.Context, n int) error {
	m := concurrency.NewMutex(p.s, fmt.Sprintf("/bench/failover-probe-%d", n))
	if err := m.TryLock(ctx); err != nil {
		return err
	}
	_ = m.Unlock(context.WithoutCancel(ctx))
	return nil
}

func (p *etcdProber) close() { p.s.Close(); p.cli.Close() }

// probeEvery is how often a new overlapping probe starts (the figure's
// resolution); each may take up to probeTimeout, so one blocked through
// the election answers as soon as the new leader commits it.
const (
	probeEvery   = 10 * time.Millisecond
	probeTimeout = 10 * time.Second
)

// firstSuccess starts a probe every probeEvery and returns the time from
// killed to the first that succeeds (60 s at most).
func firstSuccess(ctx context.Context, p prober, killed time.Time) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	won := make(chan time.Duration, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	var lastErr atomic.Pointer[error]
	for n := 1; ; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, acancel := context.WithTimeout(ctx, probeTimeout)
			defer acancel()
			if err := p.try(actx, n); err != nil {
				lastErr.Store(&err)
				return
			}
			select {
			case won <- time.Since(killed):
			default:
			}
		}()
		select {
		case d := <-won:
			return d, nil
		case <-ctx.Done():
			err := ctx.Err()
			if e := lastErr.Load(); e != nil {
				err = *e
			}
			return 0, fmt.Errorf("no successful lock within 60 s of the kill: %w", err)
		case <-tick.C:
		}
	}
}

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
		if err == nil && s.system != "etcd" {
			err = allVoters(ctx, s, lead)
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
	if err := p.try(ctx, 0); err != nil {
		return 0, fmt.Errorf("probe before the kill: %w", err)
	}
	victim := s.procs[lead]
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		return 0, err
	}
	took, err := firstSuccess(ctx, p, killed)
	if err != nil {
		return 0, err
	}
	if err := e.restart(victim); err != nil {
		return took, fmt.Errorf("restart: %w", err)
	}
	// Whole again: every node answers, one leads, and (ticketd) the
	// restarted node is a voter again (the leader's reconciler removes a
	// dead voter and adds it back when it is live in gossip).
	err = poll(ctx, 180*time.Second, s.procs, func() error {
		l, err := leaderOf(ctx, s)
		if err == nil && l < 0 {
			err = errors.New("no leader")
		}
		if err == nil && s.system != "etcd" {
			err = allVoters(ctx, s, l)
		}
		return err
	})
	if err != nil {
		return took, fmt.Errorf("after the restart: %w", err)
	}
	return took, nil
}
