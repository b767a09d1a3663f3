package membership

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// slogWriter routes memberlist's log.Logger output ("[WARN] memberlist: …")
// into slog at the matching level, so nothing goes to stderr.
type slogWriter struct{ l *slog.Logger }

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

func (w slogWriter) Write(p []byte) (int, error) {
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
	w.l.Log(context.Background(), level, msg, "component", "memberlist")
	return len(p), nil
}

func newMemberlistLogger(l *slog.Logger) *log.Logger { return log.New(slogWriter{l}, "", 0) }
