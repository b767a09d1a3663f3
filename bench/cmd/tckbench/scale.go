package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/bench/internal/load"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// Scale (-sections scale): per ticket count N, a fresh 3-node ticketd
// cluster (as the comparison's, with a fourth NodeId trusted but not
// started) is filled with N distinct tickets through the leader's HTTP API
// (every grant a Raft entry, lease 250 s), then measured while every
// ticket is still active:
//
//   - RSS of each node (VmRSS, RssAnon, VmHWM from /proc/PID/status);
//   - a snapshot of the leader (POST /v1/cluster/snapshot): size and time;
//   - restore: the leader, right after that snapshot, is stopped (SIGTERM:
//     it hands leadership off) and started again; its "restored snapshot"
//     log line says how many tickets it restored and how long that took,
//     and /readyz when it serves again (as a follower);
//   - catch-up: the leader of the moment snapshots (its log keeps only
//     trailing_logs entries), the fourth NodeId starts with an empty data
//     dir (bootstrap_expect 0), the leader's reconciler adds it and Raft
//     sends it the snapshot and the log after it; the time from its start
//     until its applied index reaches the leader's.
//
// The tickets counted are the leader's tickets_active (/v1/status) after
// the fill and again after the last measurement, with the age of the
// first grant then: under 250 s + Δ, no ticket has expired. Past it,
// tickets_active also counts tickets past their expiry that the leader's
// expiry loop has not freed yet: with the keeper, the tickets kept alive
// are its count of unended leases at the end (kept_alive).
type scaleResult struct {
	Tickets         int     `json:"tickets"` // asked for
	Clients         int     `json:"clients"`
	FillSeconds     float64 `json:"fill_s"`
	GrantsPerS      float64 `json:"grants_per_s"`
	FillErrors      int64   `json:"fill_errors"`
	FirstError      string  `json:"first_error,omitempty"`
	ActiveAfter     int     `json:"active_after_fill"`
	ActiveEnd       int     `json:"active_at_end"`
	FirstGrantAgeS  float64 `json:"first_grant_age_at_end_s"`
	Leader          rss     `json:"leader_rss"`
	Followers       []rss   `json:"follower_rss"`
	SnapshotBytes   int64   `json:"snapshot_bytes"`
	SnapshotMs      int64   `json:"snapshot_ms"`
	RestoreMs       int64   `json:"restore_ms"` // the restarted leader's snapshot restore
	RestoredTickets int     `json:"restored_tickets"`
	RestartReadyMs  int64   `json:"restart_ready_ms"` // its start to /readyz 200
	CatchUpMs       int64   `json:"catch_up_ms"`
	CatchUpIndex    uint64  `json:"catch_up_index"`    // the leader's applied index it had to reach
	CatchUpSnap     uint64  `json:"catch_up_snapshot"` // its last snapshot index then (> 0: it installed one)
	CatchUpRSS      rss     `json:"catch_up_rss"`
	KeptAlive       int     `json:"kept_alive,omitempty"`     // the keeper's unended leases at the end (keeper)
	Renewals        int64   `json:"renewals,omitempty"`       // the keeper's (keeper)
	RenewFailures   int64   `json:"renew_failures,omitempty"` // tickets it lost
	FirstRenewError string  `json:"first_renew_error,omitempty"`
	Error           string  `json:"error,omitempty"` // the section failed here
	Note            string  `json:"note,omitempty"`  // measured, but read it with this
}

// rss is one process's memory, MiB.
type rss struct {
	RSS, Anon, HWM float64
}

func (r rss) String() string {
	return fmt.Sprintf("%.0f MiB (anon %.0f, peak %.0f)", r.RSS, r.Anon, r.HWM)
}

func readRSS(pid int) (rss, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return rss{}, err
	}
	var r rss
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			r.RSS = kb / 1024
		case "RssAnon:":
			r.Anon = kb / 1024
		case "VmHWM:":
			r.HWM = kb / 1024
		}
	}
	return r, nil
}

// scaleLease is the fill's default lease, the longest SPEC §4 allows.
const scaleLease = 250

// runScale measures every count in -scale, one fresh cluster each, and
// stops it before the next.
func runScale(ctx context.Context, e *env, o options, out io.Writer) *scaleSection {
	sec := &scaleSection{Clients: o.items.scaleClients, Batch: o.items.scaleBatch, LeaseS: o.items.scaleLease, Keep: o.items.scaleKeep && o.items.scaleBatch > 0, TicketdFlags: o.ticketdFlags, Repo: o.repo}
	for i, n := range o.items.scale {
		sec.Results = append(sec.Results, scaleOne(ctx, e, o, n, fmt.Sprintf("scale%d-", i+1), out))
		if ctx.Err() != nil {
			break
		}
	}
	return sec
}

