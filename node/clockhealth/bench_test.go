package clockhealth_test

import (
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// BenchmarkCheck measures the pre-proposal check with the system clock, past
// clock_check, against a baseline in the same run: one time.Now() (the
// least any clock check costs). Compare the sub-benchmarks' ns/op.
func BenchmarkCheck(b *testing.B) {
	var agent *clockhealthtest.Agent
	agent = clockhealthtest.StartAgent(b, []byte(vectorSecret), func(req protocol.Request) clockhealthtest.Reply {
		return clockhealthtest.Reply{Bytes: agent.Sign(req.Nonce, uint64(time.Now().UnixMilli()), 3, true, 1)}
	})
	cfg := baseConfig(agent.Addr())
	cfg.ProbeIntervalMs = 60000
	cfg.StalenessMs = 3600000
	mon, err := clockhealth.New(clockhealth.Options{Config: cfg, Secret: []byte(vectorSecret)})
	if err != nil {
		b.Fatal(err)
	}
	defer mon.Close()
	for range clockhealth.ClockCheckSamples {
		if err := mon.Probe(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("baseline_time_now", func(b *testing.B) {
		b.ReportAllocs()
		var sink int64
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
		_ = sink
	})
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := mon.Check(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check_parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := mon.Check(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
