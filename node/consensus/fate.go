package consensus

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/ticket"
)

// A leader that loses its leadership with entries in flight (a hand-off
// at a graceful stop, a transfer, a step-down) answers their proposers
// raft.ErrLeadershipLost: each entry may still commit under the next
// leader, or be replaced there. Rather than answer an unknown outcome,
// the proposer waits, bounded and only while Raft runs, until this node
// has applied the entry's index under the next leader — as etcd's
// proposer waits on the apply of its request id. The entry is known by
// its index and term (Raft's log matching property: one entry per index
// and term): the same term applied there means it is ours, and its
// result is the FSM's answer; another term, or no command at all at that
// index, means it was replaced and nothing of it was applied — a
// definite refusal (ErrNotLeader), which a client may repeat elsewhere.
// When the bound, the caller's context or Raft's shutdown comes first,
// the outcome stays unknown.

// fateWait bounds that wait: well under a proposal's own bound (the
// node's proposeWait), long enough for the next leader's election and
// first commit after a hand-off.
const fateWait = 2 * time.Second

// errReplaced: the entry at the proposer's index was replaced under
// another leader (matches ErrNotLeader: nothing of it was applied).
var errReplaced = fmt.Errorf("%w: leadership was lost and the entry was replaced under the next leader (nothing of it was applied)", ErrNotLeader)

// FateCounts says how the proposals that lost their leadership in flight
// ended (metrics and tests).
type FateCounts struct {
	Applied  uint64 // applied under the next leader: the FSM's answer
	Replaced uint64 // replaced under the next leader: ErrNotLeader
	Unknown  uint64 // no fate within the bound, the context or Raft's run
}

type fateCounters struct{ applied, replaced, unknown atomic.Uint64 }

// Fates returns the counts so far.
func (p *Raft) Fates() FateCounts {
	return FateCounts{Applied: p.fateN.applied.Load(), Replaced: p.fateN.replaced.Load(), Unknown: p.fateN.unknown.Load()}
}

// awaitFate is ProposeWithin's answer for a future that ended with
// raft.ErrLeadershipLost (lost: the mapped error, an unknown outcome).
func (p *Raft) awaitFate(ctx context.Context, f raft.ApplyFuture, lost error) (ticket.Result, error) {
	index := f.Index()
	term, ok := entryTerm(f)
	if index == 0 || !ok || !p.fating.enter(&p.wmu, &p.closing) {
		p.fateN.unknown.Add(1)
		return ticket.Result{}, lost
	}
	defer p.fating.leave()
	bound := p.fateBoundOr()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		fate, wake := p.fsm.FateOf(index)
		switch fate.Kind {
		case ticket.FateApplied:
			if fate.Term == term {
				p.fateN.applied.Add(1)
				return fate.Result, nil
			}
			p.fateN.replaced.Add(1)
			return ticket.Result{}, fmt.Errorf("%w (index %d: term %d applied, the entry's was %d)", errReplaced, index, fate.Term, term)
		case ticket.FateNoCommand:
			p.fateN.replaced.Add(1)
			return ticket.Result{}, fmt.Errorf("%w (index %d holds no command)", errReplaced, index)
		case ticket.FateForgotten:
			p.fateN.unknown.Add(1)
			return ticket.Result{}, fmt.Errorf("%w (index %d: this node no longer knows what it applied there)", lost, index)
		}
		var err error
		select {
		case <-wake:
			continue
		case <-timer.C:
			err = fmt.Errorf("%w (index %d not applied here within %v)", lost, index, bound)
		case <-ctx.Done():
			err = fmt.Errorf("%w (%v while index %d was awaited)", lost, ctx.Err(), index)
		case <-p.down:
			err = fmt.Errorf("%w (%w while index %d was awaited)", lost, ErrShutdown, index)
		}
		p.fateN.unknown.Add(1)
		return ticket.Result{}, err
	}
}

func (p *Raft) fateBoundOr() time.Duration {
	if p.fateBound > 0 {
		return p.fateBound
	}
	return fateWait
}

// entryTerm reads the term Raft gave the entry of f when its leader
// appended it (hashicorp/raft v1.7.3: dispatchLogs sets logFuture.log's
// Index and Term together, before the future can be answered; the
// ApplyFuture interface offers only the index). false when f is not of
// that shape (an errorFuture, another raft version: then the outcome
// stays unknown; TestEntryTermOfAFuture).
func entryTerm(f raft.ApplyFuture) (uint64, bool) {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	idx, ok := logField(v.Elem().Type())
	if !ok {
		return 0, false
	}
	l := v.Elem().FieldByIndex(idx)
	if l.FieldByName("Index").Uint() != f.Index() {
		return 0, false
	}
	term := l.FieldByName("Term").Uint()
	return term, term != 0
}

// logFields caches, per future type, the index of its raft.Log field
// named log (nil: none).
var logFields sync.Map // reflect.Type → []int

func logField(t reflect.Type) ([]int, bool) {
	if idx, ok := logFields.Load(t); ok {
		return idx.([]int), idx.([]int) != nil
	}
	var idx []int
	if sf, ok := t.FieldByName("log"); ok && sf.Type == reflect.TypeOf(raft.Log{}) {
		idx = sf.Index
	}
	logFields.Store(t, idx)
	return idx, idx != nil
}

// gauge counts calls in progress; one may wait, bounded, until none is.
type gauge struct {
	n    atomic.Int64
	mu   sync.Mutex
	idle chan struct{} // closed when n drops to 0 while someone waits
	seen atomic.Bool   // someone has waited: leave must look at idle
}

// enter counts one more call unless *closing (under mu) is set.
func (g *gauge) enter(mu *sync.Mutex, closing *bool) bool {
	mu.Lock()
	defer mu.Unlock()
	if *closing {
		return false
	}
	g.n.Add(1)
	return true
}

func (g *gauge) add() { g.n.Add(1) }

func (g *gauge) leave() {
	if g.n.Add(-1) == 0 && g.seen.Load() {
		g.mu.Lock()
		if g.idle != nil {
			close(g.idle)
			g.idle = nil
		}
		g.mu.Unlock()
	}
}

// wait waits until no call is in progress, at most d: whether none is.
func (g *gauge) wait(d time.Duration) bool {
	g.mu.Lock()
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.seen.Store(true)
	g.mu.Unlock()
	if g.n.Load() == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return g.n.Load() == 0
	}
}

// Settle waits, at most d, until no proposal is in flight on this node —
// none waiting for Raft's answer or for its entry's fate (awaitFate) —
// and reports whether none is. A node stopping gracefully calls it after
// handing its leadership off and before it stops serving forwarded
// requests, so that the proposals the hand-off ended learn their fate
// while Raft still runs.
func (p *Raft) Settle(d time.Duration) bool { return p.proposing.wait(d) }

// FateWait is the bound of one proposal's wait for its entry's fate.
const FateWait = fateWait
