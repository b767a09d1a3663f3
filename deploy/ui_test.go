package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chromium is headless Chromium (Debian's chromium) on PATH, or a skip.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (Debian package chromium); CI installs it")
	return ""
}

// browse loads url in a fresh headless Chromium and lets the page poll
// for 6 s of virtual time; with shot set it writes a 1500×800 screenshot
// there, else it returns the rendered DOM.
func browse(t *testing.T, browser, url, shot string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--window-size=1500,800", "--virtual-time-budget=6000"}
	if shot != "" {
		args = append(args, "--screenshot="+shot)
	} else {
		args = append(args, "--dump-dom")
	}
	out, err := exec.CommandContext(ctx, browser, append(args, url)...).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

// The banner's background colours (node/api/ui/index.html, :root).
var bannerColours = map[string][3]int{
	"healthy":  {0x1b, 0x7a, 0x34},
	"degraded": {0xa3, 0x52, 0x00},
	"down":     {0xb3, 0x26, 0x1e},
	"unknown":  {0x5f, 0x63, 0x68},
}

// bannerInShot reads the screenshot's pixels: the state whose colour
// covers most of the banner band (the top 80 px, text aside), and its
// share of that band.
func bannerInShot(t *testing.T, file string) (string, float64) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", file, err)
	}
	b := img.Bounds()
	counts := map[string]int{}
	total := 0
	for y := b.Min.Y + 2; y < b.Min.Y+80; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			total++
			for state, c := range bannerColours {
				if near(int(r>>8), c[0]) && near(int(g>>8), c[1]) && near(int(bl>>8), c[2]) {
					counts[state]++
				}
			}
		}
	}
	best := ""
	for state, n := range counts {
		if best == "" || n > counts[best] {
			best = state
		}
	}
	return best, float64(counts[best]) / float64(total)
}

func near(a, b int) bool { return a-b <= 6 && b-a <= 6 }

var (
	bannerState = regexp.MustCompile(`<header id="banner" data-state="([a-z]+)">`)
	bannerTitle = regexp.MustCompile(`<div id="banner-title">([^<]*)</div>`)
	memberRow   = regexp.MustCompile(`<tr data-node="(node-[123])" data-status="([a-z ]+)">(.*?)</tr>`)
)

// pageView is what the rendered page shows: the banner's state and
// title, and each member row's status and cells (HTML).
type pageView struct {
	state, title string
	rows         map[string][2]string // node -> status, row HTML
	dom          string
}

func readPage(dom string) pageView {
	v := pageView{rows: map[string][2]string{}, dom: dom}
	if m := bannerState.FindStringSubmatch(dom); m != nil {
		v.state = m[1]
	}
	if m := bannerTitle.FindStringSubmatch(dom); m != nil {
		v.title = m[1]
	}
	for _, m := range memberRow.FindAllStringSubmatch(dom, -1) {
		v.rows[m[1]] = [2]string{m[2], m[3]}
	}
	return v
}

// awaitPage loads the page until ok accepts what it shows (the page polls
// every 2 s, and gossip and health take a moment to see a change), for
// at most within; then it fails with what the page last showed.
func awaitPage(t *testing.T, browser, url string, within time.Duration, what string, ok func(pageView) bool) pageView {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v := readPage(browse(t, browser, url, ""))
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %s within %v; last banner %q %q, rows %v:\n%s", what, within, v.state, v.title, v.rows, v.dom)
		}
	}
}

// awaitShot takes screenshots until the banner's pixels show state (at
// least 60% of the band in its colour), for at most within; the last
// screenshot stays at file.
func awaitShot(t *testing.T, browser, url, file, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		browse(t, browser, url, file)
		got, share := bannerInShot(t, file)
		if got == state && share > 0.6 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("screenshot %s: the banner is %q (%.0f%% of its band), want %q", file, got, share*100, state)
		}
	}
}

