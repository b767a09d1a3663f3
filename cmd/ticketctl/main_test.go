package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/node/api/ctl"
)

// The process wiring: token files are read with the secret rules (a file
// others can read is refused before any request), --version names the
// build. The commands themselves are tested in node/api/ctl.
func TestProcessEnv(t *testing.T) {
	loose := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(loose, []byte("client-token-0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		env := processEnv()
		env.Stdout, env.Stderr = &out, &errb
		return ctl.Main(context.Background(), args, env), out.String(), errb.String()
	}
	if code, _, errs := run("--addr", "http://127.0.0.1:1", "--token-file", loose, "status"); code != 2 || !strings.Contains(errs, "--token-file") || !strings.Contains(errs, "0600") {
		t.Fatalf("loose token file: exit %d %q", code, errs)
	}
	if code, out, _ := run("--version"); code != 0 || !strings.HasPrefix(out, "ticketctl ") || !strings.Contains(out, "revision ") {
		t.Fatalf("--version: exit %d %q", code, out)
	}
}
