package ptp

import (
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	ptp "github.com/facebook/time/ptp/protocol"
	"go.uber.org/goleak"

	"github.com/tckclk/tckclk/agent/internal/peertest"
	"github.com/tckclk/tckclk/agent/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var readAt = time.Unix(1_800_000_000, 0)

func goodStatus() *Status {
	return &Status{
		Ports: []*ptp.PortPropertiesNPTLV{
			{PortIdentity: ptp.PortIdentity{PortNumber: 1}, PortState: ptp.PortStateMaster, Timestamping: ptp.TimestampingSoftware},
			{PortIdentity: ptp.PortIdentity{PortNumber: 2}, PortState: ptp.PortStateSlave, Timestamping: ptp.TimestampingSoftware, Interface: "eth1"},
		},
		Time: &ptp.TimeStatusNPTLV{MasterOffsetNS: -3000, IngressTimeNS: readAt.Add(-250 * time.Millisecond).UnixNano(), GMPresent: 1},
		Parent: &ptp.ParentDataSetTLV{GrandmasterClockQuality: ptp.ClockQuality{ClockClass: 6,
			ClockAccuracy: ptp.ClockAccuracyMicrosecond100}},
		Current: &ptp.CurrentDataSetTLV{StepsRemoved: 1, MeanPathDelay: ptp.NewTimeInterval(1500.5)},
	}
}

// SPEC §2.1 ptp: |offset| + path delay + grandmaster accuracy, rounded up;
// SPEC §2.2 health.
func TestInterpret(t *testing.T) {
	s, err := Interpret(readAt, goodStatus())
	if err != nil {
		t.Fatal(err)
	}
	want := 3000*time.Nanosecond + 1501*time.Nanosecond + 100*time.Microsecond
	if s.Uncertainty != want || s.Offset != 3000*time.Nanosecond || s.Age != 250*time.Millisecond {
		t.Fatalf("sample %+v, want uncertainty %v, offset +3µs (−master offset), age 250ms", s, want)
	}
	cases := []struct {
		name string
		edit func(*Status)
		want source.Reason
	}{
		{"no grandmaster", func(s *Status) { s.Time.GMPresent = 0 }, source.ReasonQuality},
		{"no slave port", func(s *Status) { s.Ports[1].PortState = ptp.PortStateListening }, source.ReasonQuality},
		{"uncalibrated is fine (free_running)", func(s *Status) { s.Ports[1].PortState = ptp.PortStateUncalibrated }, ""},
		{"hardware timestamping", func(s *Status) { s.Ports[1].Timestamping = ptp.TimestampingHardware }, source.ReasonQuality},
		{"unknown accuracy", func(s *Status) { s.Parent.GrandmasterClockQuality.ClockAccuracy = ptp.ClockAccuracyUnknown }, source.ReasonQuality},
		{"accuracy worse than 10 s", func(s *Status) { s.Parent.GrandmasterClockQuality.ClockAccuracy = ptp.ClockAccuracySecondGreater10 }, source.ReasonQuality},
		{"no sync yet", func(s *Status) { s.Time.IngressTimeNS = 0 }, source.ReasonStale},
		{"no path delay measured yet", func(s *Status) { s.Current.MeanPathDelay = 0 }, source.ReasonStale},
		{"negative path delay", func(s *Status) { s.Current.MeanPathDelay = ptp.NewTimeInterval(-5) }, source.ReasonGarbage},
		{"NaN-ish path delay", func(s *Status) { s.Current.MeanPathDelay = ptp.TimeInterval(math.MaxInt64) }, source.ReasonGarbage},
		{"ingress in the future", func(s *Status) { s.Time.IngressTimeNS = readAt.Add(time.Hour).UnixNano() }, source.ReasonGarbage},
		{"missing data set", func(s *Status) { s.Current = nil }, source.ReasonGarbage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := goodStatus()
			c.edit(st)
			_, err := Interpret(readAt, st)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if source.ReasonOf(err) != c.want {
				t.Fatalf("want %q, got %v", c.want, err)
			}
		})
	}
}

// A missing or silent management socket is unreachable; garbage is garbage.
func TestBadPeers(t *testing.T) {
	dir := t.TempDir()
	src := New(filepath.Join(dir, "nope.sock"), dir, 0, nil)
	if _, err := src.Poll(context.Background()); source.ReasonOf(err) != source.ReasonUnreachable {
		t.Fatalf("missing socket: want unreachable, got %v", err)
	}
	for _, tc := range []struct {
		name  string
		reply []byte
		want  source.Reason
	}{{"silent", nil, source.ReasonUnreachable}, {"garbage", []byte("this is not a PTP management message at all....."), source.ReasonGarbage}} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(dir, tc.name+".sock")
			pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer os.Remove(sock)
			defer pc.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, 1500)
				for {
					_, addr, err := pc.ReadFromUnix(buf)
					if err != nil {
						return
					}
					if tc.reply != nil {
						pc.WriteToUnix(tc.reply, addr)
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = New(sock, dir, 0, nil).Poll(ctx)
			if source.ReasonOf(err) != tc.want {
				t.Fatalf("want %q, got %v", tc.want, err)
			}
			pc.Close()
			<-done
		})
	}
}

// SPEC §2.2 ptp against real ptp4l -S (free_running) over a veth pair
// between two network namespaces, read through the slave's management
// socket.
func TestRealPTP4l(t *testing.T) {
	pp := peertest.StartPTPPair(t, 0x27) // grandmaster clockAccuracy 100 µs
	src := New(pp.SlaveUDS, pp.Dir, 0, nil)
	var s source.Sample
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err = src.Poll(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	t.Logf("ptp sample: offset %v uncertainty %v age %v info %v", s.Offset, s.Uncertainty, s.Age, s.Info)
	// Both namespaces read the same host clock: offsets of µs, bound of
	// 100 µs (accuracy) plus a path delay and offset of µs.
	if s.Uncertainty < 100*time.Microsecond || s.Uncertainty > 50*time.Millisecond || s.Offset.Abs() > 10*time.Millisecond || s.Age > 5*time.Second {
		t.Fatalf("implausible sample %+v", s)
	}
	if st := s.Info["port_state"]; st != "UNCALIBRATED" && st != "SLAVE" {
		t.Fatalf("port state %v", st)
	}
	// Stopping the master: the slave loses its grandmaster (or its
	// ingress time ages) and the source becomes unhealthy.
	pp.Master.Stop()
	deadline = time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err = src.Poll(ctx)
		cancel()
		if err != nil || s.Age > 3*time.Second {
			t.Logf("after the master stopped: age %v err %v", s.Age, err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still fresh 15 s after the master stopped: %+v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
