package node

import (
	"errors"
	"testing"

	"github.com/tckclk/tckclk/node/api/client"
)

// Issue 10: a Grant the leader's current state already refuses (held by
// another holder, unexpired) answers 409 without appending to the log; a
// contended ticket no longer grows the log with each failed attempt.
func TestRefusedGrantAppendsNothing(t *testing.T) {
	var n *server
	tn := startNodeHooks(t, testConfig(t, t.TempDir()), Deps{Env: noEnv}, testHooks{built: func(x *server) { n = x }})
	g, err := tn.c.Grant(bg, "a", "h1", 30)
	if err != nil {
		t.Fatal(err)
	}
	before := n.raft().LastIndex()
	for range 5 {
		_, err := tn.c.Grant(bg, "a", "h2", 30)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.StatusCode != 409 || ce.Holder != "h1" || ce.Token != g.Token {
			t.Fatalf("contended grant: %v", err)
		}
	}
	if after := n.raft().LastIndex(); after != before {
		t.Fatalf("refused grants appended %d entries", after-before)
	}
	// The holder's own repeat is still answered (idempotent), and a free
	// ticket is still granted through the log.
	if again, err := tn.c.Grant(bg, "a", "h1", 30); err != nil || again.Token != g.Token {
		t.Fatalf("idempotent grant: %+v %v", again, err)
	}
	if _, err := tn.c.Grant(bg, "b", "h2", 30); err != nil || n.raft().LastIndex() == before {
		t.Fatalf("free grant: %v (index %d)", err, n.raft().LastIndex())
	}
}
