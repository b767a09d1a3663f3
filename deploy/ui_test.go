package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The status page (/ui/) in a real browser: headless Chromium (Debian's
// chromium) loads it from a node of the demo cluster with the admin token
// in the URL fragment; the rendered DOM shows every node with its
// suffrage, the leader, and each node's clock bound against Δ/2.
func TestStatusPageInChromium(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no chromium on PATH (Debian package chromium); CI installs it")
	}
	p, work := runDemo(t, 8)
	token, err := os.ReadFile(work + "/keys/admin.token")
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/ui/#token=%s", p[1], strings.TrimSpace(string(token)))
	row := regexp.MustCompile(`<tr data-node="(node-[123])"><td( class="leader")?>node-[123]</td><td>voter</td><td>voter</td><td>(leader)?</td><td>alive</td><td>-</td><td class="ok">healthy</td><td( class="warn")?>(\d+) / 6000 ms</td><td><svg`)
	var dom string
	// The page polls every 2 s; the first render can miss a member that
	// gossip has not shown yet, so look again (bounded).
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--no-first-run", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", url).Output()
		cancel()
		if err != nil {
			t.Fatalf("chromium: %v", err)
		}
		dom = string(out)
		if len(row.FindAllStringSubmatch(dom, -1)) == 3 {
			break
		}
	}
	rows := row.FindAllStringSubmatch(dom, -1)
	if len(rows) != 3 {
		t.Fatalf("rendered page shows %d healthy voters, want 3:\n%s", len(rows), dom)
	}
	leaders := 0
	for _, r := range rows {
		if r[3] == "leader" {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders on the page", leaders)
	}
	for _, want := range []string{`<span id="node">node-2 (cluster)</span>`, "Δ 12000 ms", ">ready<", "DEVELOPMENT REFERENCE"} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q:\n%s", want, dom)
		}
	}
	if strings.Contains(dom, strings.TrimSpace(string(token))) {
		t.Error("the admin token is in the rendered page")
	}
}