func scaleOne(ctx context.Context, e *env, o options, n int, prefix string, out io.Writer) (r scaleResult) {
	r = scaleResult{Tickets: n, Clients: o.items.scaleClients}
	first := len(e.procs)
	defer e.stopFrom(first) // this cluster's processes only
	fail := func(what string, err error) scaleResult {
		r.Error = fmt.Sprintf("%s: %v", what, err)
		fmt.Fprintf(out, "scale %8d tickets: %s: %v\n", n, what, withLogs(err, &env{procs: e.procs[first:]}))
		return r
	}
	extra := append([]string{"--log.level", "info"}, o.ticketdFlags...)
	s, err := e.startTicketdSpec(ctx, clusterSpec{n: 3, spare: 1, prefix: prefix, extra: extra, profile: o.profile != ""})
	if err != nil {
		return fail("start", err)
	}
	admin := func(url string) (*client.Client, func(), error) {
		tr := &http.Transport{}
		c, err := client.New(url, client.WithAdminToken(s.adminToken), client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Minute}))
		return c, tr.CloseIdleConnections, err
	}
	lc, closeLC, err := admin(s.endpoint)
	if err != nil {
		return fail("client", err)
	}
	defer func() { closeLC() }() // the one of the moment: it is replaced after the restart

	leaseS := o.items.scaleLease
	fmt.Fprintf(out, "scale %8d tickets: filling through the leader %s with %d clients, batch %d (lease %d s)\n", n, s.endpoint, o.items.scaleClients, o.items.scaleBatch, leaseS)
	prof := scaleProfiler(ctx, o.profile, s, fmt.Sprintf("scale-%d", n), out)
	defer prof.wait()
	var k *keeper
	stopKeeper := func() {}
	if o.items.scaleKeep && o.items.scaleBatch > 0 {
		k = newKeeper(n, o.items.scaleBatch, leaseS)
		kctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			// As many batches in flight as the fill's clients: on a loaded
			// machine a batch's round trip, not the servers' CPU, bounds
			// the rate (5M tickets need 20,000 renewals/s).
			keepers := o.items.scaleClients
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: keepers}, Timeout: time.Minute}
			defer hc.CloseIdleConnections()
			var target atomic.Int64
			target.Store(int64(s.leader))
			k.run(kctx, hc, s.addrs, func() int { return int(target.Load()) }, func(from int) { target.CompareAndSwap(int64(from), int64((from+1)%len(s.addrs))) }, keepers)
		}()
		var once sync.Once
		stopKeeper = func() { // after the last measurement
			once.Do(func() {
				stop()
				<-done
				r.Renewals, r.RenewFailures = k.renewed.Load(), k.failed.Load()
				if p := k.first.Load(); p != nil {
					r.FirstRenewError = *p
				}
				fmt.Fprintf(out, "scale %8d tickets: the keeper renewed %d tickets, lost %d\n", n, r.Renewals, r.RenewFailures)
			})
		}
		defer stopKeeper()
	}
	fillProf := prof.during("fill-cpu", "profile", 30, n/2)
	firstGrant, err := scaleFill(ctx, s.addrs, s.leader, n, o.items.scaleClients, o.items.scaleBatch, leaseS, k, &r, out, fillProf)
	if err != nil {
		return fail("fill", err)
	}
	// Leadership may have moved during the fill (a loaded machine).
	if lead, err := leaderOf(ctx, s); err != nil || lead < 0 {
		return fail("leader after the fill", fmt.Errorf("%d %v", lead, err))
	} else if lead != s.leader {
		fmt.Fprintf(out, "scale %8d tickets: leadership moved during the fill, to %s\n", n, s.addrs[lead])
		closeLC()
		s.leader, s.endpoint = lead, s.addrs[lead]
		if lc, closeLC, err = admin(s.endpoint); err != nil {
			return fail("client", err)
		}
	}
	st, err := lc.Status(ctx)
	if err != nil {
		return fail("status after the fill", err)
	}
	r.ActiveAfter = st.TicketsActive
	if r.Leader, err = readRSS(s.procs[s.leader].pid()); err != nil {
		return fail("leader RSS", err)
	}
	for i, p := range s.procs {
		if i != s.leader {
			f, err := readRSS(p.pid())
			if err != nil {
				return fail("follower RSS", err)
			}
			r.Followers = append(r.Followers, f)
		}
	}
	fmt.Fprintf(out, "scale %8d tickets: filled in %.1f s (%.0f grants/s, %d errors), tickets_active %d; leader RSS %s\n",
		n, r.FillSeconds, r.GrantsPerS, r.FillErrors, r.ActiveAfter, r.Leader)

	prof.now("heap", "heap", 0)
	snapProf := prof.start("snapshot-cpu", "profile", 15)
	info, err := freshSnapshot(ctx, lc)
	snapProf()
	if err != nil {
		return fail("leader snapshot", err)
	}
	r.SnapshotBytes, r.SnapshotMs = info.SizeBytes, info.DurationMs
	fmt.Fprintf(out, "scale %8d tickets: leader snapshot %d bytes (%d tickets) in %d ms\n", n, info.SizeBytes, info.Tickets, info.DurationMs)

	lead, err := scaleRestart(ctx, e, s, &r)
	if err != nil {
		return fail("leader restart", err)
	}
	fmt.Fprintf(out, "scale %8d tickets: leader restart: snapshot of %d tickets restored in %d ms, ready %d ms after its start\n", n, r.RestoredTickets, r.RestoreMs, r.RestartReadyMs)
	closeLC()
	s.leader, s.endpoint = lead, s.addrs[lead]
	if lc, closeLC, err = admin(s.endpoint); err != nil {
		return fail("client", err)
	}

	// The new leader snapshots too, so its log keeps only its trailing
	// entries and the new node has to be sent the snapshot.
	if _, err := freshSnapshot(ctx, lc); err != nil {
		return fail("new leader snapshot", err)
	}
	if err := scaleCatchUp(ctx, e, s, lc, extra, &r); err != nil {
		return fail("catch-up", err)
	}
	fmt.Fprintf(out, "scale %8d tickets: a new node caught up to index %d in %d ms (its snapshot index %d), RSS %s\n", n, r.CatchUpIndex, r.CatchUpMs, r.CatchUpSnap, r.CatchUpRSS)

	if st, err = lc.Status(ctx); err != nil {
		return fail("status at the end", err)
	}
	r.ActiveEnd, r.FirstGrantAgeS = st.TicketsActive, time.Since(firstGrant).Seconds()
	if k != nil {
		r.KeptAlive = k.alive(time.Now())
	}
	stopKeeper()
	fmt.Fprintf(out, "scale %8d tickets: at the end tickets_active %d (the keeper holds %d unended leases), the first grant %.0f s old (lease %d s + Δ)\n",
		n, r.ActiveEnd, r.KeptAlive, r.FirstGrantAgeS, leaseS)
	switch {
	case k != nil && r.RenewFailures > 0:
		r.Note = fmt.Sprintf("the keeper lost %d tickets (refused, or their lease ended before a renewal got through; first: %s): keeping %d alive takes %d renewals/s beside the fill (tickets_active %d at the end)", r.RenewFailures, r.FirstRenewError, n, n/leaseS, r.ActiveEnd)
	case k == nil && r.FirstGrantAgeS >= float64(leaseS):
		r.Note = fmt.Sprintf("the measurements ended %.0f s after the first grant: tickets may have expired during them (tickets_active %d of %d)", r.FirstGrantAgeS, r.ActiveEnd, n)
	}
	return r
}

