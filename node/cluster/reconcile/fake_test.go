package reconcile

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// manualClock is a Clock and a timer factory that only move when the test
// advances them.
type manualClock struct {
	created chan struct{} // one value per NewTimer
	mu      sync.Mutex
	now     time.Time
	timers  []*manualTimer
}

type manualTimer struct {
	c   chan time.Time
	at  time.Time
	off bool
}

func (t *manualTimer) C() <-chan time.Time { return t.c }
func (t *manualTimer) Stop() bool {
	was := !t.off
	t.off = true
	return was
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), created: make(chan struct{}, 1000)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: make(chan time.Time, 1), at: c.now.Add(d)}
	c.timers = append(c.timers, t)
	c.created <- struct{}{}
	return t
}

// Advance moves the clock and fires every timer now due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.off:
		case !t.at.After(c.now):
			t.off = true
			t.c <- c.now
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
}

// fakeRaft is RaftOps over a world: it applies each change with the
// world's preconditions and records a violation (a bad step, or a step
// that loses the quorum the configuration had) instead of applying it.
type fakeRaft struct {
	mu         sync.Mutex
	w          *world
	leader     string
	changes    []Change
	violations []error
	configs    int    // GetConfiguration calls
	failNext   error  // returned once by the next change
	lastIndex  uint64 // IndexReader
	progress   map[string]uint64
	autoCatch  bool          // members come back CaughtUp once they are non-voters
	changed    chan struct{} // signalled after each change
}

func newFakeRaft(w *world) *fakeRaft {
	return &fakeRaft{w: w, leader: w.leader, progress: map[string]uint64{}, changed: make(chan struct{}, 1000)}
}

func (f *fakeRaft) GetConfiguration() ([]Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.configs++
	return f.w.input().Config, nil
}

func (f *fakeRaft) do(c Change) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	had := f.w.quorum()
	before := map[string]Suffrage{}
	for k, v := range f.w.config {
		before[k] = v
	}
	if err := f.w.apply(c); err != nil {
		f.violations = append(f.violations, err)
		return err
	}
	if had && !f.w.quorum() {
		f.violations = append(f.violations, fmt.Errorf("%v loses quorum: %v → %v", c, before, f.w.config))
	}
	f.changes = append(f.changes, c)
	f.changed <- struct{}{}
	return nil
}

func (f *fakeRaft) AddNonvoter(id, addr string) error {
	return f.do(Change{Kind: AddNonvoter, ID: id, Address: addr})
}
func (f *fakeRaft) Promote(id, addr string) error {
	return f.do(Change{Kind: Promote, ID: id, Address: addr})
}
func (f *fakeRaft) Demote(id string) error { return f.do(Change{Kind: Demote, ID: id}) }
func (f *fakeRaft) Remove(id string) error { return f.do(Change{Kind: Remove, ID: id}) }

func (f *fakeRaft) LeaderID() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader
}

func (f *fakeRaft) LastIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastIndex
}

func (f *fakeRaft) Progress(id string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.progress[id]
	return i, ok
}

// Members is the gossip view; with autoCatch every non-voter is caught up.
func (f *fakeRaft) Members() []Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.autoCatch {
		f.w.catchUp()
	}
	return f.w.input().Members
}

func (f *fakeRaft) set(id string, fn func(*Member)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.w.members[id]
	fn(&m)
	f.w.members[id] = m
}

func (f *fakeRaft) snapshot() (changes []Change, violations []error, configs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Change(nil), f.changes...), append([]error(nil), f.violations...), f.configs
}

func (f *fakeRaft) roles() (v, s, c int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.roles()
}

var errInjected = errors.New("injected failure")
