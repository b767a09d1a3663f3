package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Failover (SPEC §5 "Crash failover"; -sections failover): per trial a
// fresh 3-node cluster, its leader either killed (kill -9: the kernel
// resets its connections) or its machine lost (its network namespace's
// link down: nothing is reset), and the time until a lock cycle succeeds
// again through the surviving nodes. The systems and kinds alternate
// within each trial round, so the machine's load falls on all alike.
type failoverResult struct {
	Target string          `json:"target"`
	Kind   string          `json:"kind,omitempty"` // kindKill or kindLost ("": kill -9, an older report)
	Trials []time.Duration `json:"trials_ns"`
	Errors []string        `json:"errors,omitempty"`
	// Timelines explain every trial, failed ones too (failover_timeline.go).
	Timelines []foTimeline `json:"timelines,omitempty"`
}

// The kinds of failover trial.
const (
	kindKill = "kill -9"
	kindLost = "machine lost"
)

// label is the result's row name.
func (r failoverResult) label() string {
	if strings.Contains(r.Target, "clock") {
		return r.Target
	}
	return r.Target + " " + cmp.Or(r.Kind, kindKill)
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

// prober does one lock cycle through the nodes in addrs; it returns
// when the lock was acquired and released, with the time it was acquired.
type prober interface {
	try(ctx context.Context, n int) (time.Time, error)
	close()
}

type ticketdProber struct {
	cs []*client.Client
	tr *http.Transport
}

// newTicketdProber's clients try once (WithFailover(0)): a probe is one
// request, its failure is recorded (probeStats.Errors) and the next probe
// 10 ms later is the retry, not the client's back-off, so no probe sits
// out the new leader's first moments in a back-off sleep unseen.
func newTicketdProber(addrs []string) (*ticketdProber, error) {
	p := &ticketdProber{tr: &http.Transport{}}
	for _, a := range addrs {
		c, err := client.New(a, client.WithHTTPClient(&http.Client{Transport: p.tr}), client.WithFailover(0))
		if err != nil {
			return nil, err
		}
		p.cs = append(p.cs, c)
	}
	return p, nil
}

// try grants probe ticket n through node n mod the survivors (a
// follower forwards to the leader) and releases it.
func (p *ticketdProber) try(ctx context.Context, n int) (time.Time, error) {
	c := p.cs[n%len(p.cs)]
	name := fmt.Sprintf("failover-probe-%d", n)
	l, err := c.Grant(ctx, name, "prober", 5)
	if err != nil {
		return time.Time{}, err
	}
	granted := time.Now()
	_, _ = c.Release(context.WithoutCancel(ctx), name, "prober", l.Token)
	return granted, nil
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
func (p *etcdProber) try(ctx context.Context, n int) (time.Time, error) {
	m := concurrency.NewMutex(p.s, fmt.Sprintf("/bench/failover-probe-%d", n))
	if err := m.TryLock(ctx); err != nil {
		return time.Time{}, err
	}
	locked := time.Now()
	_ = m.Unlock(context.WithoutCancel(ctx))
	return locked, nil
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
// killed to the first that succeeds (60 s at most) and what the probes
// did.
func firstSuccess(ctx context.Context, p prober, killed time.Time) (time.Duration, probeStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	type win struct {
		d              time.Duration
		n              int
		start, granted time.Time
	}
	won := make(chan win, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	var mu sync.Mutex
	var lastErr error
	errs := map[string]probeErr{}
	stats := func(n int) probeStats {
		mu.Lock()
		defer mu.Unlock()
		return probeStats{Started: n, Errors: maps.Clone(errs)}
	}
	for n := 1; ; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			actx, acancel := context.WithTimeout(ctx, probeTimeout)
			defer acancel()
			granted, err := p.try(actx, n)
			if err != nil {
				mu.Lock()
				if ctx.Err() == nil { // not one cut short by the first success
					lastErr = err
					k := briefProbeErr(err)
					pe := errs[k]
					pe.N, pe.Last = pe.N+1, time.Since(killed)
					errs[k] = pe
				}
				mu.Unlock()
				return
			}
			select {
			case won <- win{time.Since(killed), n, start, granted}:
			default:
			}
		}()
		select {
		case w := <-won:
			ps := stats(n)
			ps.Winner, ps.WinnerAt, ps.GrantedAt = w.n, w.start.Sub(killed), w.granted.Sub(killed)
			return w.d, ps, nil
		case <-ctx.Done():
			mu.Lock()
			err := cmp.Or(lastErr, ctx.Err())
			mu.Unlock()
			return 0, stats(n), fmt.Errorf("no successful lock within 60 s of the kill: %w", err)
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

// foTarget is one row of the failover section: a system and a kind.
type foTarget struct {
	system string // ticketd, etcd, or baseline (-baseline-repo's ticketd)
	lost   bool
}

func (t foTarget) result() failoverResult {
	r := failoverResult{Target: t.system + " ×3", Kind: kindKill}
	if t.system == "baseline" {
		r.Target = "ticketd ×3 baseline"
	}
	if t.lost {
		r.Kind = kindLost
	}
	return r
}

// failoverTargets are the -failover-kinds the section runs as fresh
// clusters (clock runs in runItems).
func failoverTargets(it itemOptions) []foTarget {
	var out []foTarget
	for _, k := range it.failoverKinds {
		sys, lost := strings.CutSuffix(k, "-lost")
		if sys == "clock" || !it.on("failover") {
			continue
		}
		out = append(out, foTarget{sys, lost})
	}
	return out
}

// failovers runs trials rounds of every failover target, a fresh cluster
// per trial. A lost-machine target without a network lab (not root, no
// ip) records why in its errors and runs no trial.
func failovers(ctx context.Context, e *env, o options, out io.Writer) []failoverResult {
	targets := failoverTargets(o.items)
	if e.baselineBin != "" && slices.Contains(targets, foTarget{"ticketd", false}) {
		// -baseline-repo: its ticketd's kill -9 beside, before/after in one run.
		targets = append(targets, foTarget{"baseline", false})
	}
	res := make([]failoverResult, len(targets))
	var lab *netLab
	var labErr error
	for i, t := range targets {
		res[i] = t.result()
		if t.lost && lab == nil && labErr == nil {
			if lab, labErr = newNetLab(3); labErr == nil {
				defer lab.close()
			}
		}
	}
	for trial := 1; trial <= o.failover && ctx.Err() == nil; trial++ {
		for i, t := range targets {
			r := &res[i]
			if t.lost && labErr != nil {
				if trial == 1 {
					r.Errors = append(r.Errors, fmt.Sprintf("skipped: no network lab: %v", labErr))
					fmt.Fprintf(out, "failover %s: skipped, no network lab: %v\n", r.label(), labErr)
				}
				continue
			}
			d, tl, err := freshFailover(ctx, e, o, t, trial, lab, out)
			if tl != nil {
				r.Timelines = append(r.Timelines, *tl)
			}
			if err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("trial %d: %v", trial, err))
				fmt.Fprintf(out, "failover %-24s trial %2d: %v\n", r.label(), trial, err)
				continue
			}
			r.Trials = append(r.Trials, d)
			fmt.Fprintf(out, "failover %-24s trial %2d: to the first successful lock %v\n", r.label(), trial, d.Round(time.Millisecond))
			if tl != nil && t.system != "etcd" {
				fmt.Fprintf(out, "  %s\n", tl.line())
			}
		}
	}
	return res
}

// freshFailover starts t's cluster (in the lab for a lost machine), fails
// its leader and times the first lock cycle through the survivors, and
// gives the trial's timeline once the leader failed; the cluster is
// stopped before it returns.
func freshFailover(ctx context.Context, e *env, o options, t foTarget, trial int, lab *netLab, out io.Writer) (time.Duration, *foTimeline, error) {
	k := len(e.procs)
	t0 := time.Now()
	var up, ready, failedOver time.Duration
	defer func() {
		t1 := time.Now()
		e.stopFrom(k)
		fmt.Fprintf(out, "tckbench: [time] failover trial: cluster up %s, leader and voters %s, failover %s, stopped %s\n", up.Round(10*time.Millisecond), ready.Round(10*time.Millisecond), failedOver.Round(10*time.Millisecond), time.Since(t1).Round(10*time.Millisecond))
	}()
	prefix := fmt.Sprintf("fo%d-%s", trial, t.system)
	if t.lost {
		prefix += "-lost"
	}
	var s *server
	var err error
	// The nodes log at info (the flags given win): the timeline's events.
	tflags := append([]string{"--log.level", "info"}, o.ticketdFlags...)
	switch {
	case t.system == "etcd" && t.lost:
		s, err = e.startEtcdHosts(ctx, prefix, lab.addrs, lab.wrap)
	case t.system == "etcd":
		s, err = e.startEtcdHosts(ctx, prefix, []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, nil)
	case t.system == "baseline":
		s, err = e.startTicketdSpec(ctx, clusterSpec{n: 3, extra: tflags, prefix: prefix + "-", bin: e.baselineBin})
	case t.lost:
		s, err = e.startTicketdLab(ctx, prefix+"-", lab, tflags)
	default:
		s, err = e.startTicketdSpec(ctx, clusterSpec{n: 3, extra: tflags, prefix: prefix + "-"})
	}
	if err != nil {
		return 0, nil, err
	}
	up = time.Since(t0)
	var lead int
	err = poll(ctx, 60*time.Second, s.procs, func() error {
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
		return 0, nil, fmt.Errorf("before the failure: %w", err)
	}
	ready = time.Since(t0) - up
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
		return 0, nil, err
	}
	defer p.close()
	if _, err := p.try(ctx, 0); err != nil {
		return 0, nil, fmt.Errorf("probe before the failure: %w", err)
	}
	failed := time.Now()
	if t.lost {
		err = lab.cut(lead)
		defer func() { _ = lab.mend(lead) }()
	} else {
		err = s.procs[lead].cmd.Process.Kill()
	}
	if err != nil {
		return 0, nil, err
	}
	d, ps, err := firstSuccess(ctx, p, failed)
	failedOver = time.Since(t0) - up - ready
	if ps.Winner > 0 {
		ps.Via = survivorName(s, survivors, ps.Winner)
	}
	tl := trialTimeline(trial, s.procs, lead, failed, d, ps)
	return d, &tl, err
}

// survivorName is the node probe n went through (ticketdProber.try: node
// n mod the survivors).
func survivorName(s *server, survivors []string, n int) string {
	a := survivors[n%len(survivors)]
	if i := slices.Index(s.addrs, a); i >= 0 && s.system == "ticketd" {
		return fmt.Sprintf("node-%d", i+1)
	}
	return a
}
