package config

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	DeltaMs  uint64            `yaml:"delta_ms"`
	Addrs    []string          `yaml:"agent_addrs"`
	Dev      bool              `yaml:"dev_reference"`
	Interval time.Duration     `yaml:"interval"`
	Peers    map[string]string `yaml:"peers"`
}

type doc struct {
	Name  string `yaml:"name"`
	Clock inner  `yaml:"clock"`
	Ptr   *inner `yaml:"ptr"`
}

// SPEC §6: unknown keys, wrong types and duplicates refuse with the key path.
func TestDecodeYAMLErrors(t *testing.T) {
	cases := map[string]string{
		"clock:\n  delta_ms: abc\n":              "clock.delta_ms: want an integer",
		"clock:\n  delta_ms: 30.5\n":             "clock.delta_ms: want an integer",
		"clock:\n  delta_ms: \"30\"\n":           "clock.delta_ms: want an integer",
		"clock:\n  delta_ms: -1\n":               "clock.delta_ms: bad value",
		"clock:\n  delta_ms: 1\n  delta_ms: 2\n": "clock.delta_ms: given twice",
		"clock:\n  deltams: 1\n":                 "clock.deltams: unknown key",
		"nmae: x\n":                              "nmae: unknown key", //nolint:misspell // a misspelt key on purpose
		"clock: 5\n":                             "clock: want a mapping",
		"clock:\n  agent_addrs: a\n":             "clock.agent_addrs: want a list",
		"clock:\n  agent_addrs: [a, [b]]\n":      "clock.agent_addrs[1]: want a single value",
		"clock:\n  dev_reference: yes\n":         "clock.dev_reference: want true or false",
		"clock:\n  interval: forever\n":          "clock.interval: bad value",
		"ptr:\n  bogus: 1\n":                     "ptr.bogus: unknown key",
		"clock:\n  peers:\n    a: [1]\n":         "clock.peers.a: want a single value",
		"a: &x 1\nname: *x\n":                    "a: unknown key",
		"clock: [\n":                             "not valid YAML",
	}
	for in, want := range cases {
		var d doc
		err := DecodeYAML([]byte(in), &d)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", in, err, want)
		}
	}
}

func TestDecodeYAMLValues(t *testing.T) {
	d := doc{Name: "default", Clock: inner{DeltaMs: 500}}
	in := "clock:\n  agent_addrs: [a:1, b:2]\n  dev_reference: true\n  interval: 1500ms\n  peers: {n1: k1}\nptr:\n  delta_ms: 7\n"
	if err := DecodeYAML([]byte(in), &d); err != nil {
		t.Fatal(err)
	}
	if d.Name != "default" || d.Clock.DeltaMs != 500 {
		t.Fatalf("defaults lost: %+v", d)
	}
	if len(d.Clock.Addrs) != 2 || !d.Clock.Dev || d.Clock.Interval != 1500*time.Millisecond || d.Clock.Peers["n1"] != "k1" || d.Ptr == nil || d.Ptr.DeltaMs != 7 {
		t.Fatalf("decoded %+v %+v", d, d.Ptr)
	}
	var empty doc
	if err := DecodeYAML(nil, &empty); err != nil {
		t.Fatal(err)
	}
	if err := DecodeYAML([]byte("# only a comment\n"), &empty); err != nil {
		t.Fatal(err)
	}
}
