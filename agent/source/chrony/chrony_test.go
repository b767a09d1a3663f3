package chrony

import (
	"context"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/facebook/time/ntp/chrony"
	"go.uber.org/goleak"

	"github.com/tckclk/tckclk/agent/internal/peertest"
	"github.com/tckclk/tckclk/agent/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var readAt = time.Unix(1_800_000_000, 0)

func goodTracking() *chrony.Tracking {
	return &chrony.Tracking{RefID: 0x0A000001, IPAddr: net.ParseIP("10.0.0.1"), Stratum: 3, LeapStatus: 0,
		RefTime: readAt.Add(-4 * time.Second), CurrentCorrection: -0.000250, RootDelay: 0.002, RootDispersion: 0.0005}
}

// SPEC §2.1 chrony: ClockBound's |offset| + root_delay/2 + root_dispersion,
// rounded up; SPEC §2.2: leap unsynchronised and refid 7F7F0101 refused.
func TestInterpret(t *testing.T) {
	s, err := Interpret(readAt, goodTracking(), false)
	if err != nil {
		t.Fatal(err)
	}
	want := 250*time.Microsecond + time.Millisecond + 500*time.Microsecond
	if s.Uncertainty != want || s.Offset != -250*time.Microsecond || s.Age != 4*time.Second || !s.At.Equal(readAt) {
		t.Fatalf("sample %+v, want uncertainty %v offset -250µs age 4s", s, want)
	}
	cases := []struct {
		name        string
		edit        func(*chrony.Tracking)
		acceptLocal bool
		want        source.Reason
	}{
		{"leap unsynchronised", func(tr *chrony.Tracking) { tr.LeapStatus = 3 }, false, source.ReasonLeap},
		{"unknown leap", func(tr *chrony.Tracking) { tr.LeapStatus = 7 }, false, source.ReasonGarbage},
		{"own local clock", func(tr *chrony.Tracking) { tr.RefID = LocalRefID; tr.Stratum = 8 }, false, source.ReasonLocal},
		{"no reference", func(tr *chrony.Tracking) { tr.RefID = 0; tr.Stratum = 0 }, false, source.ReasonLeap},
		{"never updated", func(tr *chrony.Tracking) { tr.RefTime = time.Unix(0, 0) }, false, source.ReasonLeap},
		{"NaN dispersion", func(tr *chrony.Tracking) { tr.RootDispersion = math.NaN() }, false, source.ReasonGarbage},
		{"negative delay", func(tr *chrony.Tracking) { tr.RootDelay = -1 }, false, source.ReasonGarbage},
		{"infinite offset", func(tr *chrony.Tracking) { tr.CurrentCorrection = math.Inf(1) }, false, source.ReasonGarbage},
		{"ref time in the future", func(tr *chrony.Tracking) { tr.RefTime = readAt.Add(time.Hour) }, false, source.ReasonGarbage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := goodTracking()
			c.edit(tr)
			if _, err := Interpret(readAt, tr, c.acceptLocal); source.ReasonOf(err) != c.want {
				t.Fatalf("want %q, got %v", c.want, err)
			}
		})
	}
	t.Run("local clock accepted under --dev, never with uncertainty 0", func(t *testing.T) {
		tr := &chrony.Tracking{RefID: LocalRefID, Stratum: 8, RefTime: readAt.Add(-time.Hour)}
		s, err := Interpret(readAt, tr, true)
		if err != nil || s.Uncertainty <= 0 || s.Age != 0 {
			t.Fatalf("sample %+v err %v", s, err)
		}
	})
}

// A source that answers garbage or nothing is unhealthy, never a crash.
func TestGarbageAndSilentPeers(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("garbage!"), buf[:n%7]...), addr)
		}
	}()
	src, _ := New("udp", pc.LocalAddr().String(), false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := src.Poll(ctx); source.ReasonOf(err) != source.ReasonGarbage {
		t.Fatalf("garbage peer: want garbage, got %v", err)
	}
	pc.Close()
	<-done

	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	src, _ = New("udp", silent.LocalAddr().String(), false, nil)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := src.Poll(ctx2); source.ReasonOf(err) != source.ReasonUnreachable {
		t.Fatalf("silent peer: want unreachable, got %v", err)
	}
	src, _ = New("unix", "/nonexistent/chronyd.sock", false, nil)
	if _, err := src.Poll(context.Background()); source.ReasonOf(err) != source.ReasonUnreachable {
		t.Fatalf("missing socket: want unreachable, got %v", err)
	}
}

// SPEC §2.2 chrony against real chronyd -x instances: the client's
// tracking (over the Unix socket and over UDP) is a synced source; the
// server's own (refid 7F7F0101, its local clock) is refused.
func TestRealChronyd(t *testing.T) {
	cp := peertest.StartChronyPair(t)
	poll := func(network, addr string, acceptLocal bool) (source.Sample, error) {
		src, err := New(network, addr, acceptLocal, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return src.Poll(ctx)
	}
	for _, c := range []struct{ network, addr string }{
		{"unix", cp.ClientSocket},
		{"udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cp.ClientCmdPort))},
	} {
		s, err := poll(c.network, c.addr, false)
		if err != nil {
			t.Fatalf("%s %s: %v", c.network, c.addr, err)
		}
		// Both chronyds read the same host clock: the offset is tiny and
		// the bound honest but small.
		if s.Uncertainty <= 0 || s.Uncertainty > 2*time.Second || s.Offset.Abs() > 10*time.Millisecond || s.Age > 10*time.Second {
			t.Fatalf("%s: implausible sample %+v", c.network, s)
		}
		if s.Info["refid"] != "7F000001" {
			t.Fatalf("client refid %v, want 7F000001", s.Info["refid"])
		}
		t.Logf("%s: offset %v uncertainty %v age %v", c.network, s.Offset, s.Uncertainty, s.Age)
	}
	if _, err := poll("unix", cp.ServerSocket, false); source.ReasonOf(err) != source.ReasonLocal {
		t.Fatalf("server's own tracking: want local_clock, got %v", err)
	}
	if s, err := poll("unix", cp.ServerSocket, true); err != nil || s.Uncertainty <= 0 {
		t.Fatalf("server's local clock under --dev: %+v %v", s, err)
	}
}