// scaleFill grants n distinct tickets through url with clients
// goroutines, one Grant request each at a time or, batch > 0, batch
// grants per POST /v1/batch (each op still its own Raft entry); it
// prints progress every 10 s and returns when the first grant was sent.
func scaleFill(ctx context.Context, addrs []string, leader, n, clients, batch, leaseS int, k *keeper, r *scaleResult, out io.Writer, progress func(done int)) (time.Time, error) {
	granted := func(int64, uint64, time.Time) {}
	if k != nil {
		granted = k.granted
	}
	// A fill the keeper cannot keep up with is stopped once it lost 1 %
	// of the tickets: the cluster cannot hold n alive (behind).
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var behind atomic.Bool
	var tds []*load.Ticketd
	for _, a := range addrs {
		td, err := load.NewTicketd(a, clients, false)
		if err != nil {
			return time.Time{}, err
		}
		defer td.Close()
		if err := td.Ready(ctx, 30*time.Second); err != nil {
			return time.Time{}, err
		}
		tds = append(tds, td)
	}
	// target is the node the fill sends to: the leader, then, when a
	// request fails (leadership moved on a loaded machine), the next node
	// (a follower forwards to the leader).
	var target atomic.Int64
	target.Store(int64(leader))
	moveOn := func(from int64) { target.CompareAndSwap(from, (from+1)%int64(len(addrs))) }
	var next, done, errs atomic.Int64
	var firstErr atomic.Pointer[string]
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // progress
		defer wg.Done()
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				for i, a := range addrs { // back to the leader of the moment
					lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					isLeader, err := nodeIsLeader(lctx, "ticketd", a)
					cancel()
					if err == nil && isLeader {
						target.Store(int64(i))
					}
				}
				d := done.Load()
				progress(int(d))
				if k != nil && k.failed.Load() > int64(n)/100 {
					behind.Store(true)
					cancel()
				}
				fmt.Fprintf(out, "scale %8d tickets: %d granted after %.0f s (%.0f/s)\n", n, d, time.Since(start).Seconds(), float64(d)/time.Since(start).Seconds())
			}
		}
	}()
	// grant grants fill ticket i, retried twice (a repeated Grant by the
	// same holder is idempotent: an unknown outcome is settled by the
	// next try), counting a ticket still not granted as one error.
	grant := func(i int64) bool {
		var err error
		var l *client.Lease
		sent := time.Now()
		for range 3 {
			at := target.Load()
			sent = time.Now()
			if l, err = tds[at].C.Grant(ctx, fillName(i), "filler", leaseS); err == nil || ctx.Err() != nil {
				break
			}
			moveOn(at)
		}
		if err != nil {
			granted(i, 0, sent)
			if errs.Add(1) == 1 {
				s := err.Error()
				firstErr.Store(&s)
			}
			return false
		}
		granted(i, l.Token, sent)
		return true
	}
	grantClients, batchClients := clients, 0
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	if batch > 0 {
		grantClients, batchClients = 0, clients
		// Ticket 0 alone first: a ticketd without the endpoint fails here,
		// not silently one grant at a time.
		if len(batchGrant(ctx, hc, addrs[leader], 0, 1, leaseS, granted)) > 0 {
			return start, fmt.Errorf("POST %s/v1/batch did not grant (does the ticketd built have it?)", addrs[leader])
		}
		next.Store(1)
		done.Store(1)
	}
	var fill sync.WaitGroup
	for range grantClients {
		fill.Add(1)
		go func() {
			defer fill.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if grant(i) {
					done.Add(1)
				}
			}
		}()
	}
	for range batchClients {
		fill.Add(1)
		go func() {
			defer fill.Done()
			for ctx.Err() == nil {
				from := next.Add(int64(batch)) - int64(batch)
				if from >= int64(n) {
					return
				}
				to := min(from+int64(batch), int64(n))
				count := to - from
				at := target.Load()
				failed := batchGrant(ctx, hc, addrs[at], from, to, leaseS, granted)
				if len(failed) > 0 {
					moveOn(at)
				}
				for _, i := range failed {
					if !grant(i) { // failed in the batch: once more alone
						count--
					}
				}
				done.Add(count)
			}
		}()
	}
	fill.Wait()
	close(stop)
	wg.Wait()
	took := time.Since(start)
	r.FillSeconds, r.GrantsPerS, r.FillErrors = took.Seconds(), float64(done.Load())/took.Seconds(), errs.Load()
	if p := firstErr.Load(); p != nil {
		r.FirstError = *p
	}
	if behind.Load() {
		ops := float64(done.Load()+k.renewed.Load()) / took.Seconds()
		first := ""
		if p := k.first.Load(); p != nil {
			first = *p
		}
		return start, fmt.Errorf("the keeper lost %d tickets (first: %s) with %d of %d granted: keeping %d tickets alive takes %d renewals/s beside the fill, the cluster did %.0f grants and renewals/s", k.failed.Load(), first, done.Load(), n, n, n/leaseS, ops)
	}
	if outer.Err() != nil {
		return start, outer.Err()
	}
	// Some grants fail when leadership moves on a loaded machine (each is
	// retried twice first); the section counts what is active anyway.
	if errs.Load() > int64(n)/20 {
		return start, fmt.Errorf("%d of %d grants failed, first: %s", errs.Load(), n, r.FirstError)
	}
	return start, nil
}

