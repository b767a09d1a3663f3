package secret

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = "0123456789abcdef0123456789abcdef" // 32 bytes

func writeSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// SPEC §1.4
func TestLoadClock(t *testing.T) {
	okFile := writeSecret(t, good+"\n", 0o600)
	twoLF := writeSecret(t, good+"\n\n", 0o600)
	short := writeSecret(t, good[:31]+"\n", 0o600)
	open := writeSecret(t, good, 0o644)
	groupRead := writeSecret(t, good, 0o640)
	cases := []struct {
		name    string
		env     Lookup
		file    string
		want    string // secret value, or "" when an error is expected
		errWant string
	}{
		{name: "env", env: env(EnvSecret, good), want: good},
		{name: "config file, LF dropped", env: env(), file: okFile, want: good},
		{name: "env file", env: env(EnvSecretFile, okFile), want: good},
		{name: "only one LF dropped", env: env(), file: twoLF, want: good + "\n"},
		{name: "env and file", env: env(EnvSecret, good), file: okFile, errWant: "ambiguous"},
		{name: "env and env file", env: env(EnvSecret, good, EnvSecretFile, okFile), errWant: "ambiguous"},
		{name: "two different files", env: env(EnvSecretFile, okFile), file: twoLF, errWant: "ambiguous"},
		{name: "same file twice", env: env(EnvSecretFile, okFile), file: okFile, want: good},
		{name: "short env", env: env(EnvSecret, good[:31]), errWant: "31 bytes"},
		{name: "short file", env: env(), file: short, errWant: "31 bytes"},
		{name: "world readable", env: env(), file: open, errWant: "mode 0644"},
		{name: "group readable", env: env(), file: groupRead, errWant: "mode 0640"},
		{name: "missing file", env: env(), file: "/nonexistent/secret", errWant: "no such file"},
		{name: "nothing set", env: env(), errWant: "no clock secret"},
		{name: "directory", env: env(), file: t.TempDir(), errWant: "not a regular file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := LoadClock(tc.env, tc.file)
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("got %v, want error containing %q", err, tc.errWant)
				}
				if strings.Contains(err.Error(), good[:20]) {
					t.Fatalf("error leaks the secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(s.Bytes()) != tc.want {
				t.Fatalf("got %q", s.Bytes())
			}
		})
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	s, err := New([]byte(good), "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x", s, s, s, s, s, s), fmt.Sprintf("%v", struct{ S Secret }{s})} {
		if strings.Contains(out, "0123") || strings.Contains(out, "3031") {
			t.Fatalf("secret printed: %s", out)
		}
	}
	if b, _ := s.MarshalText(); strings.Contains(string(b), "0123") {
		t.Fatal("MarshalText leaks")
	}
	if !s.Equal([]byte(good)) || s.Equal([]byte(good+"x")) || s.Equal(nil) {
		t.Fatal("Equal")
	}
}
