package lograte

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sink is an slog.Handler that keeps every record.
type sink struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (s *sink) Enabled(context.Context, slog.Level) bool { return true }
func (s *sink) Handle(_ context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r.Clone())
	return nil
}
func (s *sink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *sink) WithGroup(string) slog.Handler      { return s }

func (s *sink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.recs))
	for _, r := range s.recs {
		var b strings.Builder
		b.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// manual is a clock the test advances.
type manual struct {
	mu sync.Mutex
	t  time.Time
}

func (m *manual) Now() time.Time { m.mu.Lock(); defer m.mu.Unlock(); return m.t }
func (m *manual) add(d time.Duration) {
	m.mu.Lock()
	m.t = m.t.Add(d)
	m.mu.Unlock()
}

func newTest(burst, maxKeys int) (*Logger, *sink, *manual) {
	s := &sink{}
	clk := &manual{t: time.Unix(1000, 0)}
	return New(slog.New(s), Config{Interval: time.Minute, Burst: burst, MaxKeys: maxKeys, Now: clk.Now}), s, clk
}

// A flood on one key logs Burst lines, then one summary per interval with
// the count and the last suppressed line's fields; other keys are not
// affected.
func TestBurstThenSummary(t *testing.T) {
	r, s, clk := newTest(2, 0)
	defer r.Close()
	for i := range 1000 {
		r.Warn("busy", "refused", "peer", i)
	}
	r.Warn("mac", "bad mac", "peer", "x")
	want := []string{
		"WARN refused peer=0",
		"WARN refused peer=1",
		"WARN bad mac peer=x",
	}
	if got := s.lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Pending() != 998 {
		t.Fatalf("Pending %d, want 998", r.Pending())
	}
	r.Flush() // the window has not ended: nothing yet
	if n := len(s.lines()); n != 3 {
		t.Fatalf("%d lines after an early Flush", n)
	}
	clk.add(time.Minute)
	r.Flush()
	want = append(want, "WARN refused (rate-limited: suppressed lines like this one, the last shown) peer=999 suppressed=998 suppressed_in=1m0s")
	if got := s.lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Pending() != 0 {
		t.Fatalf("Pending %d after the summary", r.Pending())
	}
	// A new window: the burst is back.
	if !r.Warn("busy", "refused", "peer", 1000) {
		t.Fatal("the first line of a new window was suppressed")
	}
}

// A line arriving after its key's window ended reports the old window's
// count first, even without Flush.
func TestSummaryBeforeNextWindowsLine(t *testing.T) {
	r, s, clk := newTest(1, 0)
	defer r.Close()
	r.Warn("k", "a", "n", 1)
	r.Warn("k", "a", "n", 2)
	r.Warn("k", "a", "n", 3)
	clk.add(2 * time.Minute)
	r.Warn("k", "a", "n", 4)
	got := s.lines()
	if len(got) != 3 || !strings.Contains(got[1], "n=3 suppressed=2") || got[2] != "WARN a n=4" {
		t.Fatalf("lines: %q", got)
	}
}

// The number of keys is bounded: once MaxKeys are tracked, new keys share
// OtherKey, so made-up keys cannot grow the log or the map.
func TestKeysBounded(t *testing.T) {
	r, s, _ := newTest(1, 4)
	defer r.Close()
	for i := range 100 {
		r.Warn(fmt.Sprintf("key-%d", i), "line", "i", i)
	}
	if n := len(s.lines()); n != 5 { // 4 keys + the first line of "other"
		t.Fatalf("%d lines from 100 keys with MaxKeys 4: %q", n, s.lines())
	}
	if len(r.keys) != 5 {
		t.Fatalf("%d keys tracked", len(r.keys))
	}
}

// Keys idle for a whole window are forgotten when room is needed.
func TestIdleKeysPruned(t *testing.T) {
	r, s, clk := newTest(1, 2)
	defer r.Close()
	r.Warn("a", "x")
	r.Warn("b", "x")
	clk.add(time.Minute)
	if !r.Warn("c", "x") {
		t.Fatalf("a new key was suppressed although the others were idle: %q", s.lines())
	}
	if _, ok := r.keys[OtherKey]; ok {
		t.Fatal("went to other although idle keys could be pruned")
	}
}

// Close reports every pending count, at once, and stops the timer.
func TestCloseReportsPending(t *testing.T) {
	r, s, _ := newTest(1, 0)
	r.Warn("k", "x")
	r.Warn("k", "x", "last", true)
	r.Close()
	got := s.lines()
	if len(got) != 2 || !strings.Contains(got[1], "last=true suppressed=1") {
		t.Fatalf("lines: %q", got)
	}
	r.Close() // idempotent
}

// The timer reports a flood that stopped, without another line or Flush.
func TestTimerReports(t *testing.T) {
	s := &sink{}
	r := New(slog.New(s), Config{Interval: 20 * time.Millisecond})
	defer r.Close()
	r.Warn("k", "x")
	r.Warn("k", "x")
	deadline := time.Now().Add(10 * time.Second)
	for len(s.lines()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no summary from the timer: %q", s.lines())
		}
		time.Sleep(5 * time.Millisecond) // polling for the timer's line
	}
	if got := s.lines(); !strings.Contains(got[1], "suppressed=1") {
		t.Fatalf("lines: %q", got)
	}
}

// Concurrent use is safe and the count is exact.
func TestConcurrentCountsExact(t *testing.T) {
	r, s, _ := newTest(1, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				r.Warn("k", "x")
			}
		}()
	}
	wg.Wait()
	r.Close()
	got := s.lines()
	if len(got) != 2 || !strings.HasSuffix(got[1], "suppressed=3999 suppressed_in=1m0s") {
		t.Fatalf("lines: %q", got)
	}
}
