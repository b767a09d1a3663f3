package cluster

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tckclk/tckclk/node/consensus"
)

// crashWatch is SPEC §5 "Crash failover". When a process dies its kernel
// ends every connection it held at once, so each follower's mesh session
// to a dead leader ends with an EOF or a reset within a millisecond of
// the crash (mesh.Config.SessionEnded). A follower whose session to the
// leader it follows ended that way watches the leader's silence for one
// heartbeat timeout: as soon as no contact has come for
// raft.crash_detect_ms and its turn has come (below), it shortens Raft's
// heartbeat timeout to crash_detect_ms (and its election timeout to twice that,
// shortElection), which wakes Raft's follower loop:
// it finds the leader silent past the new timeout and stands for election
// at once instead of after the heartbeat timeout. Once a leader is known
// again (another one, this node, or the same one heard from again) the
// timeouts go back.
//
// Why it cannot disturb a live leader: the election starts with a
// pre-vote (hashicorp/raft's default), which a voter refuses while it
// still follows a leader, and a pre-vote changes no term. A session that
// broke while the leader lives (a reconnect, a one-way cut) costs at most
// this follower's pre-vote; only when a majority of the voters has lost
// the leader can a real election follow. A partition or a lost machine ends no session
// (no EOF, no reset): it still waits the heartbeat timeout.
//
// The turns. A candidate's pre-vote is refused by a voter that still
// follows the leader, so a pre-vote is won only once a quorum but the
// candidate has stood already (a candidate knows no leader); and two
// survivors that stand within the time a pre-vote takes to arrive both
// win theirs and split the real vote, then both wait an election timeout
// and, on a loaded machine whose fsync stalls hold both alike, often
// split again (a random stagger of up to crash_detect_ms/2 split 3 of 20
// bench kill -9 trials at load 6, one three times over: 1.3 s). So the
// survivors (the voters but the leader, ranked by NodeId) take turns
// (turnAt): the first stands as soon as the leader has been silent for
// crash_detect_ms; the one whose candidacy completes a quorum (of three
// voters, the second) stands as soon as every survivor ranked before it
// has asked it for a pre-vote for a later term since its session ended
// (they stood, and this node refused them: they lost their pre-votes and
// wait an election timeout, nobody else asks) and the leader has been
// silent for crash_detect_ms here too; every other one, or that one when
// the requests do not come, at crash_detect_ms plus its rank times
// crash_detect_ms/2 after its session ended. A turn only ever comes on
// top of the conditions above (its own session to the leader ended from
// the leader's side, the leader silent for crash_detect_ms): the
// argument for a live leader is unchanged.
//
// The election timeout is shortened too, so a candidate refused by a
// follower that still had the leader, or a split, tries again within
// twice crash_detect_ms instead of the election timeout; not to
// crash_detect_ms itself: a vote is written to disk by both ends before
// it counts, and on a loaded machine that took longer than 100 ms often
// enough to restart elections again and again (TestCrashFailoverKilledLeader
// once took 1.4 s so).
//
// The leader lease stays as it is: hashicorp/raft's ReloadConfig refuses
// a heartbeat timeout below it, and a lease of crash_detect_ms made
// leaders step down at every stall of a loaded machine (6 step-downs in
// 90 s at load 21, none at the 250 ms lease); consensus.SetTimeouts sets
// the follower's timeouts below it.
type crashWatch struct {
	detect  time.Duration // raft.crash_detect_ms; 0: off
	log     *slog.Logger
	ends    chan string // peers whose mesh session ended from their side
	outcome *prometheus.CounterVec

	normal consensus.Timing // the timeouts to restore (timing)
	self   string           // this node's NodeId
}

// crashState is the watch's state between events.
type crashState struct {
	gone  string    // the leader whose session ended ("": none watched)
	endAt time.Time // when it ended
	// This node's turn: its rank among the voters but gone (by NodeId),
	// those ranked before it, and how many pre-votes of others a
	// candidate needs (a quorum of the voters but itself).
	rank    int
	before  []string
	need    int
	short   bool // the timeouts are shortened
	shortAt time.Time
}

