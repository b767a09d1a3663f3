// Package chrony is the `chrony` source of SPEC §2.2: it reads a running
// chronyd's tracking report (github.com/facebook/time/ntp/chrony) over its
// Unix command socket or over UDP (cmdport, 323 by default).
//
// Health: leap status not "unsynchronised", a reference that is not
// chronyd's own free-running local clock (refid 7F7F0101; accepted only
// for a --dev agent), sane root delay and dispersion, a last update in the
// past. Uncertainty (AWS ClockBound's): |system time offset| +
// root_delay/2 + root_dispersion, rounded up; offset = the system time
// offset (chronyc's "seconds slow" is positive: true = local + it); age =
// the time since chronyd's last clock update (its ref time).
//
// Hazards: over the Unix socket the client binds its own socket file next
// to chronyd's (as chronyc does), so the agent needs write access to that
// directory (/run/chrony: the _chrony group or root); UDP on 127.0.0.1:323
// needs no privilege for this read-only report. chronyd with a long maxpoll
// updates rarely and its samples age accordingly (source_age_ms).
package chrony

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/facebook/time/ntp/chrony"

	"github.com/tckclk/tckclk/agent/source"
)

// LocalRefID is chronyd's refid for its own local clock ("local" directive):
// not a synchronisation source.
const LocalRefID = 0x7F7F0101

// LeapUnsynchronised is chrony's leap status 3.
const LeapUnsynchronised = 3

// Source reads chronyd's tracking report.
type Source struct {
	network, addr string // "unix" + socket path, or "udp" + HOST:PORT
	acceptLocal   bool
	clock         source.Clock
	seq           atomic.Uint64
}

// New returns the source for network "unix" (addr a socket path) or "udp"
// (addr HOST:PORT). acceptLocal admits refid 7F7F0101 (--dev only).
func New(network, addr string, acceptLocal bool, clock source.Clock) (*Source, error) {
	if network != "unix" && network != "udp" {
		return nil, fmt.Errorf("chrony: network %q is neither unix nor udp", network)
	}
	if clock == nil {
		clock = source.SystemClock{}
	}
	return &Source{network: network, addr: addr, acceptLocal: acceptLocal, clock: clock}, nil
}

// Name is "chrony".
func (s *Source) Name() string { return "chrony" }

// Poll asks chronyd for one tracking report.
func (s *Source) Poll(ctx context.Context) (source.Sample, error) {
	conn, cleanup, err := s.dial()
	if err != nil {
		return source.Sample{}, source.Wrap("chrony", source.ReasonUnreachable, "connecting to chronyd at "+s.addr, err)
	}
	defer cleanup()
	if err := conn.SetDeadline(source.Deadline(ctx)); err != nil {
		return source.Sample{}, source.Wrap("chrony", source.ReasonUnreachable, "deadline", err)
	}
	client := &chrony.Client{Connection: conn}
	reply, err := client.Communicate(chrony.NewTrackingPacket())
	readAt := s.clock.Now()
	if err != nil {
		return source.Sample{}, source.Exchanged("chrony", "tracking request", err)
	}
	tr, ok := reply.(*chrony.ReplyTracking)
	if !ok {
		return source.Sample{}, source.Errorf("chrony", source.ReasonGarbage, "reply of type %T to a tracking request", reply)
	}
	if tr.Sequence != client.Sequence {
		return source.Sample{}, source.Errorf("chrony", source.ReasonGarbage, "reply sequence %d, want %d", tr.Sequence, client.Sequence)
	}
	return Interpret(readAt, &tr.Tracking, s.acceptLocal)
}

// dial connects; over the Unix socket it binds a client socket file next to
// chronyd's, which cleanup removes.
func (s *Source) dial() (net.Conn, func(), error) {
	if s.network == "udp" {
		c, err := net.Dial("udp", s.addr)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	local := filepath.Join(filepath.Dir(s.addr), fmt.Sprintf("tckclk-agent.%d.%d.sock", os.Getpid(), s.seq.Add(1)))
	// chronyd (user _chrony) must be able to send its reply to our socket.
	return source.DialUnixgram(s.addr, local, 0o666)
}

// Interpret checks one tracking report read at readAt (SPEC §2.2 chrony).
func Interpret(readAt time.Time, t *chrony.Tracking, acceptLocal bool) (source.Sample, error) {
	info := map[string]any{
		"refid":              chrony.RefidAsHEX(t.RefID),
		"reference":          chrony.RefidToString(t.RefID),
		"stratum":            t.Stratum,
		"leap_status":        t.LeapStatus,
		"ref_time":           t.RefTime.UTC(),
		"system_offset_s":    t.CurrentCorrection,
		"root_delay_s":       t.RootDelay,
		"root_dispersion_s":  t.RootDispersion,
		"update_interval_s":  t.LastUpdateInterval,
		"accept_local_refid": acceptLocal,
	}
	if t.IPAddr != nil && !t.IPAddr.IsUnspecified() {
		info["ip"] = t.IPAddr.String()
	}
	fail := func(r source.Reason, format string, args ...any) (source.Sample, error) {
		return source.Sample{Info: info}, source.Errorf("chrony", r, format, args...)
	}
	switch {
	case t.LeapStatus == LeapUnsynchronised:
		return fail(source.ReasonLeap, "chronyd reports leap status unsynchronised (refid %s, stratum %d)", chrony.RefidAsHEX(t.RefID), t.Stratum)
	case t.LeapStatus > LeapUnsynchronised:
		return fail(source.ReasonGarbage, "unknown leap status %d", t.LeapStatus)
	case t.RefID == LocalRefID && !acceptLocal:
		return fail(source.ReasonLocal, "chronyd's reference is its own local clock (refid 7F7F0101): not a synchronisation source")
	case t.RefID == 0 || t.Stratum == 0 || t.Stratum >= 16:
		return fail(source.ReasonLeap, "chronyd has no reference (refid %s, stratum %d)", chrony.RefidAsHEX(t.RefID), t.Stratum)
	case t.RefTime.Unix() <= 0:
		return fail(source.ReasonLeap, "chronyd has never updated its clock")
	}
	offAbs := math.Abs(t.CurrentCorrection)
	delay, ok1 := source.CeilDuration(t.RootDelay / 2)
	disp, ok2 := source.CeilDuration(t.RootDispersion)
	off, ok3 := source.CeilDuration(offAbs)
	if !ok1 || !ok2 || !ok3 || math.IsNaN(t.CurrentCorrection) {
		return fail(source.ReasonGarbage, "nonsense values: offset %v, root delay %v, root dispersion %v", t.CurrentCorrection, t.RootDelay, t.RootDispersion)
	}
	u := off + delay + disp
	if u <= 0 {
		u = time.Nanosecond // chronyd's own local clock under --dev reports all zeros
	}
	age := readAt.Sub(t.RefTime)
	switch {
	case age < -time.Second:
		return fail(source.ReasonGarbage, "ref time %v is %v in the future", t.RefTime.UTC(), -age)
	case age < 0 || t.RefID == LocalRefID:
		// chronyd's local clock (only under --dev) never "updates": it is
		// the clock itself, its ref time meaningless.
		age = 0
	}
	offset := time.Duration(t.CurrentCorrection * 1e9) // true = local + correction
	return source.Sample{At: readAt, Offset: offset, Uncertainty: u, Age: age, Info: info}, nil
}
