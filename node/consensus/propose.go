package consensus

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/ticket"
)

// Errors of Propose, Barrier and VerifyLeader (errors.Is).
var (
	// ErrNotLeader: this node is not (or no longer) the leader; nothing
	// was committed by this call.
	ErrNotLeader = errors.New("consensus: not the leader")
	// ErrShutdown: Raft is shutting down. From Propose, Await and
	// Barrier it also matches ErrUnknownOutcome: an entry in flight at
	// shutdown may have committed.
	ErrShutdown = errors.New("consensus: raft is shut down")
	// ErrUnknownOutcome: the entry was in flight when the caller's context
	// ended or this leader was deposed; it may still commit.
	ErrUnknownOutcome = errors.New("consensus: outcome unknown (the request ended while the entry was in flight)")
)

// defaultWait bounds a wait whose context has no deadline.
const defaultWait = 10 * time.Second

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrLeadershipLost):
		// Deposed with the entry in flight: the new leader may still
		// commit it (hashicorp/raft's own doc), so this is not a refusal.
		return fmt.Errorf("%w: leadership was lost with the entry in flight, it may still commit: %w", ErrUnknownOutcome, err)
	case errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrNotVoter):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %v", ErrShutdown, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("consensus: raft did not take the entry in time: %w", err)
	}
	return fmt.Errorf("consensus: %w", err)
}

// wait waits for f under ctx (and a default bound without a deadline). The
// goroutine that reads the future is counted in p.waiters; it ends when
// Raft answers, or at the latest when Raft's shutdown has ended
// (endsAtShutdown), so Close never waits on it long.
func (p *Raft) wait(ctx context.Context, f raft.Future) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultWait)
		defer cancel()
	}
	done := make(chan error, 1)
	p.wmu.Lock()
	if p.closing {
		p.wmu.Unlock()
		return fmt.Errorf("%w (%w: closing with the entry in flight)", ErrShutdown, ErrUnknownOutcome)
	}
	p.waiters.Add(1)
	p.wmu.Unlock()
	go func() {
		defer p.waiters.Done()
		done <- endsAtShutdown(f, p.shut).Error()
	}()
	select {
	case err := <-done:
		if errors.Is(err, raft.ErrRaftShutdown) {
			// Raft answers a committed entry it has not applied this
			// way too, and so does endsAtShutdown.
			return fmt.Errorf("%w (%w: the entry may have been committed): %v", ErrShutdown, ErrUnknownOutcome, err)
		}
		return mapErr(err)
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
	}
}

// endsAtShutdown makes f's Error return raft.ErrRaftShutdown once shut is
// closed, and returns f. hashicorp/raft (v1.7.3) does not answer every
// future when it shuts down: an Apply, Barrier or configuration change
// that committed and waits in the queue to its FSM goroutine is dropped
// when that goroutine sees the shutdown first (raft#498;
// TestShutdownAnswersQueuedFutures), and its Error blocks for ever. Raft's futures
// offer nothing else to wait on, but each embeds raft's deferError, whose
// Error also returns once its exported ShutdownCh is closed — set by Raft
// for its own internal futures only. It is set here, through reflection,
// before Error is called (Raft itself never reads or writes it for these
// futures). shut must be closed only once every goroutine of Raft has
// ended: until then, Raft may still answer. A future without the field
// (an errorFuture: already answered) is left as it is.
func endsAtShutdown(f raft.Future, shut chan struct{}) raft.Future {
	setShutdownCh(f, shut)
	return f
}

func enqueueTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Millisecond, time.Until(d))
	}
	return defaultWait
}

// waitEnd is one in-place wait's end: its channel, set as the future's
// ShutdownCh, is closed when the wait's ctx ends or Raft's shutdown has
// ended, whichever comes first.
type waitEnd struct {
	ch   chan struct{}
	once sync.Once
}

func (w *waitEnd) end() { w.once.Do(func() { close(w.ch) }) }

// waitInPlace is wait for a future that nobody else reads (Propose's),
// on the caller's goroutine: Raft's answer wakes the caller directly
// instead of a reader goroutine that then wakes it — one hand-off less on
// every proposal's path. The future's ShutdownCh (see endsAtShutdown) is
// a channel of this wait's own, closed when ctx ends (context.AfterFunc)
// or when Raft's shutdown has ended (closeShut): the future's Error then
// returns raft.ErrRaftShutdown and so does this wait, as wait would, with
// ctx's error when that was first, or after bound (a timer, cheaper than
// a context of its own per proposal) with an unknown outcome too. handled
// is false when the future's
// ShutdownCh cannot be set (already answered, or not a future of this
// shape): the caller then uses wait.
func (p *Raft) waitInPlace(ctx context.Context, f raft.Future, bound time.Duration) (handled bool, err error) {
	w := &waitEnd{ch: make(chan struct{})}
	if !setShutdownCh(f, w.ch) {
		return false, nil
	}
	p.wmu.Lock()
	if p.closing {
		p.wmu.Unlock()
		w.end() // nobody else will: its answer is not read
		return true, fmt.Errorf("%w (%w: closing with the entry in flight)", ErrShutdown, ErrUnknownOutcome)
	}
	select {
	case <-p.shut:
		w.end()
	default:
		if p.ends == nil {
			p.ends = map[*waitEnd]struct{}{}
		}
		p.ends[w] = struct{}{}
	}
	p.waiters.Add(1)
	p.wmu.Unlock()
	var late atomic.Bool
	t := time.AfterFunc(bound, func() { late.Store(true); w.end() })
	stop := context.AfterFunc(ctx, w.end)
	err = f.Error()
	stop()
	t.Stop()
	p.wmu.Lock()
	delete(p.ends, w)
	p.wmu.Unlock()
	p.waiters.Done()
	if !errors.Is(err, raft.ErrRaftShutdown) {
		return true, mapErr(err)
	}
	select {
	case <-p.shut:
	default:
		if ctx.Err() != nil {
			return true, fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
		}
		if late.Load() {
			return true, fmt.Errorf("%w: no answer from raft within %v", ErrUnknownOutcome, bound)
		}
	}
	// Raft answers a committed entry it has not applied this way too.
	return true, fmt.Errorf("%w (%w: the entry may have been committed): %v", ErrShutdown, ErrUnknownOutcome, err)
}

