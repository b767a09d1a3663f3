package ctl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// WatchJSON is one line of `watch --json` (and `wait --json`): the ticket
// when held, and its modify index.
type WatchJSON struct {
	Name        string       `json:"name"`
	Held        bool         `json:"held"`
	Ticket      *wire.Ticket `json:"ticket,omitempty"`
	ModifyIndex uint64       `json:"modify_index"`
}

// watchLoop calls each with every state of name whose modify index is new,
// until each says stop, until (zero: no end) passes, or ctx ends. Leader
// changes and unready nodes are waited out.
func watchLoop(ctx context.Context, c *client.Client, name string, until time.Duration, each func(*client.Watched) bool) error {
	if until > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, until)
		defer cancel()
	}
	var index uint64
	first := true
	var last *client.Watched // the last state read, for the error when until passes
	for {
		wait := client.MaxWatchWait
		if dl, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(dl)), 0)
		}
		w, err := c.Watch(ctx, name, index, wait)
		switch {
		case ctx.Err() != nil:
			if until > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return &waitedOutError{name: name, wait: until, last: last}
			}
			return ctx.Err()
		case err != nil:
			var ce *client.Error
			if errors.As(err, &ce) && ce.StatusCode != http.StatusServiceUnavailable && ce.StatusCode != http.StatusTooManyRequests {
				return err
			}
			t := time.NewTimer(500 * time.Millisecond) // a leader change: try again
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		last = w
		if first || w.Index != index {
			first = false
			if !each(w) {
				return nil
			}
		}
		index = w.Index
	}
}

var errWaitedOut = errors.New("--wait passed")

// waitedOutError is watchLoop's error when --wait passed: what it waited
// for, how long, and the ticket's last state (who holds it).
type waitedOutError struct {
	name string
	wait time.Duration
	last *client.Watched // nil: no answer in that time
}

func (e *waitedOutError) Is(target error) bool { return target == errWaitedOut }

func (e *waitedOutError) Error() string {
	s := fmt.Sprintf("waited %v (--wait) for ticket %q", e.wait, e.name)
	switch {
	case e.last == nil:
		return s + ": no answer from ticketd in that time"
	case e.last.Ticket == nil:
		return s + ": free at the last answer"
	}
	t := e.last.Ticket
	s += fmt.Sprintf(": still held by %s with token %d", showHolder(t.Holder), t.Token)
	if t.Revoked {
		s += " (revoked: it frees at its expiry)"
	}
	return s
}

// waitFree is `ticketctl wait NAME`: returns once nobody holds the ticket.
func waitFree(ctx context.Context, c *client.Client, a args, p printer) error {
	return watchLoop(ctx, c, a.name, a.wait, func(w *client.Watched) bool {
		if w.Ticket != nil {
			return true
		}
		p.watched(a.name, w)
		return false
	})
}

// watchPrint is `ticketctl watch NAME`: prints the state, then each change.
func watchPrint(ctx context.Context, c *client.Client, a args, p printer) error {
	err := watchLoop(ctx, c, a.name, a.wait, func(w *client.Watched) bool {
		p.watched(a.name, w)
		return true
	})
	if errors.Is(err, errWaitedOut) || errors.Is(err, context.Canceled) {
		return nil // the end the user asked for
	}
	return err
}

func (p printer) watched(name string, w *client.Watched) {
	if p.json {
		printJSON(p.out, WatchJSON{Name: name, Held: w.Ticket != nil, Ticket: w.Ticket, ModifyIndex: w.Index})
		return
	}
	if w.Ticket == nil {
		fmt.Fprintf(p.out, "%s free (index %d)\n", name, w.Index)
		return
	}
	t := w.Ticket
	if t.Revoked {
		fmt.Fprintf(p.out, "%s held by %s token %d, revoked: frees at %s (index %d)\n",
			name, showHolder(t.Holder), t.Token, p.wall(t.ServerExpiryUnixMs), w.Index)
		return
	}
	fmt.Fprintf(p.out, "%s held by %s token %d lease %ds valid before %s (index %d)\n",
		name, showHolder(t.Holder), t.Token, t.LeaseS, p.wall(t.ConservativeValidBeforeUnixMs), w.Index)
}
