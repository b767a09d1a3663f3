package membership

import (
	"sync"
	"time"
)

// Refusal log rate: logBurst lines at once, then one per logEvery.
const (
	logBurst = 10
	logEvery = 6 * time.Second
)

// logLimiter is a token bucket for log lines an outsider can cause. It
// counts the lines it held back, so the next line says how many.
type logLimiter struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
	held   uint64
	init   bool
}

// allow reports whether a line may be written at now, and how many were
// held back since the last one written.
func (l *logLimiter) allow(now time.Time) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.init {
		l.tokens, l.last, l.init = logBurst, now, true
	}
	if d := now.Sub(l.last); d > 0 {
		l.tokens = min(logBurst, l.tokens+float64(d)/float64(logEvery))
		l.last = now
	}
	if l.tokens < 1 {
		l.held++
		return false, 0
	}
	l.tokens--
	held := l.held
	l.held = 0
	return true, held
}
