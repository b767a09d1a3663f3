//go:build tckclk_testfaults

package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/clockhealth"
)

// A ticketd built with -tags tckclk_testfaults is a test binary (the
// real-process safety scenarios in cluster_netns_test.go build it); it
// reads
//
//	TCKCLK_TESTFAULT_WALL_OFFSET_MS=N   the node's wall clock runs N ms
//	                                    (may be negative) off the system's
//	TCKCLK_TESTFAULT_EXPIRE_EARLY=1     the broken variant: as leader it
//	                                    frees tickets Δ early
//	TCKCLK_TESTFAULT_PANIC=1            a goroutine of its own panics once
//	                                    the node starts (how a crash ends
//	                                    the process: crash.go)
//
// and says so in its log. Release builds have no such code.
func init() { testFaults = applyTestFaults }

func applyTestFaults(d *node.Deps, log *slog.Logger) error {
	if v, ok := os.LookupEnv("TCKCLK_TESTFAULT_WALL_OFFSET_MS"); ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < -60000 || ms > 60000 {
			return fmt.Errorf("TCKCLK_TESTFAULT_WALL_OFFSET_MS %q: want an integer in -60000..=60000", v)
		}
		sys := clockhealth.NewSystemClock()
		d.Wall, d.Mono = offsetClock{off: time.Duration(ms) * time.Millisecond}, sys
		log.Warn("TEST FAULT: wall clock offset", "offset_ms", ms)
	}
	switch v := os.Getenv("TCKCLK_TESTFAULT_EXPIRE_EARLY"); v {
	case "":
	case "1":
		node.TestFaultExpireEarly()
		log.Warn("TEST FAULT: broken expiry, the leader frees tickets Δ early")
	default:
		return fmt.Errorf("TCKCLK_TESTFAULT_EXPIRE_EARLY %q: want 1 or unset", v)
	}
	switch v := os.Getenv("TCKCLK_TESTFAULT_PANIC"); v {
	case "":
	case "1":
		log.Warn("TEST FAULT: a goroutine panics")
		go panic("TEST FAULT: TCKCLK_TESTFAULT_PANIC")
	default:
		return fmt.Errorf("TCKCLK_TESTFAULT_PANIC %q: want 1 or unset", v)
	}
	return nil
}

// offsetClock is the system wall clock moved by off.
type offsetClock struct{ off time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.off) }
