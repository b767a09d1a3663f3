package ctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/wire"
)

// SPEC §3.4: `ticketctl cluster` shows each member's generation and the
// NodeIds the cluster holds retired.
func TestMembersShowGenerationsAndRetired(t *testing.T) {
	m := &wire.Members{Members: []wire.Member{
		{ID: "n1", Name: "n1", Generation: 1, Suffrage: "voter", Leader: true, Gossip: "alive", Clock: "healthy"},
		{ID: "n2", Name: "n2", Generation: 1, Suffrage: "voter", Retired: true, Clock: "failed"},
		{ID: "n2~2", Name: "n2", Generation: 2, Suffrage: "nonvoter", Gossip: "alive", Clock: "healthy"},
	}, RetiredNodeIDs: []string{"n2", "n3~4"}}
	var buf bytes.Buffer
	printer{out: &buf}.members(m)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, want := range [][]string{
		{"ID", "GEN", "SUFFRAGE"},
		{"n1", " 1 ", "voter", "*", "alive", "healthy"},
		{"n2", " 1 ", "voter", "failed (retired)"},
		{"n2~2", " 2 ", "nonvoter", "alive"},
		{"retired NodeIds: n2, n3~4"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}
