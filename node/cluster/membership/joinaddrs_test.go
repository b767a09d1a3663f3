package membership

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/internal/config"
)

// SPEC §5 "Membership": join_addrs in the seed's comma-separated form.
func TestParseJoinAddrs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"node-1:7946", []string{"node-1:7946"}},
		{"node-2:7946,node-3:7946", []string{"node-2:7946", "node-3:7946"}},
		{" node-2:7946 , node-3:8000 ", []string{"node-2:7946", "node-3:8000"}},
		{"node-1", []string{"node-1:7946"}},
		{"10.0.0.1", []string{"10.0.0.1:7946"}},
		{"[::1]:7000", []string{"[::1]:7000"}},
		{"::1", []string{"[::1]:7946"}},
		{"fe80::1", []string{"[fe80::1]:7946"}},
		{"a.example_x:1,b:65535", []string{"a.example_x:1", "b:65535"}},
	} {
		got, err := ParseJoinAddrs(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseJoinAddrs(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, entry string }{
		{"a:1,,b:1", "entry 2"},
		{"a:1,", "entry 2"},
		{",a:1", "entry 1"},
		{"a:1, ,b:1", "entry 2"},
		{":7946", "entry 1"},
		{"a:0", "entry 1"},
		{"a:65536", "entry 1"},
		{"a:-1", "entry 1"},
		{"a:http", "entry 1"},
		{"a:07946", "entry 1"},
		{"a b:7946", "entry 1"},
		{"a/b", "entry 1"},
		{"[::1]", "entry 1"},
		{"1:2:3:zz", "entry 1"},
		{"a:1:2", "entry 1"},
		{"ok:1,bad host", "entry 2"},
	} {
		_, err := ParseJoinAddrs(c.in)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Path != KeyJoinAddrs || !strings.Contains(ce.Msg, c.entry) {
			t.Errorf("ParseJoinAddrs(%q) err = %v; want a *config.Error at %s naming %s", c.in, err, KeyJoinAddrs, c.entry)
		}
	}
}
