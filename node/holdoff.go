package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/node/clockhealth"
)

// failedMarkerFile records in the data dir that this single node's clock
// FAILED (SPEC §4). While it exists every start holds off Grant and Expire
// for 250 s + Δ; it is removed once a hold-off has fully passed with a
// healthy clock.
const failedMarkerFile = "clock-failed"

// priorFailure is what a FAILED marker found at start says.
type priorFailure struct {
	reason string // SPEC §1.5 reason, as recorded
	atMs   int64  // wall ms of the failure, 0 if not recorded
}

func (p *priorFailure) String() string {
	s := "restart after a FAILED clock (reason " + p.reason
	if p.atMs > 0 {
		s += " at " + time.UnixMilli(p.atMs).UTC().Format(time.RFC3339Nano)
	}
	return s + ")"
}

// writeFailedMarker records e durably (fsync of the file and the dir).
func writeFailedMarker(dir string, e *clockhealth.Error, at time.Time) error {
	body := "clock FAILED on this single node (SPEC 4)\n" +
		"reason: " + string(e.Reason) + "\n" +
		"at_unix_ms: " + strconv.FormatInt(at.UnixMilli(), 10) + "\n" +
		"error: " + strings.Join(strings.Fields(e.Error()), " ") + "\n" +
		"action: every start on this data dir refuses Grant and Expire for 250 s + delta; ticketd removes this file once a hold-off has passed\n"
	return clockhealth.WriteMarker(dir, failedMarkerFile, body)
}

// readFailedMarker returns the prior failure recorded in dir, or nil. A
// marker that exists but cannot be read refuses the start (fail closed);
// one whose content is garbled still holds off.
func readFailedMarker(dir string) (*priorFailure, error) {
	path := filepath.Join(dir, failedMarkerFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &DataError{File: path, Err: fmt.Errorf("cannot read the FAILED marker (refusing to start): %w", err)}
	}
	defer f.Close()
	p := &priorFailure{reason: "not recorded"}
	sc := bufio.NewScanner(io.LimitReader(f, 4096))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		switch k {
		case "reason":
			if r := strings.Join(strings.Fields(v), " "); r != "" && len(r) <= 64 {
				p.reason = r
			}
		case "at_unix_ms":
			p.atMs, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return p, nil
}

// clearHoldOff removes the FAILED marker of an earlier run once the
// hold-off has passed and the clock is still healthy. The marker lock
// orders it against clockFailed: a FAILED latched before the removal is
// seen (Err) and stops it; one latched after waits for the lock and writes
// its own marker after the removal. The evaluating Check runs before the
// lock is taken: it may latch FAILED, and clockFailed takes the same lock.
func (n *Node) clearHoldOff() {
	if !n.markerPending.Load() || n.guard.Check() != nil {
		return
	}
	n.markerMu.Lock()
	defer n.markerMu.Unlock()
	if !n.markerPending.Load() || n.mon != nil && n.mon.Err() != nil {
		return
	}
	if err := clockhealth.RemoveMarker(n.dataDir, failedMarkerFile); err != nil {
		n.log.Error("hold-off passed but the FAILED marker could not be removed (the next start holds off again)", "err", err)
		return
	}
	n.markerPending.Store(false)
	n.log.Info("hold-off passed with a healthy clock: FAILED marker removed", "marker", failedMarkerFile)
}
