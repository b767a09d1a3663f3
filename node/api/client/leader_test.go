package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"
)

// hinting is a ticketd stand-in that answers every grant and release
// 200 and, while forwardsTo is set, names that leader in
// wire.LeaderHeader as a follower that forwarded the op does.
type hinting struct {
	url string

	mu         sync.Mutex
	forwardsTo string
	hits       int
}

func newHinting(t *testing.T, forwardsTo string) *hinting {
	h := &hinting{forwardsTo: forwardsTo}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		h.mu.Lock()
		h.hits++
		leader := h.forwardsTo
		h.mu.Unlock()
		if leader != "" {
			w.Header().Set(wire.LeaderHeader, leader)
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/batch":
			io.WriteString(w, `{"results":[{"status":200,"body":`+grantOK+`}]}`)
		default:
			io.WriteString(w, grantOK)
		}
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

func (h *hinting) set(leader string) {
	h.mu.Lock()
	h.forwardsTo = leader
	h.mu.Unlock()
}

// takeHits returns the requests answered since the last call.
func (h *hinting) takeHits() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.hits
	h.hits = 0
	return n
}

func grants(t *testing.T, c *Client, n int) {
	t.Helper()
	for range n {
		if _, err := c.Grant(context.Background(), "a", "h", 30); err != nil {
			t.Fatal(err)
		}
	}
}

func wantHits(t *testing.T, when string, nodes []*hinting, want ...int) {
	t.Helper()
	for i, h := range nodes {
		if got := h.takeHits(); got != want[i] {
			t.Errorf("%s: address %d answered %d requests, want %d", when, i, got, want[i])
		}
	}
}

// SPEC §4.1: a client with several addresses prefers the one that
// answered — and, when that one says it forwarded the op to the leader
// (wire.LeaderHeader), moves on until it reaches the address that serves
// ops itself, then stays there: one forwarded op per follower before it.
func TestFollowsTheLeaderHint(t *testing.T) {
	f1, f2, leader := newHinting(t, "node-3"), newHinting(t, "node-3"), newHinting(t, "")
	nodes := []*hinting{f1, f2, leader}
	c := multi(t, nil, f1.url, f2.url, leader.url)
	grants(t, c, 10)
	wantHits(t, "settling", nodes, 1, 1, 8)

	// The leader moves to node-1: the old leader's address now forwards
	// there, and node-1's address serves. The client knows the other
	// follower forwarded to node-3, not node-1: it goes on to node-1.
	leader.set("node-1")
	f1.set("")
	f2.set("node-1")
	grants(t, c, 10)
	wantHits(t, "after a leader change", nodes, 9, 0, 1)
}

// When the leader's own address is not among the client's, the client
// stops moving once every address it has says it forwards to that leader.
func TestLeaderHintWithoutTheLeadersAddress(t *testing.T) {
	f1, f2 := newHinting(t, "node-9"), newHinting(t, "node-9")
	c := multi(t, nil, f1.url, f2.url)
	grants(t, c, 10)
	wantHits(t, "no leader address", []*hinting{f1, f2}, 1, 9)
}

// A client of one address has nowhere to go: the hint changes nothing.
func TestLeaderHintOneAddress(t *testing.T) {
	f := newHinting(t, "node-2")
	c := multi(t, nil, f.url)
	grants(t, c, 3)
	wantHits(t, "one address", []*hinting{f}, 3)
}

// A coalescing client follows the hint on its batches' answers too.
func TestCoalescedFollowsTheLeaderHint(t *testing.T) {
	f1, leader := newHinting(t, "node-2"), newHinting(t, "")
	nodes := []*hinting{f1, leader}
	c := multi(t, []Option{WithCoalescing(1)}, f1.url, leader.url)
	// One caller at a time goes alone (a free slot, nothing queued): the
	// hint on a single endpoint's answer.
	grants(t, c, 5)
	wantHits(t, "coalescing client, calls alone", nodes, 1, 4)
	// A batch's answer: send it directly.
	leader.set("node-1")
	f1.set("")
	c.co.send([]*queued{{op: wire.BatchOp{Op: "grant", Name: "a", Holder: "h", LeaseS: new(int64(30))}, done: make(chan struct{})}})
	if got := c.preferred(); got != 0 {
		t.Errorf("after a batch answered with the hint: preferred address %d, want 0", got)
	}
}
