package ntp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/beevik/ntp"
	"go.uber.org/goleak"

	"github.com/tckclk/tckclk/agent/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

func TestIntersect(t *testing.T) {
	cases := []struct {
		name      string
		off, bnd  []time.Duration
		ok        bool
		lo, hi    time.Duration
		f         int
		truechims []int
	}{
		{"one server", []time.Duration{5 * ms}, []time.Duration{2 * ms}, true, 3 * ms, 7 * ms, 0, []int{0}},
		{"all agree", []time.Duration{0, 1 * ms, 2 * ms}, []time.Duration{2 * ms, 2 * ms, 2 * ms}, true, 0, 2 * ms, 0, []int{0, 1, 2}},
		// SPEC §2.2: one server 5 s off is a falseticker.
		{"falseticker", []time.Duration{0, 500 * time.Microsecond, 5 * time.Second}, []time.Duration{1 * ms, 1 * ms, 1 * ms}, true, -500 * time.Microsecond, 1 * ms, 1, []int{0, 1}},
		{"two disagree", []time.Duration{0, 10 * ms}, []time.Duration{1 * ms, 1 * ms}, false, 0, 0, 0, nil},
		{"touching intervals overlap", []time.Duration{0, 2 * ms}, []time.Duration{1 * ms, 1 * ms}, true, 1 * ms, 1 * ms, 0, []int{0, 1}},
		{"three disjoint", []time.Duration{0, 10 * ms, 20 * ms}, []time.Duration{1 * ms, 1 * ms, 1 * ms}, false, 0, 0, 0, nil},
		{"two of five lie", []time.Duration{0, 1 * ms, -1 * ms, 900 * ms, -900 * ms}, []time.Duration{2 * ms, 2 * ms, 2 * ms, 1 * ms, 1 * ms}, true, -1 * ms, 1 * ms, 2, []int{0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := Intersect(c.off, c.bnd)
			if x.OK != c.ok {
				t.Fatalf("ok %v, want %v (%+v)", x.OK, c.ok, x)
			}
			if !c.ok {
				return
			}
			if x.Lo != c.lo || x.Hi != c.hi || x.F != c.f || len(x.Truechimers) != len(c.truechims) {
				t.Fatalf("got %+v, want [%v, %v] f=%d truechimers %v", x, c.lo, c.hi, c.f, c.truechims)
			}
			for i := range c.truechims {
				if x.Truechimers[i] != c.truechims[i] {
					t.Fatalf("truechimers %v, want %v", x.Truechimers, c.truechims)
				}
			}
		})
	}
}

var at = time.Unix(1_800_000_000, 0)

func m(server string, off, bnd time.Duration) Measurement {
	return Measurement{Server: server, Offset: off, Bound: bnd, At: at, Stratum: 2}
}

func unreach(server string) Measurement {
	return Measurement{Server: server, Err: source.Errorf("ntp", source.ReasonUnreachable, "%s: timeout", server)}
}

