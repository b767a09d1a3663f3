package consensus

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// encodePeersForTest is raft's encoding of a list of peer addresses.
func encodePeersForTest(t *testing.T, addrs ...string) []byte {
	t.Helper()
	var enc [][]byte
	for _, a := range addrs {
		enc = append(enc, []byte(a))
	}
	var buf bytes.Buffer
	h := codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}} //nolint:staticcheck // SA1019: as raft does
	if err := codec.NewEncoder(&buf, &h).Encode(enc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A cluster node's snapshot: raft encodes its own address bare and every
// other voter's through the ServerAddressProvider as NodeId@address (the
// address gossip advertises now). A restart must accept it; a Peers that
// names another NodeId, misses a voter or carries extra bytes is refused.
func TestCheckPeersClusterEncoding(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "node-1", Address: "127.0.0.1:7954"},
		{Suffrage: raft.Nonvoter, ID: "node-4", Address: "127.0.0.1:7957"},
		{Suffrage: raft.Voter, ID: "node-2", Address: "127.0.0.1:7953"},
		{Suffrage: raft.Voter, ID: "node-3", Address: "127.0.0.1:7955"},
	}}
	ok := map[string][]byte{
		"bare (single node, older builds)": encodePeersForTest(t, "127.0.0.1:7954", "127.0.0.1:7953", "127.0.0.1:7955"),
		"others named":                     encodePeersForTest(t, "node-1@127.0.0.1:7954", "node-2@127.0.0.1:7953", "127.0.0.1:7955"),
		"another gossip address":           encodePeersForTest(t, "node-1@127.0.0.1:7999", "node-2@127.0.0.1:7953", "127.0.0.1:7955"),
	}
	for name, p := range ok {
		if err := checkPeers(conf, p); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	bad := map[string][]byte{
		"another NodeId":   encodePeersForTest(t, "node-9@127.0.0.1:7954", "node-2@127.0.0.1:7953", "127.0.0.1:7955"),
		"a voter missing":  encodePeersForTest(t, "node-1@127.0.0.1:7954", "127.0.0.1:7955"),
		"wrong bare":       encodePeersForTest(t, "127.0.0.1:7954", "127.0.0.1:7953", "127.0.0.1:7956"),
		"empty address":    encodePeersForTest(t, "node-1@", "node-2@127.0.0.1:7953", "127.0.0.1:7955"),
		"trailing bytes":   append(encodePeersForTest(t, "node-1@127.0.0.1:7954", "node-2@127.0.0.1:7953", "127.0.0.1:7955"), 0),
		"not msgpack list": []byte("garbage"),
	}
	for name, p := range bad {
		if err := checkPeers(conf, p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
