package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/tckclk/tckclk/internal/secret"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testSecret = "tckclk-conformance-command-test-secret-0123456789"

// writeSecret writes a secret file with the given mode.
func writeSecret(t *testing.T, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(testSecret+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(kv ...string) secret.Lookup {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func runCmd(t *testing.T, e secret.Lookup, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb, e)
	return code, out.String(), errb.String()
}

// closedAddr is a loopback port nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// SPEC §8: bad usage exits 2 and says what is wrong, before any traffic.
func TestUsageErrors(t *testing.T) {
	good := writeSecret(t, 0o600)
	loose := writeSecret(t, 0o644)
	addr := "127.0.0.1:7970"
	for _, tc := range []struct {
		name string
		env  secret.Lookup
		args []string
		want string
	}{
		{"no addr", env(), []string{"--secret-file", good}, "--addr"},
		{"bad addr", env(), []string{"--addr", "nohost", "--secret-file", good}, "--addr"},
		{"no secret", env(), []string{"--addr", addr}, "no clock secret"},
		{"loose secret file", env(), []string{"--addr", addr, "--secret-file", loose}, "0644"},
		{"short secret", env(secret.EnvSecret, "short"), []string{"--addr", addr}, "at least 32"},
		{"ambiguous secret", env(secret.EnvSecret, testSecret), []string{"--addr", addr, "--secret-file", good}, "ambiguous"},
		{"bad format", env(), []string{"--addr", addr, "--secret-file", good, "--format", "xml"}, "--format"},
		{"unknown check", env(), []string{"--addr", addr, "--secret-file", good, "--only", "1.2-1,9.9-9"}, `"9.9-9"`},
		{"empty check", env(), []string{"--addr", addr, "--secret-file", good, "--only", "1.2-1,,1.2-2"}, "--only"},
		{"bad timeout", env(), []string{"--addr", addr, "--secret-file", good, "--timeout", "0s"}, "--timeout"},
		{"unknown flag", env(), []string{"--addr", addr, "--secret-file", good, "--verbose"}, "verbose"},
		{"argument", env(), []string{"--addr", addr, "--secret-file", good, "extra"}, "extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(t, tc.env, tc.args...)
			if code != exitUsage || !strings.Contains(errs, tc.want) || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errs, tc.want)
			}
			if strings.Contains(errs, testSecret) {
				t.Fatal("the secret was printed")
			}
		})
	}
	if code, _, errs := runCmd(t, env(), "-h"); code != exitOK || !strings.Contains(errs, "2.1-8") {
		t.Errorf("-h: exit %d, %q", code, errs)
	}
}

// An agent that cannot be reached fails every MUST (the plausibility SHOULD
// warns): exit 1 and the closing line.
func TestUnreachableExitsOne(t *testing.T) {
	code, out, _ := runCmd(t, env(), "--addr", closedAddr(t), "--secret-file", writeSecret(t, 0o600))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitFail || lines[len(lines)-1] != "0 passed, 21 failed, 1 warned" {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// closer accepts connections and closes each at once: it passes the checks
// of an agent that must hang up on a client (and no other).
func closer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// --only runs a subset; no FAIL exits 0; json and junit carry the results
// on stdout and the closing line on stderr. The secret comes from the
// environment (SPEC §1.4).
func TestOnlyAndFormats(t *testing.T) {
	addr := closer(t)
	e := env(secret.EnvSecret, testSecret)
	code, out, _ := runCmd(t, e, "--addr", addr, "--only", "2.1-4, 2.1-3")
	if code != exitOK || !strings.Contains(out, "2.1-3  §2.1     MUST    PASS") || !strings.HasSuffix(out, "2 passed, 0 failed, 0 warned\n") {
		t.Fatalf("text: exit %d\n%s", code, out)
	}

	code, out, errs := runCmd(t, e, "--addr", addr, "--only", "2.1-4,1.2-1", "--format", "json", "--timeout", "500ms")
	var rep struct {
		Passed, Failed int
		TimeoutMs      int64 `json:"timeout_ms"`
		Results        []struct{ ID, Result string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if code != exitFail || rep.Passed != 1 || rep.Failed != 1 || rep.TimeoutMs != 500 || len(rep.Results) != 2 ||
		rep.Results[0].ID != "1.2-1" || rep.Results[0].Result != "FAIL" || strings.TrimSpace(errs) != "1 passed, 1 failed, 0 warned" {
		t.Fatalf("json: exit %d, %+v, stderr %q", code, rep, errs)
	}

	code, out, _ = runCmd(t, e, "--addr", addr, "--only", "2.1-4,1.2-1", "--format", "junit")
	var ju struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
	}
	if err := xml.Unmarshal([]byte(out), &ju); err != nil || code != exitFail || ju.Tests != 2 || ju.Failures != 1 {
		t.Fatalf("junit: exit %d, %+v, %v\n%s", code, ju, err, out)
	}
}