// crashView is Raft as the watch sees it at one instant.
type crashView struct {
	state       raft.RaftState
	leader      string
	lastContact time.Time
	now         time.Time
	term        uint64
	voters      []string           // the configuration's voters (ended)
	asked       map[string]preVote // each peer's last request for this node's pre-vote
}

// preVote is a pre-vote request as the watch saw it: when, for which term.
type preVote struct {
	at   time.Time
	term uint64
}

func newCrashWatch(detectMs uint64, self string, log *slog.Logger, reg prometheus.Registerer) *crashWatch {
	w := &crashWatch{detect: time.Duration(detectMs) * time.Millisecond, log: log, ends: make(chan string, 16), self: self}
	w.outcome = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raft_crash_detect_total",
		Help: "Mesh sessions to the followed leader that ended from its side, by outcome: shortened (the leader stayed silent for raft.crash_detect_ms: the election started early), leader_alive (it was heard from for a heartbeat timeout), moved_on (Raft changed leader or state first)."},
		[]string{"outcome"})
	if reg != nil && w.detect > 0 {
		reg.MustRegister(w.outcome)
	}
	return w
}

// timing records Raft's timing as the one to restore and returns it. A
// crash_detect_ms not below the heartbeat timeout would change nothing:
// the watch is off then (the config refuses it; only test timings reach
// this).
func (w *crashWatch) timing(t consensus.Timing) consensus.Timing {
	w.normal = t
	if w.detect >= t.Heartbeat {
		w.detect = 0
	}
	return t
}

// sessionEnded is mesh.Config.SessionEnded: it must not block.
func (w *crashWatch) sessionEnded(peer string, peerGone bool) {
	if !peerGone || w.detect == 0 {
		return
	}
	select {
	case w.ends <- peer:
	default: // a burst of ends: the watch looks at Raft itself on the next one
	}
}

// shortElection is the election timeout while shortened (see crashWatch).
func (w *crashWatch) shortElection() time.Duration {
	return min(2*w.detect, max(w.normal.Election, w.detect))
}

// restoreAfter bounds a shortened period without a known leader (a
// cluster without quorum elects on the normal timeouts).
func (w *crashWatch) restoreAfter() time.Duration { return 10 * w.normal.Heartbeat }

// ended starts watching when peer is the leader this follower follows.
func (w *crashWatch) ended(s *crashState, peer string, v crashView) {
	if s.gone != "" || s.short || v.state != raft.Follower || v.leader != peer {
		return
	}
	survivors := slices.DeleteFunc(slices.Sorted(slices.Values(v.voters)), func(id string) bool { return id == peer })
	rank := slices.Index(survivors, w.self)
	if rank < 0 {
		rank = len(survivors) // not a voter: it does not stand
	}
	*s = crashState{gone: peer, endAt: v.now, rank: rank, before: survivors[:rank], need: len(v.voters) / 2}
}

// turnAt is when this node's turn to stand comes (see crashWatch): at
// once for the first survivor and for the one completing a quorum once
// those before it asked for their pre-votes (since this failure: after
// its session ended, for a term beyond this node's), else
// crash_detect_ms plus its rank times crash_detect_ms/2 after the end.
func (w *crashWatch) turnAt(s *crashState, v crashView) time.Time {
	if s.rank == 0 {
		return time.Time{}
	}
	if s.rank == s.need && !slices.ContainsFunc(s.before, func(id string) bool {
		pv, ok := v.asked[id]
		return !ok || pv.at.Before(s.endAt) || pv.term <= v.term
	}) {
		return time.Time{}
	}
	return s.endAt.Add(w.detect + time.Duration(s.rank)*w.detect/2)
}

