package consensus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/ticket"
)

// Errors of Propose, Barrier and VerifyLeader (errors.Is).
var (
	// ErrNotLeader: this node is not (or no longer) the leader; nothing
	// was committed by this call.
	ErrNotLeader = errors.New("consensus: not the leader")
	// ErrShutdown: Raft is shutting down.
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
		return fmt.Errorf("%w: leadership was lost with the entry in flight, it may still commit: %v", ErrUnknownOutcome, err)
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
// goroutine that reads the future is counted in p.waiters: Close waits for
// them after Raft's shutdown has answered every future.
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
		return fmt.Errorf("%w: closing", ErrShutdown)
	}
	p.waiters.Add(1)
	p.wmu.Unlock()
	go func() { // ends when Raft answers, at the latest at shutdown
		defer p.waiters.Done()
		done <- f.Error()
	}()
	select {
	case err := <-done:
		return mapErr(err)
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
	}
}

func enqueueTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Millisecond, time.Until(d))
	}
	return defaultWait
}

// Propose applies one encoded entry and returns the FSM's answer.
func (p *Raft) Propose(ctx context.Context, data []byte) (ticket.Result, error) {
	f := p.r.Apply(data, enqueueTimeout(ctx))
	if err := p.wait(ctx, f); err != nil {
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

// VerifyLeader confirms with a quorum that this node still leads.
func (p *Raft) VerifyLeader(ctx context.Context) error {
	return p.wait(ctx, p.r.VerifyLeader())
}
