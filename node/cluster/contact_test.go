package cluster

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// SPEC §5: Raft contact is a peer's answered AppendEntries (a heartbeat),
// within raftContactWindow; an error or no answer is no contact.
func TestContactTransportRecordsAnsweredAppendEntries(t *testing.T) {
	newTCP := func() *raft.NetworkTransport {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	peer := newTCP()
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case rpc := <-peer.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); <-exited })
	now := time.Unix(1_800_000_000, 0)
	ct := newContactTransport(newTCP())
	ct.now = func() time.Time { return now }
	if ct.inContact("b") {
		t.Fatal("contact before any AppendEntries")
	}
	var resp raft.AppendEntriesResponse
	if err := ct.AppendEntries("b", peer.LocalAddr(), &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}}, &resp); err != nil {
		t.Fatal(err)
	}
	if !ct.inContact("b") || ct.inContact("c") {
		t.Fatalf("after b answered: b %v, c %v", ct.inContact("b"), ct.inContact("c"))
	}
	now = now.Add(raftContactWindow)
	if !ct.inContact("b") {
		t.Fatal("contact lost at exactly the window")
	}
	now = now.Add(time.Millisecond)
	if ct.inContact("b") {
		t.Fatal("contact kept past the window")
	}
	// An unanswered call (nobody listens there) records nothing.
	if err := ct.AppendEntries("c", "127.0.0.1:1", &raft.AppendEntriesRequest{}, &resp); err == nil {
		t.Fatal("AppendEntries to a closed port succeeded")
	}
	if ct.inContact("c") {
		t.Fatal("a failed AppendEntries counted as contact")
	}
	var nilCT *contactTransport
	if nilCT.inContact("b") {
		t.Fatal("nil transport in contact")
	}
	// Raft's optional interfaces are still there (pre-vote, close).
	var tr raft.Transport = ct
	if _, ok := tr.(raft.WithPreVote); !ok {
		t.Error("contactTransport hides WithPreVote")
	}
	if _, ok := tr.(raft.WithClose); !ok {
		t.Error("contactTransport hides WithClose")
	}
}
