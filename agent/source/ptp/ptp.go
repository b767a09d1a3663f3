// Package ptp is the `ptp` source of SPEC §2.2: it reads a running ptp4l
// over its management socket (uds_address) with ptp.MgmtClient of
// github.com/facebook/time/ptp/protocol, as fbclock does: DEFAULT_DATA_SET
// (number of ports), PORT_PROPERTIES_NP (each port), TIME_STATUS_NP,
// PARENT_DATA_SET and CURRENT_DATA_SET.
//
// Health: gmPresent; a port in SLAVE, or UNCALIBRATED (what ptp4l shows
// with free_running 1, where nothing steers the clock and the agent itself
// corrects by the measured offset); software timestamping, so that the
// measured offset is of the system clock the agent reads (with hardware
// timestamping it is of a PHC, in TAI); a known grandmaster clockAccuracy;
// a sane ingress time and a measured path delay. Uncertainty: |master offset| + mean path delay (the
// bound on path asymmetry) + the grandmaster's clockAccuracy, rounded up.
// Offset: −master offset (ptp4l reports local − master). Age: now − the
// ingress time of the last sync.
package ptp

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	ptp "github.com/facebook/time/ptp/protocol"

	"github.com/tckclk/tckclk/agent/source"
)

// maxPorts bounds how many ports are asked about.
const maxPorts = 64

// Source reads ptp4l's management socket.
type Source struct {
	uds      string // ptp4l's uds_address
	localDir string // where the client socket is bound (ptp4l replies to it)
	domain   uint8
	clock    source.Clock
	seq      atomic.Uint64
}

// New returns the source for ptp4l's socket uds; the client binds its own
// socket in localDir (ptp4l must be able to write there).
func New(uds, localDir string, domain uint8, clock source.Clock) *Source {
	if clock == nil {
		clock = source.SystemClock{}
	}
	return &Source{uds: uds, localDir: localDir, domain: domain, clock: clock}
}

// Name is "ptp".
func (s *Source) Name() string { return "ptp" }

// Status is what one poll read from ptp4l.
type Status struct {
	Ports   []*ptp.PortPropertiesNPTLV
	Time    *ptp.TimeStatusNPTLV
	Parent  *ptp.ParentDataSetTLV
	Current *ptp.CurrentDataSetTLV
}

// Poll reads the management data sets once.
func (s *Source) Poll(ctx context.Context) (source.Sample, error) {
	local := filepath.Join(s.localDir, fmt.Sprintf("tckclk-agent.ptp.%d.%d.sock", os.Getpid(), s.seq.Add(1)))
	conn, closeConn, err := source.DialUnixgram(s.uds, local, 0)
	if err != nil {
		return source.Sample{}, source.Wrap("ptp", source.ReasonUnreachable, "connecting to ptp4l at "+s.uds, err)
	}
	defer closeConn()
	if err := conn.SetDeadline(source.Deadline(ctx)); err != nil {
		return source.Sample{}, source.Wrap("ptp", source.ReasonUnreachable, "setting a deadline on the socket to ptp4l at "+s.uds, err)
	}
	c := &ptp.MgmtClient{Connection: conn}
	c.SetDomainNumber(s.domain)
	st, err := read(c)
	readAt := s.clock.Now()
	if err != nil {
		return source.Sample{}, source.Exchanged("ptp", "management request", err)
	}
	return Interpret(readAt, st)
}

func read(c *ptp.MgmtClient) (*Status, error) {
	dds, err := c.DefaultDataSet()
	if err != nil {
		return nil, fmt.Errorf("DEFAULT_DATA_SET: %w", err)
	}
	st := &Status{}
	// One request per port (a wildcard port would bring one reply per port).
	for p := uint16(1); p <= dds.NumberPorts && p <= maxPorts; p++ {
		req := ptp.PortPropertiesNPRequest()
		req.TargetPortIdentity.PortNumber = p
		resp, err := c.Communicate(req)
		if err != nil {
			return nil, fmt.Errorf("PORT_PROPERTIES_NP port %d: %w", p, err)
		}
		pp, ok := resp.TLV.(*ptp.PortPropertiesNPTLV)
		if !ok {
			return nil, fmt.Errorf("PORT_PROPERTIES_NP port %d: got %T", p, resp.TLV)
		}
		st.Ports = append(st.Ports, pp)
	}
	if st.Time, err = c.TimeStatusNP(); err != nil {
		return nil, fmt.Errorf("TIME_STATUS_NP: %w", err)
	}
	if st.Parent, err = c.ParentDataSet(); err != nil {
		return nil, fmt.Errorf("PARENT_DATA_SET: %w", err)
	}
	if st.Current, err = c.CurrentDataSet(); err != nil {
		return nil, fmt.Errorf("CURRENT_DATA_SET: %w", err)
	}
	return st, nil
}

