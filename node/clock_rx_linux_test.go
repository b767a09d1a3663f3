package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth/clockhealthtest"
	"github.com/tckclk/tckclk/protocol"
)

// SPEC §1.1: a node on the system clock takes its answers' receive
// timestamps from the kernel (clock_rx_timestamps_total{source="kernel"}
// on /metrics); a node on an injected clock never does (its stamps are
// user-space, counted as such), since the kernel's stamp is CLOCK_REALTIME.
func TestClockKernelRxTimestampsWiring(t *testing.T) {
	rx := func(tn *testNode, source string) float64 {
		v, _ := strconv.ParseFloat(metricLine(t, tn, `clock_rx_timestamps_total{source="`+source+`"}`), 64)
		return v
	}
	t.Run("system clock: kernel stamps", func(t *testing.T) {
		an := newAgentNode(t, t.TempDir(), []byte(clockSecret), nil)
		an.agent.SetHandler(func(req protocol.Request) clockhealthtest.Reply {
			return clockhealthtest.Reply{Bytes: an.agent.Sign(req.Nonce, uint64(time.Now().UnixMilli()), 3, true, 100)}
		})
		an.deps.Wall = nil
		tn, err := tryStart(t, an.cfg, an.deps, false)
		if err != nil {
			t.Fatal(err)
		}
		// The kernel turns its timestamping on through deferred work: the
		// first answers may still come unstamped.
		for i := 0; rx(tn, "kernel") == 0; i++ {
			if i == 20 {
				t.Fatalf("no kernel receive timestamp in 20 probe rounds (user %v)", rx(tn, "user"))
			}
			if !an.ts.Fire("probe", 5*time.Second) {
				t.Fatal("probe ticker not taken")
			}
		}
	})
	t.Run("injected clock: user stamps", func(t *testing.T) {
		an := newAgentNode(t, t.TempDir(), []byte(clockSecret), nil)
		tn, err := tryStart(t, an.cfg, an.deps, false)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if !an.ts.Fire("probe", 5*time.Second) {
				t.Fatal("probe ticker not taken")
			}
		}
		waitFor(t, "ready after clock_check", 10*time.Second, func() bool { _, err := tn.c.Ready(bg); return err == nil })
		if k, u := rx(tn, "kernel"), rx(tn, "user"); k != 0 || u < 3 {
			t.Fatalf("clock_rx_timestamps_total kernel %v user %v, want 0 and ≥ 3", k, u)
		}
	})
}
