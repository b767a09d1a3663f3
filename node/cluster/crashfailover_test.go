package cluster

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
	"github.com/tckclk/tckclk/node/consensus"
)

// SPEC §5 "Crash failover", the watch's decisions: only the end of the
// session to the followed leader starts it; the timeouts shorten once the
// leader has been silent crash_detect_ms plus the stagger, not before,
// and not when the leader was heard from again for a heartbeat timeout;
// they come back once a leader is known (another, or the same one heard
// from after the shortening, or this node), or after the bound.
func TestCrashWatchDecide(t *testing.T) {
	w := newCrashWatch(100, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	w.jitter = func(d time.Duration) time.Duration { return d / 2 } // stagger 25 ms
	if got := w.timing(consensus.ClusterTiming()); got != consensus.ClusterTiming() {
		t.Fatalf("crash failover changed the timing: %+v", got)
	}
	hb, el := 500*time.Millisecond, 500*time.Millisecond
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	follower := func(leader string, contactMs, nowMs int) crashView {
		return crashView{state: raft.Follower, leader: leader, lastContact: at(contactMs), now: at(nowMs)}
	}
	type want struct {
		hb, el time.Duration
		wake   time.Time
		short  bool
	}
	check := func(name string, s *crashState, v crashView, w0 want) {
		t.Helper()
		gh, ge, wake := w.decide(s, v)
		if gh != w0.hb || ge != w0.el || !wake.Equal(w0.wake) || s.short != w0.short {
			t.Errorf("%s: %v/%v wake %v short %v; want %v/%v wake %v short %v", name, gh, ge, wake.Sub(t0), s.short, w0.hb, w0.el, w0.wake.Sub(t0), w0.short)
		}
	}

	var s crashState
	w.ended(&s, "n3", follower("n2", -10, 0))
	if s.gone != "" {
		t.Fatal("the end of a session to a node it does not follow started the watch")
	}
	w.ended(&s, "n2", crashView{state: raft.Candidate, now: at(0)})
	if s.gone != "" {
		t.Fatal("a candidate started the watch")
	}
	w.ended(&s, "n2", follower("n2", -10, 0))
	check("silent 10 ms", &s, follower("n2", -10, 0), want{hb, el, at(115), false}) // -10 + 100 + 25
	check("silent 124 ms", &s, follower("n2", -10, 114), want{hb, el, at(115), false})
	check("silent 125 ms", &s, follower("n2", -10, 115), want{100 * time.Millisecond, 200 * time.Millisecond, at(215), true})
	check("still no leader", &s, crashView{state: raft.Candidate, now: at(200)}, want{100 * time.Millisecond, 200 * time.Millisecond, at(300), true})
	check("the old leader, not heard from since", &s, follower("n2", -10, 210), want{100 * time.Millisecond, 200 * time.Millisecond, at(310), true})
	check("a new leader", &s, follower("n3", 220, 220), want{hb, el, time.Time{}, false})
	if s != (crashState{}) {
		t.Fatalf("state after restoring: %+v", s)
	}

	// The same leader heard from again (a reconnect): the watch re-arms
	// on the new contact and ends after a heartbeat timeout.
	w.ended(&s, "n2", follower("n2", 990, 1000))
	check("heard from again", &s, follower("n2", 1040, 1050), want{hb, el, at(1165), false})
	check("the window ends", &s, follower("n2", 1480, 1500), want{hb, el, time.Time{}, false})
	if s.gone != "" {
		t.Fatal("the watch outlived its heartbeat timeout")
	}

	// Shortened, then the same leader heard from after the shortening.
	w.ended(&s, "n2", follower("n2", 1990, 2000))
	check("silent", &s, follower("n2", 1990, 2120), want{100 * time.Millisecond, 200 * time.Millisecond, at(2220), true})
	check("the leader answers again", &s, follower("n2", 2130, 2130), want{hb, el, time.Time{}, false})

	// Shortened, no leader for the bound: restored anyway.
	w.ended(&s, "n2", follower("n2", 2990, 3000))
	check("silent", &s, follower("n2", 2990, 3200), want{100 * time.Millisecond, 200 * time.Millisecond, at(3300), true})
	check("near the bound", &s, crashView{state: raft.Candidate, now: at(8150)}, want{100 * time.Millisecond, 200 * time.Millisecond, at(8200), true})
	check("the bound", &s, crashView{state: raft.Candidate, now: at(8200)}, want{hb, el, time.Time{}, false})

	// Shortened, then this node is elected.
	w.ended(&s, "n2", follower("n2", 8990, 9000))
	check("silent", &s, follower("n2", 8990, 9200), want{100 * time.Millisecond, 200 * time.Millisecond, at(9300), true})
	check("elected", &s, crashView{state: raft.Leader, leader: "n1", now: at(9300)}, want{hb, el, time.Time{}, false})

	for name, c := range map[string]float64{"shortened": 4, "leader_alive": 1, "moved_on": 0} {
		if got := counterOf(t, w, name); got != c {
			t.Errorf("raft_crash_detect_total{outcome=%q} = %v, want %v", name, got, c)
		}
	}

	slow := newCrashWatch(100, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	tm := consensus.ClusterTiming()
	tm.Heartbeat = 80 * time.Millisecond
	if slow.timing(tm); slow.detect != 0 {
		t.Fatal("crash_detect_ms not below the heartbeat timeout left the watch on")
	}
}

func counterOf(t *testing.T, w *crashWatch, outcome string) float64 {
	t.Helper()
	var m dto.Metric
	if err := w.outcome.WithLabelValues(outcome).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
