package main

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/safety"
	"github.com/tckclk/tckclk/safety/workload"
)

// startSafetyCluster starts the three-process cluster and returns it
// with its leader.
func startSafetyCluster(t *testing.T) (*procCluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs four real processes")
	}
	dir := runClusterKeys(t, clustertest.Ports(t, len(clusterNames)), clustertest.Ports(t, len(clusterNames)), "127.0.0.1:1")
	pc := &procCluster{t: t, dir: dir, agentAddr: startDevAgent(t, filepath.Join(dir, "clock.secret")), procs: map[string]*proc{}}
	for _, name := range clusterNames {
		pc.start(name)
	}
	return pc, pc.waitLeader(30*time.Second, clusterNames...)
}

func (pc *procCluster) safetyTargets(t *testing.T) []workload.Target {
	var out []workload.Target
	for _, name := range clusterNames {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		c, err := client.New(pc.procs[name].addr, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, workload.Target{Name: name, Client: c})
	}
	return out
}

func checkSafe(t *testing.T, h *safety.History) *safety.Result {
	t.Helper()
	res, err := safety.Check(h, safety.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", t.Name(), res.Summary())
	for _, v := range res.Violations {
		t.Errorf("violation: %v", v)
	}
	return res
}

// Issue 13 scenario (c), SPEC §4 fencing: the holder pauses longer than
// its lease (between checking its deadline and writing: a GC pause or a
// SIGSTOP); the ticket expires, another client gets it with a higher
// token and writes; the paused holder's late write is rejected by the
// fencing register. The history checks clean.
func TestProcessClusterPausedHolderFenced(t *testing.T) {
	pc, _ := startSafetyCluster(t)
	targets := pc.safetyTargets(t)
	h := safety.NewHistory(12000)
	w, err := workload.New(workload.Config{Targets: targets, LeaseS: 1}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := func(op safety.Op, err error) {
		op.Return = w.Now()
		op.Outcome = safety.OK
		if err != nil {
			op.Outcome = safety.Unknown
			op.Code = err.Error()
		}
		h.Add(op)
	}
	grant := func(id int, holder string, deadline time.Duration) *client.Lease {
		end := time.Now().Add(deadline)
		for {
			call := w.Now()
			l, err := targets[id%len(targets)].Client.Grant(ctx, "fenced", holder, 1)
			if err == nil {
				rec(safety.Op{Client: id, Kind: safety.Grant, Ticket: "fenced", Holder: holder, LeaseS: 1, Token: l.Token,
					Call: call, Deadline: w.At(l.Deadline), Node: targets[id%len(targets)].Name}, nil)
				return l
			}
			op := safety.Op{Client: id, Kind: safety.Grant, Ticket: "fenced", Holder: holder, LeaseS: 1, Call: call, Return: w.Now(),
				Outcome: safety.Unknown, Code: err.Error()}
			var ce *client.Error
			if errors.As(err, &ce) && ce.ErrorBody.Error == "held" {
				op.Outcome, op.Code, op.RespHolder, op.RespToken = safety.Refused, "held", ce.Holder, ce.Token
			}
			h.Add(op)
			if time.Now().After(end) {
				t.Fatalf("%s got no grant within %v: %v", holder, deadline, err)
			}
			time.Sleep(200 * time.Millisecond) // retry interval of a grant with a deadline
		}
	}
	a := grant(0, "paused", 10*time.Second)
	if !time.Now().Before(a.Deadline) || !w.Write(0, "fenced", "paused", a.Token) {
		t.Fatal("the holder's first write, inside its lease, was rejected")
	}
	// The holder pauses here. The ticket expires (lease + Δ 12 s) and
	// another client takes it.
	h.Fault("holder_pause")
	b := grant(1, "other", 30*time.Second)
	if b.Token <= a.Token || !w.Write(1, "fenced", "other", b.Token) {
		t.Fatalf("the second holder: token %d after %d, or its write rejected", b.Token, a.Token)
	}
	// The paused holder resumes and writes without re-checking.
	if w.Write(0, "fenced", "paused", a.Token) {
		t.Fatal("the paused holder's late write with the old token was accepted")
	}
	res := checkSafe(t, h)
	if res.Rejected != 1 {
		t.Fatalf("register rejected %d writes, want exactly the late one", res.Rejected)
	}
}

// Issue 13 scenario (c), SPEC §4, §5: the leader process is stopped
// (SIGSTOP) for longer than the lease under load; the other two elect a
// leader and serve; the old leader resumes (SIGCONT) still believing it
// leads for a moment. The workload's history checks clean.
func TestProcessClusterPausedLeader(t *testing.T) {
	pc, leader := startSafetyCluster(t)
	h := safety.NewHistory(12000)
	w, err := workload.New(workload.Config{Targets: pc.safetyTargets(t), LeaseS: 1, Clients: 4, Hot: 2, Cold: 8}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	workload.Pause(context.Background(), 2*time.Second)
	p := pc.procs[leader]
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		cancel()
		wg.Wait()
		t.Fatal(err)
	}
	h.Fault("sigstop_leader")
	var others []string
	for _, n := range clusterNames {
		if n != leader {
			others = append(others, n)
		}
	}
	next := pc.waitLeader(30*time.Second, others...)
	workload.Pause(context.Background(), 3*time.Second) // paused for well over the 1 s lease
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Error(err)
	}
	t.Logf("SIGSTOP %s: %s led meanwhile; SIGCONT", leader, next)
	workload.Pause(context.Background(), 3*time.Second)
	cancel()
	wg.Wait()
	if res := checkSafe(t, h); res.Ops < 50 {
		t.Fatalf("only %d ops checked", res.Ops)
	}
}
