package fuzz

import (
	"bytes"
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// clockFuzzSecret is the shared vectors' secret, so their lines are seeds.
const clockFuzzSecret = "tckclk-test-vector-secret-0123456789abcdef"

// clockFuzzNow is the node's (manual, frozen) wall clock: 2026-01-01 00:00:00.000 UTC.
var clockFuzzNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// FuzzClockhealthReadPath feeds arbitrary agent bytes to the node's prober
// through a net.Pipe fake conn (SPEC §1.1, §1.5, §3.1, §3.3). Every input
// ends the round within its deadline with either a healthy sample or exactly
// one SPEC §1.5 reason and the monitor latched FAILED with that reason —
// never a panic or a hang — and the reason is the one a naive reading of
// the SPEC predicts. With resign set, a line that parses is given the
// request's nonce and a valid MAC first, so the semantic checks are reached.
// The naive reading verifies MACs with its own HMAC of the SPEC §1.3 input
// (naiveMAC), and resigning uses the same, never protocol's Sign or Verify.
func FuzzClockhealthReadPath(f *testing.F) {
	key := protocol.NewKey([]byte(clockFuzzSecret))
	nowMs := uint64(clockFuzzNow.UnixMilli())
	for _, s := range []struct {
		ref, unc uint64
		synced   bool
		age      uint64
	}{
		{nowMs, 3, true, 100},         // healthy
		{nowMs - 125, 124, true, 100}, // bound 250: healthy
		{nowMs - 125, 125, true, 100}, // bound
		{nowMs + 126, 3, true, 1},     // offset
		{nowMs, 0, true, 1},           // uncertainty (synced with u = 0)
		{nowMs, 3, true, 120001},      // source_age
		{nowMs, 3, false, 1},          // unsynced
	} {
		line := clockhealthtest.SignedLine(key, fuzzNonce, s.ref, s.unc, s.synced, s.age)
		f.Add(line, false)
		f.Add(append(bytes.Clone(line), 'x'), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		if resign {
			data = clockFuzzResign([]byte(clockFuzzSecret), data)
		}
		clk := clockhealthtest.NewClock(clockFuzzNow)
		dialer := &clockhealthtest.PipeDialer{Respond: func(protocol.Request, bool) []byte { return data }}
		cfg := clockhealth.DefaultConfig() // Δ 500: limits 125 ms, Δ/2 = 250 ms
		cfg.AgentAddr = "agent.invalid:7970"
		cfg.ProbeTimeoutMs = 1000 // in-process pipe: only a hang would reach it
		mon, err := clockhealth.New(clockhealth.Options{
			Config: cfg, Secret: []byte(clockFuzzSecret), Wall: clk, Mono: clk,
			Dialer: dialer, Rand: bytes.NewReader(fuzzNonce[:]),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = mon.Probe(ctx)
		dialer.Wait()
		_ = mon.Close()
		if ctx.Err() != nil {
			t.Fatalf("round hung: %v", ctx.Err())
		}
		want := clockNaiveExchange([]byte(clockFuzzSecret), data, nowMs)
		got := reasonOf(t, err)
		if got != want {
			t.Fatalf("reason %q, naive reading says %q (err %v) for %q", got, want, err, data)
		}
		st := mon.Status()
		if want == "" {
			if st.Stage == clockhealth.StageFailed || st.HealthyRounds != 1 {
				t.Fatalf("healthy sample but status %+v", st)
			}
			return
		}
		if !want.Valid() || st.Stage != clockhealth.StageFailed || st.Reason != want || mon.Err() == nil {
			t.Fatalf("reason %q but status %+v", want, st)
		}
	})
}

// clockFuzzResign gives a parseable first line the fuzz nonce and a valid
// MAC, keeping every other byte as it was.
func clockFuzzResign(secret []byte, data []byte) []byte {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return data
	}
	r, err := protocol.ParseResponseAny(data[:i])
	if err != nil {
		return data
	}
	r.Nonce = fuzzNonce
	r.MAC = naiveMAC(secret, r)
	out := protocol.EncodeResponse(&r)
	return append(out, data[i+1:]...)
}

// clockNaiveExchange predicts the reason from SPEC §1.1, §1.5 and §3.3
// alone, with rtt 0 (frozen clocks) and the node's wall clock at nowMs.
func clockNaiveExchange(secret []byte, data []byte, nowMs uint64) protocol.Reason {
	lf := bytes.IndexByte(data, '\n')
	switch {
	case lf < 0 && len(data) > protocol.MaxLine || lf > protocol.MaxLine:
		return protocol.ReasonSize // 257 bytes without an LF
	case lf < 0:
		return protocol.ReasonFormat // EOF before the LF
	}
	line := string(data[:lf])
	if bytes.IndexByte(data[:lf], '\r') >= 0 {
		return protocol.ReasonFormat
	}
	n := naiveParseResponse(line, fuzzNonce)
	if n.reason != "" {
		return n.reason
	}
	if !naiveMACValid(secret, n.resp) {
		return protocol.ReasonMAC
	}
	if lf != len(data)-1 {
		return protocol.ReasonFormat // bytes after the LF
	}
	r := n.resp
	// |w1 − R| in ms, rounded up, in big integers.
	diff := new(big.Int).Sub(new(big.Int).SetUint64(nowMs), new(big.Int).SetUint64(r.ReferenceUnixMs))
	off := diff.Abs(diff)
	bound := new(big.Int).Add(off, new(big.Int).SetUint64(r.UncertaintyMs))
	bound.Add(bound, big.NewInt(1))
	switch {
	case !r.Synced:
		return protocol.ReasonUnsynced
	case r.SourceAgeMs > 120000:
		return protocol.ReasonSourceAge
	case r.UncertaintyMs == 0 || r.UncertaintyMs > 125:
		return protocol.ReasonUncertainty
	case off.Cmp(big.NewInt(125)) > 0:
		return protocol.ReasonOffset
	case bound.Cmp(big.NewInt(250)) > 0:
		return protocol.ReasonBound
	}
	return ""
}