// The status page (/ui/) in a real browser against the demo cluster (SPEC
// §3.5's cluster health): headless Chromium loads it from node-1 with the
// admin token in the URL fragment. While every voter is healthy the
// banner says so in green — read from the DOM and from the screenshot's
// pixels — and each member row shows its status, generation, gossip,
// Raft term (node-1's own; every server's when it leads), index, lag and
// clock bound against Δ/2 with its history. Then a
// voter that neither leads nor serves the page is stopped (SIGSTOP: the
// demo's supervisor restarts exited nodes): the banner turns to
// "Degraded" in amber (DOM and pixels) and that member is shown dead or
// not answering, never healthy, with its clock unknown. Then the other
// voter is stopped too: no quorum, a red banner pointing at the runbook.
// Screenshots go to $TCKCLK_UI_SCREENSHOTS when set.
func TestStatusPageInChromium(t *testing.T) {
	browser := chromium(t)
	p, work := runDemo(t, 8)
	tokenBytes, err := os.ReadFile(work + "/keys/admin.token")
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenBytes))
	base := fmt.Sprintf("http://127.0.0.1:%d", p[0])
	url := base + "/ui/#token=" + token
	shots := os.Getenv("TCKCLK_UI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	healthyRow := regexp.MustCompile(`^<td( class="leader")?>node-[123](<span class="star">★</span>)?</td><td class="num">1</td>` +
		`<td><span class="pill ok">(leader|healthy)</span></td><td>voter</td><td>voter</td><td>alive</td>` +
		`<td class="num"( title="[^"]+")?>\d*</td><td class="num">\d+</td><td class="num">\d+</td>.*<td><span class="pill ok">healthy</span></td>` +
		`<td class="num">\d+ / 6000 ms<span class="bar"><span style="width: [0-9.]+%;"></span></span></td><td><svg`)
	v := awaitPage(t, browser, url, 3*time.Minute, "three healthy voters under a green banner", func(v pageView) bool {
		healthy := 0
		for _, r := range v.rows {
			if healthyRow.MatchString(r[1]) {
				healthy++
			}
		}
		return v.state == "healthy" && healthy == 3
	})
	if !regexp.MustCompile(`^<td>node-1</td><td class="num">1</td><td><span class="pill ok">healthy</span></td><td>voter</td><td>voter</td><td>alive</td><td class="num">[1-9]\d*</td>|^<td class="leader">node-1`).MatchString(v.rows["node-1"][1]) {
		t.Errorf("node-1 does not show its Raft term: %s", v.rows["node-1"][1])
	}
	if v.title != "Healthy: tolerates 1 voter failure" {
		t.Errorf("banner title %q", v.title)
	}
	leaders := 0
	for _, r := range v.rows {
		if r[0] == "leader" {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders on the page: %v", leaders, v.rows)
	}
	for _, want := range []string{`<b id="node">node-1 (cluster)</b>`, "Δ 12000 ms", ">ready<", "DEVELOPMENT REFERENCE", "Raft term "} {
		if !strings.Contains(v.dom, want) {
			t.Errorf("page lacks %q:\n%s", want, v.dom)
		}
	}
	if strings.Contains(v.dom, token) {
		t.Error("the admin token is in the rendered page")
	}
	awaitShot(t, browser, url, filepath.Join(shots, "ui-healthy.png"), "healthy", 2*time.Minute)

	// Stop a voter that neither leads nor serves the page.
	var st struct{ Leader string }
	req, _ := http.NewRequest("GET", base+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Leader == "" {
		t.Fatalf("node-1's status: leader %q, %v", st.Leader, err)
	}
	victim := "node-2"
	if st.Leader == victim {
		victim = "node-3"
	}
	// stop sends a node SIGSTOP (SIGCONT at cleanup, before the demo's own
	// cleanup stops it).
	stop := func(name string) {
		raw, err := os.ReadFile(filepath.Join(work, "run", name+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	}
	stop(victim)
	stoppedRow := regexp.MustCompile(`<span class="pill bad">(dead|no answer)</span>.*<span class="pill">unknown</span><span class="why">last said healthy</span>`)
	v = awaitPage(t, browser, url, 3*time.Minute, victim+" dead or not answering under an amber banner", func(v pageView) bool {
		r, ok := v.rows[victim]
		return v.state == "degraded" && ok && stoppedRow.MatchString(r[1])
	})
	if !strings.HasPrefix(v.title, "Degraded: 1 voter not healthy") {
		t.Errorf("banner title %q", v.title)
	}
	if r := v.rows[victim]; r[0] == "healthy" || strings.Contains(r[1], `pill ok">healthy`) {
		t.Errorf("the stopped %s shows healthy: %v", victim, r)
	}
	if d := regexp.MustCompile(`<div id="banner-detail">([^<]*)</div>`).FindStringSubmatch(v.dom); d == nil ||
		!strings.Contains(d[1], "tolerates 0 voter failures (1 when whole)") || !strings.Contains(d[1], victim+": ") {
		t.Errorf("banner detail %q: want the tolerance and %s's reason", d, victim)
	}
	awaitShot(t, browser, url, filepath.Join(shots, "ui-degraded.png"), "degraded", 2*time.Minute)

	// Stop the other voter too: no quorum, and the banner turns red with
	// the runbook.
	second := "node-2"
	if victim == second {
		second = "node-3"
	}
	stop(second)
	v = awaitPage(t, browser, url, 3*time.Minute, "a red banner with the runbook", func(v pageView) bool {
		return v.state == "down" && strings.Contains(v.dom, `<div id="banner-runbook" style="display: block;">Runbook: docs/operations.md, section “No leader or no quorum”</div>`)
	})
	if !regexp.MustCompile(`^(No leader: nothing can be granted|No quorum: 1 of 3 voters healthy, 2 needed)$`).MatchString(v.title) {
		t.Errorf("banner title without quorum %q", v.title)
	}
	for _, id := range []string{victim, second} {
		if r := v.rows[id]; r[0] == "healthy" || r[0] == "leader" {
			t.Errorf("the stopped %s shows %s", id, r[0])
		}
	}
	awaitShot(t, browser, url, filepath.Join(shots, "ui-down.png"), "down", 2*time.Minute)
}
