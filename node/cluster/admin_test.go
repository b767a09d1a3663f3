package cluster

import (
	"testing"

	"github.com/hashicorp/raft"
)

// The quorum rule of replace: the voters left once OLD goes must keep a
// majority alive in gossip (OLD itself and non-voters do not count).
func TestReplaceQuorumRule(t *testing.T) {
	servers := func(ids ...string) []raft.Server {
		var out []raft.Server
		for _, id := range ids {
			out = append(out, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
		}
		return append(out, raft.Server{ID: "s", Suffrage: raft.Nonvoter})
	}
	cases := []struct {
		voters []string
		alive  map[string]bool
		old    string
		safe   bool
	}{
		{[]string{"a", "b", "c"}, map[string]bool{"a": true, "b": true, "c": true, "s": true}, "c", true},
		{[]string{"a", "b", "c"}, map[string]bool{"a": true, "b": false, "c": true, "s": true}, "c", false}, // b dead: 1 of 2
		{[]string{"a", "b", "c"}, map[string]bool{"a": true, "b": true}, "c", true},                         // c dead itself
		{[]string{"a", "b", "c", "d", "e"}, map[string]bool{"a": true, "b": true, "c": true}, "e", true},    // 3 of 4
		{[]string{"a", "b", "c", "d", "e"}, map[string]bool{"a": true, "b": true, "e": true}, "e", false},   // 2 of 4
	}
	for _, c := range cases {
		up, left := votersLeft(servers(c.voters...), c.alive, c.old)
		if safe := up > left/2; safe != c.safe {
			t.Errorf("voters %v alive %v without %s: %d of %d up, safe %v, want %v", c.voters, c.alive, c.old, up, left, safe, c.safe)
		}
	}
}
