package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultInterval = 10 * time.Second
	DefaultBurst    = 1
	DefaultMaxKeys  = 64
	// OtherKey is where lines go once MaxKeys keys are tracked.
	OtherKey = "other"
)

// Config shapes a Logger; zero values take the defaults.
type Config struct {
	Interval time.Duration    // the window per key; 0 = DefaultInterval
	Burst    int              // lines that pass per key per window; 0 = DefaultBurst
	MaxKeys  int              // keys tracked at once; 0 = DefaultMaxKeys
	Now      func() time.Time // nil = time.Now
}

// Logger is a rate-limited front of an *slog.Logger; safe for concurrent
// use. Close it to stop its timer and report what is still pending.
type Logger struct {
	l   *slog.Logger
	cfg Config

	mu     sync.Mutex
	keys   map[string]*bucket
	timer  *time.Timer
	closed bool
}

type bucket struct {
	start      time.Time // the window's start
	passed     int       // lines that passed in this window
	suppressed uint64    // lines counted, not logged, in this window
	level      slog.Level
	msg        string // the last suppressed line
	args       []any
}

// New returns a Logger writing through l.
func New(l *slog.Logger, cfg Config) *Logger {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Logger{l: l, cfg: cfg, keys: map[string]*bucket{}}
}

// Log logs msg with args at level unless key has used its burst in this
// interval; then the line is only counted. It reports whether it logged.
func (r *Logger) Log(ctx context.Context, level slog.Level, key, msg string, args ...any) bool {
	now := r.cfg.Now()
	r.mu.Lock()
	b := r.bucket(key, now)
	if b == nil || b.passed < r.cfg.Burst {
		if b != nil {
			b.passed++
		}
		r.mu.Unlock()
		r.l.Log(ctx, level, msg, args...)
		return true
	}
	b.suppressed++
	b.level, b.msg, b.args = level, msg, args
	if r.timer == nil && !r.closed {
		r.timer = time.AfterFunc(r.cfg.Interval, r.tick)
	}
	r.mu.Unlock()
	return false
}

// Warn is Log at slog.LevelWarn.
func (r *Logger) Warn(key, msg string, args ...any) bool {
	return r.Log(context.Background(), slog.LevelWarn, key, msg, args...)
}

// bucket returns key's bucket with its window rolled forward to now (a
// finished window's summary is logged first); nil once closed. Called
// with r.mu held.
func (r *Logger) bucket(key string, now time.Time) *bucket {
	if r.closed {
		return nil
	}
	b := r.keys[key]
	if b == nil {
		if len(r.keys) >= r.cfg.MaxKeys {
			r.prune(now)
		}
		if len(r.keys) >= r.cfg.MaxKeys {
			key = OtherKey
			b = r.keys[key]
		}
		if b == nil {
			b = &bucket{start: now}
			r.keys[key] = b
		}
	}
	if now.Sub(b.start) >= r.cfg.Interval {
		r.summarize(b)
		b.start, b.passed = now, 0
	}
	return b
}

// prune forgets keys whose window ended with nothing pending.
func (r *Logger) prune(now time.Time) {
	for k, b := range r.keys {
		if b.suppressed == 0 && now.Sub(b.start) >= r.cfg.Interval {
			delete(r.keys, k)
		}
	}
}

// summarize logs b's suppressed count, if any, and clears it. Called with
// r.mu held.
func (r *Logger) summarize(b *bucket) {
	if b.suppressed == 0 {
		return
	}
	args := append(append(make([]any, 0, len(b.args)+4), b.args...),
		"suppressed", b.suppressed, "suppressed_in", r.cfg.Interval)
	level, msg := b.level, b.msg+" (rate-limited: suppressed lines like this one, the last shown)"
	b.suppressed, b.msg, b.args = 0, "", nil
	r.l.Log(context.Background(), level, msg, args...)
}

// Pending is the number of suppressed lines not yet reported in a summary.
func (r *Logger) Pending() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n uint64
	for _, b := range r.keys {
		n += b.suppressed
	}
	return n
}

// Flush logs the summary of every key whose window has ended.
func (r *Logger) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flush(false)
}

// flush summarizes the ended windows (all of them when all is set) and
// reports whether counts are still pending. Called with r.mu held.
func (r *Logger) flush(all bool) bool {
	now := r.cfg.Now()
	pending := false
	for _, b := range r.keys {
		if all || now.Sub(b.start) >= r.cfg.Interval {
			r.summarize(b)
			if !all {
				b.start, b.passed = now, 0
			}
		}
		pending = pending || b.suppressed > 0
	}
	return pending
}

// tick is the timer: summarize ended windows, and come back while counts
// are pending.
func (r *Logger) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if r.closed {
		return
	}
	if r.flush(false) {
		r.timer = time.AfterFunc(r.cfg.Interval, r.tick)
	}
}

// Close stops the timer and logs every pending count; later lines pass
// unlimited (the owner is shutting down).
func (r *Logger) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.flush(true)
}
