package membership

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/lograte"
)

// slogWriter routes memberlist's log.Logger output ("[WARN] memberlist: …")
// into slog at the matching level, so nothing goes to stderr. Warnings
// and errors are rate-limited per kind of line (lograte): anyone who can
// reach the gossip port can make memberlist log one (a datagram that does
// not decrypt, a stream with a bad label), and a flood of them must not
// flood the log. Debug and info lines pass unlimited.
type slogWriter struct {
	l  *slog.Logger
	rl *lograte.Logger
}

// memberlistLogInterval is the window of the rate limit: per kind of
// line, one line and then one summary with the count per window.
const memberlistLogInterval = 10 * time.Second

func newSlogWriter(l *slog.Logger, now func() time.Time) *slogWriter {
	return &slogWriter{l: l, rl: lograte.New(l, lograte.Config{Interval: memberlistLogInterval, Now: now})}
}

var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG] ", slog.LevelDebug},
	{"[INFO] ", slog.LevelInfo},
	{"[WARN] ", slog.LevelWarn},
	{"[ERR] ", slog.LevelError},
	{"[ERROR] ", slog.LevelError},
}

func (w *slogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\n")
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if rest, ok := strings.CutPrefix(msg, l.prefix); ok {
			msg, level = rest, l.level
			break
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	switch {
	case strings.Contains(msg, errRefused.Error()):
		level = slog.LevelDebug // our own refusal log line (once per peer, address, reason) says it
	case strings.Contains(msg, errMergeRefused.Error()):
		level = slog.LevelWarn // memberlist says ERR; it is a stranger at the door, not our fault
	}
	if level < slog.LevelWarn {
		w.l.Log(context.Background(), level, msg, "component", "memberlist")
	} else {
		w.rl.Log(context.Background(), level, level.String()+" "+lineKind(msg), msg, "component", "memberlist")
	}
	return len(p), nil
}

// close reports the counts still pending and stops the limiter's timer.
func (w *slogWriter) close() { w.rl.Close() }

// lineKind is the fixed text memberlist starts a line with, up to the
// first value it formats in (an address, a name, a number, an error):
// "Decrypt packet failed: … from=1.2.3.4:5" → "Decrypt packet failed".
// So the rate limit is per kind of line, never per sender.
func lineKind(msg string) string {
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == ' ' || c == '/' || c == '-') {
			return strings.TrimSpace(msg[:i])
		}
	}
	return msg
}

// newMemberlistLogger is a memberlist logger whose limiter is never
// closed (tests that build memberlist by hand).
func newMemberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(newSlogWriter(l, time.Now), "", 0)
}
