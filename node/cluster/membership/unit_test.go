package membership

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The event queue never blocks a producer: when full it drops the oldest.
func TestEventQueueDropsOldest(t *testing.T) {
	drops := 0
	q := newEventQueue(2, func() { drops++ })
	for i := range 5 {
		q.push(Event{Type: EventUpdate, Member: Member{ID: string(rune('a' + i))}})
	}
	if q.droppedCount() != 3 || drops != 3 {
		t.Fatalf("dropped %d (callback %d), want 3", q.droppedCount(), drops)
	}
	for _, want := range []string{"d", "e"} {
		if e := <-q.ch; e.Member.ID != want {
			t.Fatalf("got %q, want %q (newest kept in order)", e.Member.ID, want)
		}
	}
	q.close()
	q.close()
	q.push(Event{Type: EventJoin}) // after close: ignored, no panic
	if _, ok := <-q.ch; ok {
		t.Fatal("event delivered after close")
	}
}

// memberlist's log.Logger lines arrive in slog at their own level.
func TestLogBridgeLevels(t *testing.T) {
	sink := newLogSink(t, "bridge")
	l := newMemberlistLogger(slog.New(sink))
	l.Printf("[WARN] memberlist: Was able to connect to x")
	l.Printf("[ERR] memberlist: Failed push/pull merge: %s", errMergeRefused)
	l.Printf("[WARN] memberlist: ignoring alive message for 'm': %s", errRefused)
	l.Printf("[DEBUG] memberlist: Stream connection from=1.2.3.4:5")
	l.Printf("no prefix")
	want := []string{
		"WARN Was able to connect to x component=memberlist",
		"WARN Failed push/pull merge: " + errMergeRefused.Error() + " component=memberlist",
		"DEBUG ignoring alive message for 'm': " + errRefused.Error() + " component=memberlist",
		"DEBUG Stream connection from=1.2.3.4:5 component=memberlist",
		"INFO no prefix component=memberlist",
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if strings.Join(sink.lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("bridged lines:\n%s\nwant:\n%s", strings.Join(sink.lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestNewValidates(t *testing.T) {
	trust := newTrust()
	k := newKey(t)
	trust.set("n", k)
	good := func() Config {
		c := DefaultConfig()
		meta := content(sampleMeta())
		copy(meta.PublicKey[:], k)
		c.NodeName, c.Secret, c.Trust, c.Meta, c.Key = "n", testSecret, trust, func() Meta { return meta }, privOf(t, k)
		return c
	}
	if m, err := New(good()); err != nil {
		t.Fatalf("good config refused: %v", err)
	} else if m.LocalAddr() != "" || m.HealthScore() != 0 {
		t.Fatal("LocalAddr/HealthScore before Start")
	}
	for name, mut := range map[string]func(*Config){
		"no name":          func(c *Config) { c.NodeName = "" },
		"secret 20":        func(c *Config) { c.Secret = testSecret[:20] },
		"no secret":        func(c *Config) { c.Secret = nil },
		"no meta":          func(c *Config) { c.Meta = nil },
		"no key":           func(c *Config) { c.Key = nil },
		"other key":        func(c *Config) { c.Key = privOf(t, newKey(t)) },
		"no trust":         func(c *Config) { c.Trust = nil },
		"port":             func(c *Config) { c.BindPort = 70000 },
		"bind addr":        func(c *Config) { c.BindAddr = "localhost" },
		"advertise":        func(c *Config) { c.AdvertiseAddr = "not-an-ip" },
		"backoff":          func(c *Config) { c.JoinBackoffMax = c.JoinBackoffMin / 2 },
		"rejoin":           func(c *Config) { c.RejoinInterval = 0 },
		"events":           func(c *Config) { c.EventBuffer = 0 },
		"join addr":        func(c *Config) { c.JoinAddrs = []string{"no-port"} },
		"bad meta":         func(c *Config) { c.Meta = func() Meta { return Meta{} } },
		"self not trusted": func(c *Config) { c.NodeName = "other" },
		"self key differs": func(c *Config) { c.Meta = func() Meta { return content(sampleMeta()) } },
		"other node id":    func(c *Config) { prev := c.Meta; c.Meta = func() Meta { m := prev(); m.NodeID = "other"; return m } },
	} {
		c := good()
		mut(&c)
		_, err := New(c)
		if err == nil || !strings.HasPrefix(err.Error(), "membership: ") {
			t.Errorf("%s: err = %v, want a membership: error", name, err)
		}
		if strings.HasPrefix(name, "self") && !errors.Is(err, ErrSelfTrust) {
			t.Errorf("%s: err = %v, want ErrSelfTrust", name, err)
		}
	}
}

func TestLifecycleErrors(t *testing.T) {
	trust := newTrust()
	k := newKey(t)
	trust.set("node-l", k)
	n := newTestNode(t, "node-l", k, trust)
	ctx := context.Background()
	if err := n.m.UpdateMeta(ctx); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("UpdateMeta before Start: %v", err)
	}
	if err := n.m.Leave(time.Second); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Leave before Start: %v", err)
	}
	if err := n.m.Start(); err != nil {
		t.Fatal(err)
	}
	if err := n.m.Start(); !errors.Is(err, ErrStartedTwice) {
		t.Fatalf("second Start: %v", err)
	}
	_, port, _ := net.SplitHostPort(n.m.LocalAddr())
	taken := newTestNode(t, "node-l", k, trust, func(c *Config) { c.BindPort, _ = strconv.Atoi(port) })
	if err := taken.m.Start(); err == nil || !strings.Contains(err.Error(), "membership: starting memberlist") {
		t.Fatalf("Start on a port in use: %v", err)
	}
	if err := n.m.UpdateMeta(ctx); err != nil { // alone: no peer to wait for
		t.Fatalf("UpdateMeta alone: %v", err)
	}
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if err := n.m.UpdateMeta(expired); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("UpdateMeta with an expired context: %v", err)
	}
	if err := n.m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := n.m.UpdateMeta(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("UpdateMeta after Close: %v", err)
	}
	if err := n.m.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Leave after Close: %v", err)
	}
	if err := n.m.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	for range n.m.Events() { // ends only because Close closed it (its own join may be buffered first)
	}
}
