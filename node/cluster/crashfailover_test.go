package cluster

import (
	"cmp"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
	"github.com/tckclk/tckclk/node/consensus"
)

// SPEC §5 "Crash failover", the watch's decisions: only the end of the
// session to the followed leader starts it; the timeouts shorten once the
// leader has been silent crash_detect_ms and this node's turn has come
// (the first survivor's at once), not before, and not when the leader
// was heard from again for a heartbeat timeout; they come back once a
// leader is known (another, or the same one heard from after the
// shortening, or this node), or after the bound.
func TestCrashWatchDecide(t *testing.T) {
	w := newCrashWatch(100, "n1", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if got := w.timing(consensus.ClusterTiming()); got != consensus.ClusterTiming() {
		t.Fatalf("crash failover changed the timing: %+v", got)
	}
	hb, el := 500*time.Millisecond, 500*time.Millisecond
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	follower := func(leader string, contactMs, nowMs int) crashView {
		return crashView{state: raft.Follower, leader: leader, lastContact: at(contactMs), now: at(nowMs), voters: []string{"n3", "n2", "n1"}}
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
	if s.rank != 0 || s.need != 1 {
		t.Fatalf("n1 of n1..n3 after n2's end: rank %d need %d, want the first survivor, needing 1", s.rank, s.need)
	}
	check("silent 10 ms", &s, follower("n2", -10, 0), want{hb, el, at(90), false}) // -10 + 100
	check("silent 99 ms", &s, follower("n2", -10, 89), want{hb, el, at(90), false})
	check("silent 100 ms", &s, follower("n2", -10, 90), want{100 * time.Millisecond, 200 * time.Millisecond, at(190), true})
	check("still no leader", &s, crashView{state: raft.Candidate, now: at(200)}, want{100 * time.Millisecond, 200 * time.Millisecond, at(300), true})
	check("the old leader, not heard from since", &s, follower("n2", -10, 210), want{100 * time.Millisecond, 200 * time.Millisecond, at(310), true})
	check("a new leader", &s, follower("n3", 220, 220), want{hb, el, time.Time{}, false})
	if !reflect.DeepEqual(s, crashState{}) {
		t.Fatalf("state after restoring: %+v", s)
	}

	// The same leader heard from again (a reconnect): the watch re-arms
	// on the new contact and ends after a heartbeat timeout.
	w.ended(&s, "n2", follower("n2", 990, 1000))
	check("heard from again", &s, follower("n2", 1040, 1050), want{hb, el, at(1140), false})
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

	slow := newCrashWatch(100, "n1", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	tm := consensus.ClusterTiming()
	tm.Heartbeat = 80 * time.Millisecond
	if slow.timing(tm); slow.detect != 0 {
		t.Fatal("crash_detect_ms not below the heartbeat timeout left the watch on")
	}
}

// SPEC §5 "Crash failover", the survivors' turns: the first survivor
// (by NodeId) stands once the leader has been silent crash_detect_ms; the
// one completing a quorum of candidates stands as soon as those ranked
// before it asked it for a pre-vote (and it heard nothing of the leader
// for crash_detect_ms itself), else at crash_detect_ms plus its rank
// times crash_detect_ms/2 after its session ended, as every other
// survivor does; a pre-vote asked before this failure does not count.
func TestCrashWatchTurns(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	short := 100 * time.Millisecond
	// turn watches self's session to n1 end at 0 (the leader last heard at
	// contact, this node in term 2) with voters, asked for pre-votes as
	// given (peer: ms) for term, and returns when self shortens: the first
	// whole ms at which it does.
	turn := func(self string, voters []string, contact int, asked map[string]int, term uint64) (int, *crashState) {
		t.Helper()
		w := newCrashWatch(100, self, quiet, nil)
		w.timing(consensus.ClusterTiming())
		v := crashView{state: raft.Follower, leader: "n1", lastContact: at(contact), term: 2, voters: voters, asked: map[string]preVote{}}
		arrive := func(ms int) { // the pre-votes asked by ms (a negative ms: for this term)
			for p, a := range asked {
				if a <= ms {
					v.asked[p] = preVote{at(a), term}
				}
			}
		}
		var s crashState
		v.now = at(0)
		arrive(0)
		w.ended(&s, "n1", v)
		for ms := 0; ms < 500; ms++ {
			v.now = at(ms)
			arrive(ms)
			if hb, _, _ := w.decide(&s, v); hb == short {
				return ms, &s
			}
		}
		return -1, &s
	}
	three := []string{"n1", "n2", "n3"}
	for _, c := range []struct {
		name   string
		self   string
		voters []string
		asked  map[string]int
		want   int
		term   uint64 // of the pre-votes (0: 3)
	}{
		{"first of three", "n2", three, nil, 90, 0},
		{"second of three, not asked", "n3", three, nil, 150, 0},
		{"second of three, asked at 30", "n3", three, map[string]int{"n2": 30}, 90, 0}, // its own silence first
		{"second of three, asked at 120", "n3", three, map[string]int{"n2": 120}, 120, 0},
		{"second of three, asked before this failure", "n3", three, map[string]int{"n2": -1}, 150, 0},
		{"second of three, asked for this term", "n3", three, map[string]int{"n2": 20}, 150, 2},
		{"second of three, asked by a non-survivor", "n3", three, map[string]int{"n1": 20}, 150, 0},
		{"second of five, asked", "n3", []string{"n5", "n4", "n3", "n2", "n1"}, map[string]int{"n2": 20}, 150, 0},
		{"third of five, asked by one", "n4", []string{"n1", "n2", "n3", "n4", "n5"}, map[string]int{"n2": 20}, 200, 0},
		{"third of five, asked by both before it", "n4", []string{"n1", "n2", "n3", "n4", "n5"}, map[string]int{"n2": 20, "n3": 160}, 160, 0},
		{"fourth of five, asked by all before it", "n5", []string{"n1", "n2", "n3", "n4", "n5"}, map[string]int{"n2": 20, "n3": 30, "n4": 40}, 250, 0},
		{"not a voter", "n9", three, map[string]int{"n2": 20, "n3": 20}, 200, 0},
	} {
		if got, s := turn(c.self, c.voters, -10, c.asked, cmp.Or(c.term, 3)); got != c.want {
			t.Errorf("%s: shortened at %d ms, want %d (rank %d, before %v, need %d)", c.name, got, c.want, s.rank, s.before, s.need)
		}
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
