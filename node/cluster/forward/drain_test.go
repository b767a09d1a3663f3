package forward

import (
	"errors"
	"testing"
	"time"
)

// A retired client (its node's leader changed) refuses new calls before
// sending anything, lets the call in flight get its answer, then closes.
func TestRetireLetsTheCallInFlightFinish(t *testing.T) {
	b := newBlocker()
	h := start(t, ServerConfig{}, b)
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Do(ctxT(t), Request{Op: OpGrant, Name: "n", Holder: "h", LeaseS: 1})
		done <- err
	}()
	waitIn(t, b)
	retired := make(chan struct{})
	go func() { h.client.Retire(nil, time.Hour); close(retired) }()
	waitFor(t, func() bool {
		h.client.mu.Lock()
		defer h.client.mu.Unlock()
		return h.client.closed
	})
	if _, err := h.client.Do(ctxT(t), Request{Op: OpGet, Name: "n"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do on a retired client: %v, want ErrClosed", err)
	}
	select {
	case <-retired:
		t.Fatal("Retire closed the client with a call in flight")
	default:
	}
	close(b.release)
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at Retire: %v, want its answer", err)
	}
	<-retired
}

// Retire's stop channel closes the client at once, the call in flight
// ending unknown as with Close.
func TestRetireStops(t *testing.T) {
	b := newBlocker()
	h := start(t, ServerConfig{}, b)
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Do(ctxT(t), Request{Op: OpGrant, Name: "n", Holder: "h", LeaseS: 1})
		done <- err
	}()
	waitIn(t, b)
	stop := make(chan struct{})
	close(stop)
	h.client.Retire(stop, time.Hour)
	if err := <-done; !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("the call in flight when Retire was stopped: %v", err)
	}
	close(b.release)
}

// Drain waits for the request being handled to be answered and for a
// quiet spell; a request arriving meanwhile is answered too.
func TestDrainAnswersWhatArrives(t *testing.T) {
	b := newBlocker()
	h := start(t, ServerConfig{}, b)
	first := make(chan error, 1)
	go func() {
		_, err := h.client.Do(ctxT(t), Request{Op: OpGrant, Name: "a", Holder: "h", LeaseS: 1})
		first <- err
	}()
	waitIn(t, b)
	drained := make(chan bool, 1)
	go func() { drained <- h.srv.Drain(50*time.Millisecond, time.Hour) }()
	second := make(chan error, 1)
	go func() {
		_, err := h.client.Do(ctxT(t), Request{Op: OpGrant, Name: "b", Holder: "h", LeaseS: 1})
		second <- err
	}()
	waitIn(t, b)
	select {
	case <-drained:
		t.Fatal("Drain returned with requests being handled")
	default:
	}
	close(b.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if !<-drained {
		t.Fatal("Drain reported requests still arriving")
	}
}

// Drain is bounded: a handler that never answers does not hold it.
func TestDrainBound(t *testing.T) {
	b := newBlocker()
	h := start(t, ServerConfig{}, b)
	go func() { _, _ = h.client.Do(ctxT(t), Request{Op: OpGet, Name: "a"}) }()
	waitIn(t, b)
	if h.srv.Drain(time.Millisecond, 20*time.Millisecond) {
		t.Fatal("Drain reported quiet with a request being handled")
	}
	close(b.release)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(time.Millisecond) // poll interval of a condition with a deadline
	}
}