// decide moves s on to v and returns the timeouts Raft should have now
// and when to look again without an event (zero: only on an event).
func (w *crashWatch) decide(s *crashState, v crashView) (heartbeat, election time.Duration, wake time.Time) {
	if s.short {
		known := v.state == raft.Leader || v.leader != "" && (v.leader != s.gone || v.lastContact.After(s.shortAt))
		if bound := s.shortAt.Add(w.restoreAfter()); !known && v.now.Before(bound) {
			// Look again within crash_detect_ms: the same leader heard
			// from again changes neither state nor leader (no event).
			return w.detect, w.shortElection(), minTime(v.now.Add(w.detect), bound)
		}
		w.log.Info("crash failover: a leader is known again; heartbeat timeout restored", "leader", v.leader,
			"state", v.state.String(), "after_ms", v.now.Sub(s.endAt).Milliseconds(), "known", known)
		*s = crashState{}
	}
	if s.gone != "" {
		turn := w.turnAt(s, v)
		due := maxTime(v.lastContact.Add(w.detect), turn)
		switch end := s.endAt.Add(w.normal.Heartbeat); {
		case v.state != raft.Follower || v.leader != s.gone:
			w.outcome.WithLabelValues("moved_on").Inc()
			*s = crashState{}
		case !v.now.Before(due):
			w.outcome.WithLabelValues("shortened").Inc()
			w.log.Info("crash failover: the mesh session to the leader ended and it stayed silent: heartbeat timeout shortened to raft.crash_detect_ms",
				"leader", s.gone, "silent_ms", v.now.Sub(v.lastContact).Milliseconds(), "crash_detect_ms", w.detect.Milliseconds(),
				"rank", s.rank, "turn", turnWhy(s, turn))
			s.short, s.shortAt = true, v.now
			return w.detect, w.shortElection(), v.now.Add(w.detect)
		case !v.now.Before(end):
			w.outcome.WithLabelValues("leader_alive").Inc()
			*s = crashState{}
		default:
			return w.normal.Heartbeat, w.normal.Election, minTime(due, end)
		}
	}
	return w.normal.Heartbeat, w.normal.Election, time.Time{}
}

// turnWhy names what made this node's turn come (the log's): first
// survivor, asked (the pre-votes of those before it) or rank (its time).
func turnWhy(s *crashState, turn time.Time) string {
	switch {
	case s.rank == 0:
		return "first"
	case turn.IsZero():
		return "asked"
	}
	return "rank"
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// run drives the watch until ctx ends: on every session end, leadership
// or state change and timer, it decides and applies the timeouts.
func (w *crashWatch) run(ctx context.Context, cons *consensus.Raft) {
	r := cons.Raft()
	if w.detect == 0 || r == nil {
		return
	}
	obs := make(chan raft.Observation, 16)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation, raft.RequestPreVoteRequest:
			return true
		}
		return false
	})
	r.RegisterObserver(o)
	defer r.DeregisterObserver(o)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	asked := map[string]preVote{}
	view := func() crashView {
		_, id := r.LeaderWithID()
		return crashView{state: r.State(), leader: string(id), lastContact: r.LastContact(), now: time.Now(),
			term: r.CurrentTerm(), asked: asked}
	}
	var s crashState
	for {
		v := view()
		hb, el, wake := w.decide(&s, v)
		if cur, curEl := cons.Timeouts(); (cur != hb || curEl != el) && v.state != raft.Shutdown {
			if err := cons.SetTimeouts(hb, el); err != nil {
				w.log.Warn("crash failover: setting Raft's timeouts", "err", err)
			}
		}
		timer.Stop()
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
		}
		select {
		case <-ctx.Done():
			return
		case peer := <-w.ends:
			v := view()
			if f := r.GetConfiguration(); f.Error() == nil {
				for _, srv := range f.Configuration().Servers {
					if srv.Suffrage == raft.Voter {
						v.voters = append(v.voters, string(srv.ID))
					}
				}
			}
			w.ended(&s, peer, v)
		case o := <-obs:
			if req, ok := o.Data.(raft.RequestPreVoteRequest); ok {
				asked[string(req.ID)] = preVote{time.Now(), req.Term}
			}
		case <-timer.C:
		}
	}
}