// SPEC §2.2 ntp: falsetickers dropped, a minimum of truechimers required.
func TestSelect(t *testing.T) {
	t.Run("falseticker dropped, best truechimer answers", func(t *testing.T) {
		s, err := Select([]Measurement{m("a", 1*ms, 3*ms), m("b", 2*ms, 2*ms), m("f", 5*time.Second, 1*ms)}, 2)
		if err != nil {
			t.Fatal(err)
		}
		// b has the smallest bound among truechimers; widened to cover [l,u] = [0, 4ms].
		if s.Offset != 2*ms || s.Uncertainty != 2*ms {
			t.Fatalf("sample %+v", s)
		}
		if s.Info["truechimers"] != 2 || s.Info["selected"] != "b" {
			t.Fatalf("info %+v", s.Info)
		}
	})
	t.Run("bound widened to the intersection", func(t *testing.T) {
		// a: [-1, 1] ms, b: [0.5, 10.5] ms → [l,u] = [0.5, 1] ms; a is best
		// (bound 1 ms) and already covers it; c, far, also overlaps b only.
		s, err := Select([]Measurement{m("a", 0, 1*ms), m("b", 5500*time.Microsecond, 5*ms)}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if s.Offset != 0 || s.Uncertainty != 1*ms {
			t.Fatalf("sample %+v", s)
		}
	})
	t.Run("too few truechimers", func(t *testing.T) {
		_, err := Select([]Measurement{m("a", 0, 1*ms), m("b", 10*ms, 1*ms)}, 1)
		if source.ReasonOf(err) != source.ReasonTruechimers {
			t.Fatalf("want truechimers, got %v", err)
		}
	})
	t.Run("min truechimers not met", func(t *testing.T) {
		_, err := Select([]Measurement{m("a", 0, 1*ms), m("b", 0, 1*ms), m("f", 9*time.Second, 1*ms)}, 3)
		if source.ReasonOf(err) != source.ReasonTruechimers {
			t.Fatalf("want truechimers, got %v", err)
		}
	})
	t.Run("short because unreachable", func(t *testing.T) {
		_, err := Select([]Measurement{m("a", 0, 1*ms), unreach("b"), unreach("c")}, 2)
		if source.ReasonOf(err) != source.ReasonUnreachable {
			t.Fatalf("want unreachable, got %v", err)
		}
	})
	t.Run("all unreachable", func(t *testing.T) {
		_, err := Select([]Measurement{unreach("a"), unreach("b")}, 1)
		if source.ReasonOf(err) != source.ReasonUnreachable {
			t.Fatalf("want unreachable, got %v", err)
		}
	})
	t.Run("one good of one", func(t *testing.T) {
		s, err := Select([]Measurement{m("a", -3*ms, 4*ms)}, 1)
		if err != nil || s.Offset != -3*ms || s.Uncertainty != 4*ms || !s.At.Equal(at) {
			t.Fatalf("sample %+v err %v", s, err)
		}
	})
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func goodResp() *ntp.Response {
	ref := at.Add(-10 * time.Second)
	return &ntp.Response{ClockOffset: 2 * ms, RTT: 1 * ms, Stratum: 3, RootDelay: 4 * ms, RootDispersion: 1 * ms,
		RootDistance: 3500 * time.Microsecond, Precision: time.Microsecond, ReferenceTime: ref, Time: at, Version: 4}
}

type fixedClock struct{}

func (fixedClock) Now() time.Time { return at }

// Each server's answer is checked (SPEC §2.2: stratum, leap, root distance, RTT).
func TestMeasure(t *testing.T) {
	cfg := Config{Servers: []string{"s:123"}, MinTruechimers: 1, Timeout: time.Second, MaxRTT: 100 * ms, MaxRootDistance: 50 * ms, MaxStratum: 15}
	cases := []struct {
		name  string
		edit  func(*ntp.Response)
		err   error
		want  source.Reason
		bound time.Duration
	}{
		{"good", func(*ntp.Response) {}, nil, "", 3500*time.Microsecond + time.Microsecond},
		{"leap unsynchronised", func(r *ntp.Response) { r.Leap = ntp.LeapNotInSync }, nil, source.ReasonLeap, 0},
		{"kiss of death", func(r *ntp.Response) { r.Stratum = 0 }, nil, source.ReasonQuality, 0},
		{"stratum 16", func(r *ntp.Response) { r.Stratum = 16 }, nil, source.ReasonQuality, 0},
		{"rtt too long", func(r *ntp.Response) { r.RTT = 200 * ms }, nil, source.ReasonQuality, 0},
		{"root distance too long", func(r *ntp.Response) { r.RootDistance = 60 * ms }, nil, source.ReasonQuality, 0},
		{"negative dispersion", func(r *ntp.Response) { r.RootDispersion = -1 }, nil, source.ReasonGarbage, 0},
		{"timeout", nil, timeoutErr{}, source.ReasonUnreachable, 0},
		{"malformed", nil, errors.New("invalid mode in response"), source.ReasonGarbage, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := func(string, ntp.QueryOptions) (*ntp.Response, error) {
				if c.err != nil {
					return nil, c.err
				}
				r := goodResp()
				c.edit(r)
				return r, nil
			}
			s, err := New(cfg, fixedClock{}, q).Poll(context.Background())
			if c.want == "" {
				if err != nil || s.Uncertainty != c.bound || s.Offset != 2*ms {
					t.Fatalf("sample %+v err %v, want bound %v", s, err, c.bound)
				}
				return
			}
			if source.ReasonOf(err) != c.want {
				t.Fatalf("want %q, got %v", c.want, err)
			}
		})
	}
}
