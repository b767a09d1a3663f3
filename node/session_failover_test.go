package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// SPEC §4.1, §4.2: a Session of a client that knows every node keeps its
// ticket while the node it talks to — the leader — is stopped: its renews
// move to the others (the leader hands off; a follower forwards), its
// token never changes and Done stays open; Close releases it through a
// node still up.
func TestSessionFollowsTheCluster(t *testing.T) {
	t.Parallel()
	tc, leader := formThree(t)
	tc.waitReady(tc.names...)
	urls := []string{tc.nodes[leader].tn.url} // the leader first: the client talks to it
	for _, cm := range tc.others(leader) {
		urls = append(urls, cm.tn.url)
	}
	c, err := client.New(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	const leaseS = 6 // renewed every 2 s
	s, err := c.NewSession(ctx, "follow", "worker", leaseS)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(bg)
	tok := s.Token()

	if err := tc.nodes[leader].tn.stop(); err != nil {
		t.Fatalf("stopping the leader %s: %v", leader, err)
	}
	stopped := time.Now()
	waitFor(t, "two renews after the leader stopped", 30*time.Second, func() bool {
		select {
		case <-s.Done():
			t.Fatalf("session lost after the leader stopped: %v", s.Err())
		default:
		}
		return s.Lease().SentAt.After(stopped.Add(leaseS * time.Second / 3))
	})
	if s.Token() != tok || s.Err() != nil || !time.Now().Before(s.Deadline()) {
		t.Fatalf("token %d (was %d), err %v, deadline in %v", s.Token(), tok, s.Err(), time.Until(s.Deadline()))
	}
	g, err := c.Get(bg, "follow")
	if err != nil || g.Token != tok || g.Holder != "worker" {
		t.Fatalf("the ticket after the leader stopped: %+v, %v", g, err)
	}
	if err := s.Close(bg); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := c.Get(bg, "follow"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after close: %v, want not found", err)
	}
}
