package membership

import (
	"bytes"
	"log"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// The kind of a memberlist line stops at the first value formatted into
// it, so senders, names and numbers never make new kinds.
func TestLineKind(t *testing.T) {
	for in, want := range map[string]string{
		"Decrypt packet failed: No installed keys could decrypt the message from=1.2.3.4:5": "Decrypt packet failed",
		"Got ping for unexpected node 'mallory' from=1.2.3.4:5":                             "Got ping for unexpected node",
		"Received invalid msgType (77) from=1.2.3.4:5":                                      "Received invalid msgType",
		"discarding packet with unacceptable label \"x\": from=1.2.3.4:5":                   "discarding packet with unacceptable label",
		"failed to receive and remove the stream label header: EOF from=1.2.3.4:5":          "failed to receive and remove the stream label header",
		"Failed push/pull merge: refused from=1.2.3.4:5":                                    "Failed push/pull merge",
		"no values at all": "no values at all",
	} {
		if got := lineKind(in); got != want {
			t.Errorf("lineKind(%q) = %q, want %q", in, got, want)
		}
	}
}

// A flood of one kind of memberlist error from many senders is one line,
// and a summary with the count when the limiter closes; other kinds and
// debug lines are not held back.
func TestLogBridgeRateLimits(t *testing.T) {
	sink := newLogSink(t, "bridge")
	w := newSlogWriter(slog.New(sink), time.Now)
	l := log.New(w, "", 0)
	for i := range 1000 {
		l.Printf("[ERR] memberlist: Decrypt packet failed: No installed keys could decrypt the message from=10.0.%d.%d:7946", i/250, i%250)
	}
	l.Printf("[WARN] memberlist: Got invalid checksum for UDP packet: 1, 2")
	l.Printf("[DEBUG] memberlist: Stream connection from=1.2.3.4:5")
	l.Printf("[DEBUG] memberlist: Stream connection from=1.2.3.4:6")
	w.close()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(sink.lines), strings.Join(sink.lines, "\n"))
	}
	if !strings.HasPrefix(sink.lines[0], "ERROR Decrypt packet failed") || !strings.Contains(sink.lines[0], "from=10.0.0.0:7946") {
		t.Fatalf("first line %q", sink.lines[0])
	}
	summary := sink.lines[4]
	if !strings.Contains(summary, "from=10.0.3.249:7946") || !strings.Contains(summary, "suppressed=999") {
		t.Fatalf("summary %q: want the last sender and suppressed=999", summary)
	}
}

// Garbage datagrams at a real gossip port: memberlist logs a decrypt
// failure for each, the bridge lets one through and counts the rest.
func TestGarbageGossipLogBounded(t *testing.T) {
	trust := newTrust()
	k := newKey(t)
	trust.set("node-a", k)
	a := startTestNode(t, "node-a", k, trust)
	c, err := net.Dial("udp", a.m.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 300
	garbage := bytes.Repeat([]byte{0x01}, 100)
	for range sent {
		if _, err := c.Write(garbage); err != nil {
			t.Fatal(err)
		}
	}
	a.logs.waitLog(t, converge, "Decrypt packet failed")
	deadline := time.Now().Add(converge)
	for a.m.mlLog.rl.Pending() < sent/2 { // loopback may drop a few datagrams
		if time.Now().After(deadline) {
			t.Fatalf("only %d decrypt failures counted of %d datagrams", a.m.mlLog.rl.Pending(), sent)
		}
		time.Sleep(10 * time.Millisecond) // polling memberlist's packet handler
	}
	count := func() int {
		a.logs.mu.Lock()
		defer a.logs.mu.Unlock()
		n := 0
		for _, l := range a.logs.lines {
			if strings.Contains(l, "Decrypt packet failed") {
				n++
			}
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d decrypt-failure lines for %d garbage datagrams, want 1 until the window ends", n, sent)
	}
	pending := a.m.mlLog.rl.Pending()
	a.m.Close()
	if n := count(); n != 2 {
		t.Fatalf("%d decrypt-failure lines after Close, want the first and one summary", n)
	}
	a.logs.waitLog(t, time.Second, "Decrypt packet failed", "suppressed=")
	t.Logf("%d garbage datagrams: 2 log lines, %d counted in the summary (at least %d)", sent, pending, sent/2)
}