// Interpret checks one reading taken at readAt (SPEC §2.2 ptp).
func Interpret(readAt time.Time, st *Status) (source.Sample, error) {
	info := map[string]any{}
	fail := func(r source.Reason, format string, args ...any) (source.Sample, error) {
		return source.Sample{Info: info}, source.Errorf("ptp", r, format, args...)
	}
	var port *ptp.PortPropertiesNPTLV
	states := map[string]string{}
	for _, p := range st.Ports {
		states[fmt.Sprint(p.PortIdentity.PortNumber)] = p.PortState.String()
		if port == nil && (p.PortState == ptp.PortStateSlave || p.PortState == ptp.PortStateUncalibrated) {
			port = p
		}
	}
	info["port_states"] = states
	if st.Time == nil || st.Parent == nil || st.Current == nil {
		return fail(source.ReasonGarbage, "incomplete management data")
	}
	ts, pds, cds := st.Time, st.Parent, st.Current
	acc := pds.GrandmasterClockQuality.ClockAccuracy
	info["gm_present"] = ts.GMPresent != 0
	info["gm_identity"] = ts.GMIdentity.String()
	info["gm_clock_class"] = pds.GrandmasterClockQuality.ClockClass
	info["gm_clock_accuracy"] = fmt.Sprintf("0x%02X", uint8(acc))
	info["master_offset_ns"] = ts.MasterOffsetNS
	info["offset_from_master_ns"] = cds.OffsetFromMaster.Nanoseconds()
	info["mean_path_delay_ns"] = cds.MeanPathDelay.Nanoseconds()
	info["steps_removed"] = cds.StepsRemoved
	info["ingress_time_ns"] = ts.IngressTimeNS
	if port != nil {
		info["port"] = port.PortIdentity.PortNumber
		info["port_state"] = port.PortState.String()
		info["interface"] = string(port.Interface)
	}
	switch {
	case ts.GMPresent == 0:
		return fail(source.ReasonQuality, "no grandmaster present")
	case port == nil:
		return fail(source.ReasonQuality, "no port in SLAVE or UNCALIBRATED state (%v)", states)
	case port.Timestamping != ptp.TimestampingSoftware:
		return fail(source.ReasonQuality, "port %d uses hardware timestamping: its offset is of the PHC, not of the system clock the agent reads; run ptp4l -S or use chrony/kernel with phc2sys", port.PortIdentity.PortNumber)
	case acc < ptp.ClockAccuracyNanosecond25 || acc > ptp.ClockAccuracySecondGreater10:
		return fail(source.ReasonQuality, "grandmaster clockAccuracy 0x%02X is unknown: no honest bound (set clockAccuracy on the grandmaster)", uint8(acc))
	case acc == ptp.ClockAccuracySecondGreater10:
		return fail(source.ReasonQuality, "grandmaster clockAccuracy is worse than 10 s")
	case ts.IngressTimeNS <= 0:
		return fail(source.ReasonStale, "no sync received yet (ingress time %d)", ts.IngressTimeNS)
	}
	delay := cds.MeanPathDelay.Nanoseconds()
	switch {
	case math.IsNaN(delay) || delay < 0 || delay > 1e12:
		return fail(source.ReasonGarbage, "mean path delay %v ns", delay)
	case delay == 0:
		// ptp4l reports 0 until its first delay measurement: the path
		// asymmetry is not bounded yet.
		return fail(source.ReasonStale, "no path delay measured yet")
	}
	if ts.MasterOffsetNS == math.MinInt64 {
		return fail(source.ReasonGarbage, "master offset out of range")
	}
	offAbs := time.Duration(ts.MasterOffsetNS)
	if offAbs < 0 {
		offAbs = -offAbs
	}
	u := offAbs + time.Duration(math.Ceil(delay)) + acc.Duration()
	age := readAt.Sub(time.Unix(0, ts.IngressTimeNS))
	switch {
	case age < -time.Second:
		return fail(source.ReasonGarbage, "ingress time %d is %v in the future", ts.IngressTimeNS, -age)
	case age < 0:
		age = 0
	}
	return source.Sample{At: readAt, Offset: -time.Duration(ts.MasterOffsetNS), Uncertainty: u, Age: age, Info: info}, nil
}
