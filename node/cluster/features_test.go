package cluster

import (
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/cluster/membership"
)

// SPEC §4 (an unknown entry version stops a node): the leader proposes
// entry version 4 only when every server of its configuration — a
// non-voter too — advertises in its signed metadata that it reads it; a
// server missing from gossip, or of a release from before the marker,
// keeps it to the previous release's entries.
func TestEntriesWhy(t *testing.T) {
	member := func(id, version string) membership.Member {
		return membership.Member{ID: id, Name: id, State: membership.StateAlive, Meta: membership.Meta{NodeID: id, Version: version}}
	}
	v4 := membership.SoftwareVersion("abc", 4)
	cases := []struct {
		name    string
		ids     []string
		members []membership.Member
		want    string
	}{
		{"all read it", []string{"a", "b", "c"}, []membership.Member{member("a", v4), member("b", v4), member("c", v4), member("client", "")}, ""},
		{"a newer one", []string{"a", "b"}, []membership.Member{member("a", v4), member("b", membership.SoftwareVersion("x", 9))}, ""},
		{"an old release", []string{"a", "b", "c"}, []membership.Member{member("a", v4), member("b", ""), member("c", v4)}, `server b does not advertise entry version 4 (software version "")`},
		{"an older marker", []string{"a", "b"}, []membership.Member{member("a", v4), member("b", membership.SoftwareVersion("x", 3))}, "server b does not advertise"},
		{"not in gossip", []string{"a", "b", "new~2"}, []membership.Member{member("a", v4), member("b", v4), member("new", v4)}, "server new~2 is not in gossip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := entriesWhy(4, c.ids, c.members)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("entriesWhy = %q, want %q", got, c.want)
			}
		})
	}
	// This build says it reads its own newest version.
	m := membership.Meta{Version: softwareVersion()}
	if m.EntryVersion() != 4 {
		t.Fatalf("this build advertises %q: entry version %d", m.Version, m.EntryVersion())
	}
}