// batchGrant grants fill tickets from..to-1 in one POST /v1/batch,
// tells granted (when not nil) each one's token, and returns the ones not
// granted (all of them when the request failed).
func batchGrant(ctx context.Context, hc *http.Client, url string, from, to int64, leaseS int, granted func(i int64, token uint64, sent time.Time)) []int64 {
	type op struct {
		Op     string `json:"op"`
		Name   string `json:"name"`
		Holder string `json:"holder"`
		LeaseS int    `json:"lease_s"`
	}
	var body struct {
		Ops []op `json:"ops"`
	}
	all := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		body.Ops = append(body.Ops, op{"grant", fillName(i), "filler", leaseS})
		all = append(all, i)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return all
	}
	sent := time.Now()
	res, err := postBatchResults(ctx, hc, url, b, len(all))
	if err != nil {
		return all
	}
	var failed []int64
	for k, r := range res {
		var g wire.Grant
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &g) != nil || g.Token == 0 {
			failed = append(failed, all[k])
			continue
		}
		if granted != nil {
			granted(all[k], g.Token, sent)
		}
	}
	return failed
}

// freshSnapshot asks c's node for a snapshot; one grant first makes sure
// there is something new to snapshot (an automatic snapshot may just have
// run), and it is retried once if one ran in between.
func freshSnapshot(ctx context.Context, c *client.Client) (*wire.SnapshotInfo, error) {
	var err error
	for try := range 2 {
		if _, err = c.Grant(ctx, fmt.Sprintf("scale-snapshot-probe-%d", try), "tckbench", scaleLease); err != nil {
			return nil, err
		}
		var info *wire.SnapshotInfo
		if info, err = c.Snapshot(ctx); err == nil {
			return info, nil
		}
		var ce *client.Error
		if !errors.As(err, &ce) || ce.StatusCode != http.StatusConflict {
			return nil, err
		}
	}
	return nil, err
}

