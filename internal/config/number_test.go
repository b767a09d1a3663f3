package config

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

type nums struct {
	DeltaMs  uint64        `yaml:"delta_ms"`
	Domain   uint8         `yaml:"domain"`
	Priority int           `yaml:"priority"`
	Small    int8          `yaml:"small"`
	Interval time.Duration `yaml:"interval"`
}

// Issue 10: every integer in YAML is plain canonical decimal (the wire's
// number rule, SPEC §1.2); before, 0500 was read as octal 320 and 0x1f4 as
// 500. Anything else names the key.
func TestYAMLNumbersAreDecimal(t *testing.T) {
	ok := []struct {
		in   string
		want nums
	}{
		{"delta_ms: 500\n", nums{DeltaMs: 500}},
		{"delta_ms: 0\n", nums{DeltaMs: 0}},
		{"delta_ms: 18446744073709551615\n", nums{DeltaMs: math.MaxUint64}},
		{"domain: 255\n", nums{Domain: 255}},
		{"priority: -3\n", nums{Priority: -3}},
		{"priority: 7\n", nums{Priority: 7}},
		{"small: -128\n", nums{Small: -128}},
		{"interval: 1500ms\n", nums{Interval: 1500 * time.Millisecond}},
		{"interval: 0\n", nums{}},
	}
	for _, c := range ok {
		var got nums
		if err := DecodeYAML([]byte(c.in), &got); err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"delta_ms: 0500\n", `delta_ms: bad value "0500" (line 1): want plain decimal digits`},
		{"delta_ms: 0x1f4\n", `delta_ms: bad value "0x1f4" (line 1): want plain decimal digits`},
		{"delta_ms: 0o764\n", "delta_ms: bad value"},
		{"delta_ms: 0b111\n", "delta_ms: bad value"},
		{"delta_ms: 1_000\n", "delta_ms: bad value"},
		{"delta_ms: +500\n", "delta_ms: bad value"},
		{"delta_ms: -1\n", "no sign"},
		{"delta_ms: 1e3\n", `delta_ms: bad value "1e3" (line 1): want plain decimal digits (like 500): no sign, leading zero, base prefix (0x, 0o, 0b), underscore or exponent`},
		{"delta_ms: fast\n", `delta_ms: want an integer in plain decimal (like 500), got "fast" (line 1)`},
		{"delta_ms: 500.0\n", "delta_ms: want an integer"},
		{"delta_ms: '500'\n", "delta_ms: want an integer"},
		{"delta_ms: .inf\n", "delta_ms: want an integer"},
		{"delta_ms: 18446744073709551616\n", "delta_ms: bad value"},
		{"domain: 256\n", `domain: bad value "256" (line 1): outside 0..=255`},
		{"priority: -0\n", "priority: bad value"},
		{"priority: -07\n", "priority: bad value"},
		{"priority: --7\n", "priority: "},
		{"small: -129\n", "small: bad value \"-129\" (line 1): outside -128..=127"},
		{"small: 128\n", "outside -128..=127"},
		{"interval: 5\n", `interval: bad value "5" (line 1): want a Go duration`},
		{"interval: [1s]\n", "interval: want a single value"},
	}
	for _, c := range bad {
		var got nums
		err := DecodeYAML([]byte(c.in), &got)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: got %v, want %q", c.in, err, c.msg)
		}
	}
}

func TestParseUintAndInt(t *testing.T) {
	for _, c := range []struct {
		s    string
		bits int
		ok   bool
	}{
		{"0", 8, true}, {"255", 8, true}, {"256", 8, false}, {"00", 64, false}, {"", 64, false},
		{" 1", 64, false}, {"1 ", 64, false}, {"٣", 64, false}, {"18446744073709551615", 64, true},
	} {
		_, err := ParseUint(c.s, c.bits)
		if (err == nil) != c.ok {
			t.Errorf("ParseUint(%q, %d): %v", c.s, c.bits, err)
		}
	}
	for _, c := range []struct {
		s    string
		want int64
		ok   bool
	}{
		{"-9223372036854775808", math.MinInt64, true}, {"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775809", 0, false}, {"9223372036854775808", 0, false}, {"-", 0, false}, {"-0", 0, false},
	} {
		got, err := ParseInt(c.s, 64)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseInt(%q): %d %v", c.s, got, err)
		}
	}
}

// FuzzDecimal: the number rule against a naive definition of it (accepted
// exactly when strconv reads the text in base 10 and writes it back the
// same), and the round trip of every accepted text.
func FuzzDecimal(f *testing.F) {
	for _, s := range []string{"0", "500", "0500", "0x1f4", "1_000", "+1", "-1", "-0", "1e3", "18446744073709551615",
		"18446744073709551616", "-9223372036854775808", "", " 5", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, uerr := ParseUint(s, 64)
		nu, nerr := strconv.ParseUint(s, 10, 64)
		naiveOK := nerr == nil && strconv.FormatUint(nu, 10) == s
		if (uerr == nil) != naiveOK || uerr == nil && u != nu {
			t.Fatalf("ParseUint(%q) = %d, %v; naive %d, %v", s, u, uerr, nu, naiveOK)
		}
		i, ierr := ParseInt(s, 64)
		ni, nerr := strconv.ParseInt(s, 10, 64)
		naiveOK = nerr == nil && strconv.FormatInt(ni, 10) == s
		if (ierr == nil) != naiveOK || ierr == nil && i != ni {
			t.Fatalf("ParseInt(%q) = %d, %v; naive %d, %v", s, i, ierr, ni, naiveOK)
		}
		for _, bits := range []int{8, 16, 32} {
			v, err := ParseUint(s, bits)
			if err == nil && (v>>bits != 0 || uerr != nil || v != u) {
				t.Fatalf("ParseUint(%q, %d) = %d", s, bits, v)
			}
		}
	})
}