// setShutdownCh sets f's ShutdownCh to ch when it has one that is not set
// (endsAtShutdown has the why).
func setShutdownCh(f raft.Future, ch chan struct{}) bool {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	idx, ok := shutdownField(v.Elem().Type())
	if !ok {
		return false
	}
	fc := v.Elem().FieldByIndex(idx)
	if !fc.CanSet() || !fc.IsNil() {
		return false
	}
	fc.Set(reflect.ValueOf(ch))
	return true
}

// shutdownFields caches, per future type, the index of its ShutdownCh
// field (nil: none of the right type): looking it up by name on every
// proposal allocated several objects each time.
var shutdownFields sync.Map // reflect.Type → []int

func shutdownField(t reflect.Type) ([]int, bool) {
	if idx, ok := shutdownFields.Load(t); ok {
		return idx.([]int), idx.([]int) != nil
	}
	var idx []int
	if sf, ok := t.FieldByName("ShutdownCh"); ok && sf.IsExported() && sf.Type == reflect.TypeOf((chan struct{})(nil)) {
		idx = sf.Index
	}
	shutdownFields.Store(t, idx)
	return idx, idx != nil
}

// Propose applies one encoded entry and returns the FSM's answer, waiting
// as long as ctx allows (without a deadline, defaultWait).
func (p *Raft) Propose(ctx context.Context, data []byte) (ticket.Result, error) {
	return p.ProposeWithin(ctx, data, defaultWait)
}

// ProposeWithin is Propose waiting at most bound (and as long as ctx
// allows): without an answer by then the outcome is unknown.
//
// When this leader loses its leadership with the entry in flight, the
// proposer waits for the entry's fate under the next leader (awaitFate,
// at most fateWait more and as long as ctx allows): the FSM's answer when
// it was applied, ErrNotLeader when it was replaced, an unknown outcome
// when neither is known by then.
func (p *Raft) ProposeWithin(ctx context.Context, data []byte, bound time.Duration) (ticket.Result, error) {
	p.proposing.add()
	defer p.proposing.leave()
	if p.closed.Load() {
		return ticket.Result{}, fmt.Errorf("%w: closing; the entry was not proposed", ErrShutdown)
	}
	enqueue := bound
	if d, ok := ctx.Deadline(); ok {
		enqueue = min(bound, max(time.Millisecond, time.Until(d)))
	}
	f := p.r.Apply(data, enqueue)
	handled, err := p.waitInPlace(ctx, f, bound)
	if !handled {
		wctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		err = p.wait(wctx, f)
	}
	if errors.Is(err, raft.ErrLeadershipLost) {
		return p.awaitFate(ctx, f, err)
	}
	if err != nil {
		return ticket.Result{}, err
	}
	res, ok := f.Response().(ticket.Result)
	if !ok {
		return ticket.Result{}, fmt.Errorf("consensus: unexpected FSM response %T", f.Response())
	}
	return res, nil
}

// ProposeAsync applies an entry without waiting (the expiry loop's batch);
// Await waits for it.
func (p *Raft) ProposeAsync(ctx context.Context, data []byte) raft.ApplyFuture {
	return p.r.Apply(data, enqueueTimeout(ctx))
}

// Await waits for a ProposeAsync future under ctx.
func (p *Raft) Await(ctx context.Context, f raft.ApplyFuture) (ticket.Result, error) {
	if err := p.wait(ctx, f); err != nil {
		return ticket.Result{}, err
	}
	res, _ := f.Response().(ticket.Result)
	return res, nil
}

// Barrier commits a barrier: every earlier entry is applied when it returns.
func (p *Raft) Barrier(ctx context.Context) error {
	return p.wait(ctx, p.r.Barrier(enqueueTimeout(ctx)))
}

// EndsAtShutdown makes f's Error return raft.ErrRaftShutdown at the
// latest once this Raft's shutdown has ended (endsAtShutdown), for a
// caller that waits on a future of it without Wait.
func (p *Raft) EndsAtShutdown(f raft.Future) { endsAtShutdown(f, p.shut) }

// Wait waits for any future of this Raft (a configuration change, a
// leadership transfer) as Propose does: under ctx, its reader ending at
// the latest with Raft's shutdown.
func (p *Raft) Wait(ctx context.Context, f raft.Future) error { return p.wait(ctx, f) }

// VerifyLeader confirms with a quorum that this node still leads.
func (p *Raft) VerifyLeader(ctx context.Context) error {
	return p.wait(ctx, p.r.VerifyLeader())
}
