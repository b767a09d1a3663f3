package node

import (
	"fmt"
	"log/slog"
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
