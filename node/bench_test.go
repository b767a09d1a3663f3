package node

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// BenchmarkGrantVsClockCheck (issue 5 item 7) measures, in one run, the
// pre-proposal clock check (SPEC §3.2: running bound, step, staleness and
// rollback, with an agent-mode monitor on the real clocks) against a
// single-node Grant through server.Write — the path the API handler calls:
// the check itself, Raft, the bolt fsync and the FSM. Each iteration is one
// Grant and 1000 checks, timed separately; check-%-of-grant is the ratio
// (target ≤ 2 %). Run: go test -run '^$' -bench GrantVsClockCheck ./node
func BenchmarkGrantVsClockCheck(b *testing.B) {
	var agent *clockhealthtest.Agent
	agent = clockhealthtest.StartAgent(b, []byte(clockSecret), func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: agent.Sign(req.Nonce, uint64(time.Now().UnixMilli()), 3, true, 100)}
	})
	cfg := testConfig(b, b.TempDir())
	cfg.Clock.AgentAddr = agent.Addr()
	cfg.Clock.SecretFile = writeFile(b, b.TempDir(), "clock.secret", clockSecret, 0o600)
	cfg.Clock.ProbeIntervalMs = 200 // defaults otherwise: Δ 500, timeout 200 ms
	cfg.Clock.ProbeTimeoutMs = 200
	var n *server
	tn := startNodeHooks(b, cfg, Deps{Env: noEnv, Logger: slog.New(slog.DiscardHandler)}, testHooks{built: func(x *server) { n = x }})
	defer tn.stop()

	const checks = 1000
	var grantNs, checkNs time.Duration
	i := 0
	for b.Loop() {
		i++
		w := api.Write{Op: ticket.OpGrant, Name: fmt.Sprintf("bench.%d", i), Holder: "bench", LeaseS: 250}
		t0 := time.Now()
		out, err := n.Write(bg, w)
		t1 := time.Now()
		if err != nil || out.Result.Code != ticket.CodeOK {
			b.Fatalf("grant %d: %+v %v", i, out.Result, err)
		}
		for range checks {
			if err := n.guard.Check(); err != nil {
				b.Fatalf("check: %v", err)
			}
		}
		grantNs += t1.Sub(t0)
		checkNs += time.Since(t1)
	}
	grant := float64(grantNs) / float64(i)
	check := float64(checkNs) / float64(i*checks)
	b.ReportMetric(grant, "grant-ns")
	b.ReportMetric(check, "check-ns")
	b.ReportMetric(100*check/grant, "check-%-of-grant")
}

// BenchmarkKeepAlive measures renewals a second through a single node's
// write path (the clock check, Raft, the WAL's fsync, the FSM): each
// iteration renews 4,096 held tickets, all at once, as KeepAlive entries
// of size renewals each, or (size 1) as one Renew entry each — what a
// batch's renew ops were before KeepAlives. Run:
// go test -run '^$' -bench KeepAlive -benchtime 20x ./node
func BenchmarkKeepAlive(b *testing.B) {
	const tickets = 4096
	for _, size := range []int{1, 16, 64, 256, 1024} {
		b.Run(fmt.Sprintf("per-entry-%d", size), func(b *testing.B) {
			cfg := testConfig(b, b.TempDir())
			var n *server
			tn := startNodeHooks(b, cfg, Deps{Env: noEnv, Logger: slog.New(slog.DiscardHandler)}, testHooks{built: func(x *server) { n = x }})
			defer tn.stop()
			ws := make([]api.Write, tickets)
			for i := range ws {
				w := api.Write{Op: ticket.OpGrant, Name: fmt.Sprintf("keep.%d", i), Holder: "keeper", LeaseS: 250}
				out, err := n.Write(bg, w)
				if err != nil || out.Result.Code != ticket.CodeOK {
					b.Fatalf("grant %d: %+v %v", i, out.Result, err)
				}
				w.Op, w.Token = ticket.OpRenew, out.Result.Ticket.Token
				ws[i] = w
			}
			idx := n.fsm.Index()
			b.ResetTimer()
			for b.Loop() {
				outs := make([][]api.Outcome, tickets/size)
				var wg sync.WaitGroup
				for g := range outs {
					part := ws[g*size : (g+1)*size]
					wg.Go(func() {
						if size == 1 {
							outs[g] = eachWrite(bg, part, n.writeLocal)
						} else {
							outs[g] = n.renewsLocal(bg, part)
						}
					})
				}
				wg.Wait()
				for _, part := range outs {
					for _, o := range part {
						if o.Err != nil || o.Written.Result.Code != ticket.CodeOK {
							b.Fatalf("renew: %+v %v", o.Written.Result, o.Err)
						}
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(tickets*b.N)/b.Elapsed().Seconds(), "renewals/s")
			b.ReportMetric(float64(n.fsm.Index()-idx)/float64(b.N), "entries/op")
		})
	}
}
