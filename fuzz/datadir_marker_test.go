package fuzz

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"github.com/tckclk/tckclk/node/datadir"
)

// FuzzDataDirMarker: the marker reader (FAILED and retired markers, the
// raft high-water mark) never panics, and every key and value it returns is
// one printable line of at most 512 bytes; a naive line splitter agrees on
// which keys exist (for input without NUL or overlong lines).
func FuzzDataDirMarker(f *testing.F) {
	f.Add([]byte("reason: rollback\nat_unix_ms: 1700000000000\n"))
	f.Add([]byte("retired: x\nreason: clockhealth: FAILED (step)\n"))
	f.Add([]byte("last_index: 31\nterm: 3\n"))
	f.Add([]byte("\xff\xfe: \x00\n:\n: :\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := datadir.ParseMarker(bytes.NewReader(b))
		if err != nil {
			return
		}
		for k, v := range m {
			for _, s := range []string{k, v} {
				if len(s) > 512 || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
					t.Fatalf("unsafe text %q from %q", s, b)
				}
			}
		}
		if len(b) > 4000 || bytes.ContainsAny(b, "\r") {
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, _, ok := strings.Cut(line, ": ")
			if !ok || k == "" || len(k) > 32 || !isPlain(k) {
				continue
			}
			if _, found := m[k]; !found {
				t.Fatalf("key %q of line %q missing from %q", k, line, m)
			}
		}
	})
}

func isPlain(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}
