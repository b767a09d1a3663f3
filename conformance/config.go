package conformance

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/config"
)

// Limits of a run.
const (
	// DefaultTimeout is the exchange deadline when none is given (SPEC §8).
	DefaultTimeout = 2 * time.Second
	// MinTimeout and MaxTimeout bound --timeout.
	MinTimeout = 10 * time.Millisecond
	MaxTimeout = time.Minute
	// SilentCloseLimit is how long an agent may keep a silent or stalling
	// client open (SPEC §2.1, §7).
	SilentCloseLimit = 10 * time.Second
	// minSecretLen is SPEC §1.4's shortest secret.
	minSecretLen = 32
)

// Clock is the wall clock the plausibility check compares the reference
// with; tests inject a skewed one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config is one run of the suite.
type Config struct {
	// Addr is the agent, HOST:PORT.
	Addr string
	// Secret is the clock secret (SPEC §1.4). Never printed.
	Secret []byte
	// Dev verifies MACs with dev_key, and only with it (SPEC §1.3).
	Dev bool
	// Timeout is the deadline of one exchange, connect included.
	Timeout time.Duration
	// Only limits the run to these check IDs; empty runs the catalogue.
	Only []string
	// Clock is the local wall clock; nil is the real one.
	Clock Clock
	// Logger receives progress at debug level; nil discards.
	Logger *slog.Logger
}

// DefaultConfig is the configuration of SPEC §8 without a target.
func DefaultConfig() Config {
	return Config{Timeout: DefaultTimeout}
}

// String hides the secret.
func (c Config) String() string {
	return "conformance.Config{Addr:" + c.Addr + " Dev:" + strconv.FormatBool(c.Dev) +
		" Timeout:" + c.Timeout.String() + " Only:" + strings.Join(c.Only, ",") + " Secret:[redacted]}"
}

// GoString hides the secret from %#v.
func (c Config) GoString() string { return c.String() }

// Validate checks every field; the error names the field (as the command's
// flag: addr, secret, timeout, only).
func (c *Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil || host == "" {
		return config.Errorf("addr", "%q is not HOST:PORT", c.Addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return config.Errorf("addr", "port %q is not a number in 1..65535", port)
	}
	if len(c.Secret) < minSecretLen {
		return config.Errorf("secret", "holds %d bytes; at least %d are required", len(c.Secret), minSecretLen)
	}
	if c.Timeout < MinTimeout || c.Timeout > MaxTimeout {
		return config.Errorf("timeout", "%s is outside %s..%s", c.Timeout, MinTimeout, MaxTimeout)
	}
	seen := make(map[string]bool, len(c.Only))
	for _, id := range c.Only {
		if _, ok := lookup(id); !ok {
			return config.Errorf("only", "no check has ID %q (known: %s)", id, strings.Join(IDs(), ","))
		}
		if seen[id] {
			return config.Errorf("only", "check %s is named twice", id)
		}
		seen[id] = true
	}
	return nil
}