var restoredRe = regexp.MustCompile(`msg="restored snapshot".* tickets=(\d+) .*took_ms=(\d+)`)

// scaleRestart stops the leader (SIGTERM: it hands leadership off first)
// right after its snapshot and starts it again: the restore time and
// ticket count from its log, the time to /readyz 200. It returns the
// new leader's index in s.procs.
func scaleRestart(ctx context.Context, e *env, s *server, r *scaleResult) (int, error) {
	p := s.procs[s.leader]
	p.stop()
	started := time.Now()
	if err := e.restart(p); err != nil {
		return 0, err
	}
	td, err := load.NewTicketd(s.addrs[s.leader], 1, false)
	if err != nil {
		return 0, err
	}
	defer td.Close()
	if err := td.Ready(ctx, 5*time.Minute); err != nil {
		return 0, err
	}
	r.RestartReadyMs = time.Since(started).Milliseconds()
	b, err := os.ReadFile(p.log)
	if err != nil {
		return 0, err
	}
	m := restoredRe.FindAllSubmatch(b, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("no \"restored snapshot\" line with tickets and took_ms in %s", p.log)
	}
	r.RestoredTickets, _ = strconv.Atoi(string(m[len(m)-1][1]))
	r.RestoreMs, _ = strconv.ParseInt(string(m[len(m)-1][2]), 10, 64)
	lead := -1
	err = poll(ctx, time.Minute, s.procs, func() error {
		var err error
		if lead, err = leaderOf(ctx, s); err == nil && lead < 0 {
			err = errors.New("no leader")
		}
		return err
	})
	return lead, err
}

// scaleCatchUp starts the spare NodeId with an empty data dir and times
// it until its applied index reaches the leader's (taken at its start).
func scaleCatchUp(ctx context.Context, e *env, s *server, lc *client.Client, extra []string, r *scaleResult) error {
	st, err := lc.Status(ctx)
	if err != nil {
		return err
	}
	r.CatchUpIndex = st.Raft.AppliedIndex
	started := time.Now()
	p, sp, err := e.startSpare(s, extra)
	if err != nil {
		return err
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := client.New(sp.url, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 5 * time.Second}))
	if err != nil {
		return err
	}
	return poll(ctx, 10*time.Minute, []*proc{p}, func() error {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if st.Raft.AppliedIndex < r.CatchUpIndex {
			return fmt.Errorf("%s applied %d of %d", sp.name, st.Raft.AppliedIndex, r.CatchUpIndex)
		}
		r.CatchUpMs = time.Since(started).Milliseconds()
		r.CatchUpSnap = st.Raft.LastSnapshotIndex
		r.CatchUpRSS, err = readRSS(p.pid())
		return err
	})
}
