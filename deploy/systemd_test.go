// Package deploy_test checks the shipped deployment files against the
// real tools (issue 15, "every shipped config, unit and manifest is
// exercised by a test"): the systemd units with systemd-analyze, their
// credentials against the configs that read them.
package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// units maps each shipped unit to the example config it is installed with.
var units = map[string]string{
	"tckclk-agent.service": "agent/agent.yaml",
	"ticketd.service":      "ticketd/cluster-node.yaml",
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian package systemd): the units are not verified here; CI installs it")
	}
	return p
}

// buildCommands builds the binaries the units run, so verify checks the
// real ExecStart (it refuses a command that does not exist).
func buildCommands(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../cmd/ticketd", "../cmd/tckclk-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// installed copies a unit with /usr/local/bin/ pointing at bin.
func installed(t *testing.T, unit, bin string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("systemd", unit))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "/usr/local/bin/") {
		t.Fatalf("%s: ExecStart is not under /usr/local/bin/ (the install lines say so)", unit)
	}
	p := filepath.Join(t.TempDir(), unit)
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/", bin+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// systemd-analyze verify finds nothing to say about either unit, and
// systemd-analyze security rates each at most 2.5 ("OK") exposure.
func TestSystemdUnitsVerify(t *testing.T) {
	sa := systemdAnalyze(t)
	bin := buildCommands(t)
	for unit := range units {
		p := installed(t, unit, bin)
		out, err := exec.Command(sa, "verify", p).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
		out, err = exec.Command(sa, "security", "--offline=yes", "--threshold=25", p).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze security %s: exposure above 2.5 (%v):\n%s", unit, err, lastLines(string(out), 3))
		}
	}
}

// Each unit is Type=notify (readiness is /readyz, never a bound port),
// loads its secrets with LoadCredential=, and every credential it loads is
// the file its config reads — and the reverse: a typo on either side would
// fail the service at start on a real host.
func TestSystemdCredentialsMatchConfigs(t *testing.T) {
	credPath := regexp.MustCompile(`/run/credentials/([^/\s]+)/([^\s"']+)`)
	for unit, config := range units {
		data, err := os.ReadFile(filepath.Join("systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		u := string(data)
		for _, want := range []string{"\nType=notify\n", "\nNotifyAccess=main\n", "\nNoNewPrivileges=yes\n", "\nProtectSystem=strict\n"} {
			if !strings.Contains(u, want) {
				t.Errorf("%s lacks %q", unit, strings.TrimSpace(want))
			}
		}
		var loaded []string
		for _, line := range strings.Split(u, "\n") {
			if id, ok := strings.CutPrefix(line, "LoadCredential="); ok {
				id, src, _ := strings.Cut(id, ":")
				if !strings.HasPrefix(src, "/etc/tckclk/") {
					t.Errorf("%s: credential %s from %q, want a file under /etc/tckclk/", unit, id, src)
				}
				loaded = append(loaded, id)
			}
		}
		if len(loaded) == 0 {
			t.Errorf("%s loads no credential", unit)
		}
		cfg, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		var used []string
		for _, line := range strings.Split(string(cfg), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range credPath.FindAllStringSubmatch(line, -1) {
				if m[1] != unit {
					t.Errorf("%s reads %s, a credential of %s, not of %s", config, m[0], m[1], unit)
				}
				used = append(used, m[2])
			}
		}
		slices.Sort(loaded)
		slices.Sort(used)
		if !slices.Equal(loaded, used) {
			t.Errorf("%s loads credentials %v but %s reads %v", unit, loaded, config, used)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
