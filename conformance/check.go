package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tckclk/tckclk/protocol"
)

// Level is the force of a requirement (SPEC uses RFC 2119 words).
type Level string

// Levels.
const (
	Must   Level = "MUST"
	Should Level = "SHOULD"
)

// Status is the result of one check.
type Status string

// Results.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL" // a MUST does not hold
	Warn Status = "WARN" // a SHOULD does not hold
)

// Check is one catalogued requirement.
type Check struct {
	ID          string // section-n, e.g. "1.2-3"
	Section     string // the SPEC section, e.g. "1.2"
	Level       Level
	Requirement string // one line
	Run         func(ctx context.Context, t *Target) Outcome
}

// Outcome is what a run function found: whether the requirement held, and
// the evidence (expected vs actual when it did not).
type Outcome struct {
	OK     bool
	Detail string
}

// maxDetail bounds a detail's length: a hostile target cannot bloat a report.
const maxDetail = 400

func pass(format string, args ...any) Outcome {
	return Outcome{OK: true, Detail: fmt.Sprintf(format, args...)}
}

func fail(format string, args ...any) Outcome {
	return Outcome{Detail: fmt.Sprintf(format, args...)}
}

// mismatch is a failure stated as expected vs actual.
func mismatch(expected, got string) Outcome {
	return Outcome{Detail: "expected " + expected + "; got " + got}
}

// quote shows bytes a target sent, escaped and shortened.
func quote(b []byte) string {
	const show = 100
	if len(b) <= show {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:show])) + fmt.Sprintf("…(%d bytes)", len(b))
}

// bounded cuts s to maxDetail bytes on a rune boundary.
func bounded(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Target is the agent under test, as the checks see it.
type Target struct {
	addr    string
	timeout time.Duration
	dev     bool
	keys    protocol.KeyRing // what the run verifies with
	other   protocol.KeyRing // the key the run must NOT accept (diagnosis only)
	keyRaw  []byte           // raw bytes of keys[0], for layout diagnosis
	clock   Clock
	dialer  net.Dialer
	log     *slog.Logger
}

func newTarget(cfg *Config) *Target {
	plain, dev := cfg.Secret, protocol.DevKey(cfg.Secret)
	t := &Target{addr: cfg.Addr, timeout: cfg.Timeout, dev: cfg.Dev, clock: cfg.Clock, log: cfg.Logger}
	if cfg.Dev {
		t.keyRaw = dev
		t.keys, t.other = protocol.KeyRing{protocol.NewKey(dev)}, protocol.KeyRing{protocol.NewKey(plain)}
	} else {
		t.keyRaw = append([]byte(nil), plain...)
		t.keys, t.other = protocol.KeyRing{protocol.NewKey(plain)}, protocol.KeyRing{protocol.NewKey(dev)}
	}
	if t.clock == nil {
		t.clock = realClock{}
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	return t
}

// String names the target and hides the key material.
func (t *Target) String() string { return "conformance.Target(" + t.addr + ")" }

// keyName says which key the run verifies with.
func (t *Target) keyName() string {
	if t.dev {
		return "dev_key"
	}
	return "the secret"
}

// nonce is a fresh request nonce from crypto/rand (SPEC §1.1).
func (t *Target) nonce() (protocol.Nonce, error) { return protocol.NewNonce() }

// nonceShowingAlphabet is a fresh crypto/rand nonce whose wire form contains
// both '-' and '_', the two characters base64url does not share with
// standard base64, so an agent that re-encodes it with the wrong alphabet is
// seen to. Drawn by rejection: about one draw in twelve qualifies.
func (t *Target) nonceShowingAlphabet() (protocol.Nonce, error) {
	for range 1000 {
		n, err := protocol.NewNonce()
		if err != nil {
			return n, err
		}
		s := n.String()
		if strings.IndexByte(s, '-') >= 0 && strings.IndexByte(s, '_') >= 0 {
			return n, nil
		}
	}
	return protocol.NewNonce() // vanishingly unlikely; any fresh nonce still tests the rest
}

// request sends one valid request with a fresh nonce and reads the answer.
func (t *Target) request(ctx context.Context, nonce protocol.Nonce) *exchange {
	return t.do(ctx, nonce, send{parts: [][]byte{protocol.EncodeRequest(protocol.Request{Nonce: nonce})}, limit: t.timeout})
}

// single makes a check out of a judge of one valid exchange.
func single(judge func(t *Target, x *exchange) Outcome) func(context.Context, *Target) Outcome {
	return func(ctx context.Context, t *Target) Outcome {
		n, err := t.nonce()
		if err != nil {
			return fail("no nonce: %v", err)
		}
		return judge(t, t.request(ctx, n))
	}
}
