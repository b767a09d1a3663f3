package safety

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// Kind is what an operation did.
type Kind string

const (
	Grant   Kind = "grant"
	Renew   Kind = "renew"
	Release Kind = "release"
	Get     Kind = "get"
	// Revoke is an administrator's revoke (SPEC §4) of the grant with
	// Token (0: whoever holds it).
	Revoke Kind = "revoke"
	// Write is a write to the fencing register with the op's Token.
	Write Kind = "write"
)

// Outcome is what the client learned.
type Outcome string

const (
	// OK: the operation took effect (a Get answered; a Write was accepted).
	OK Outcome = "ok"
	// Refused: it certainly took no effect (a 4xx, a 503 given before any
	// proposal, a dial that failed; a Write the register rejected).
	Refused Outcome = "refused"
	// Unknown: it may or may not have taken effect (timeout, a connection
	// lost after sending, a 503 after proposing).
	Unknown Outcome = "unknown"
)

// ClientPPM is the client-side clock-rate margin of SPEC §4: a holder
// trusts its grant until send time + lease × (1 − ClientPPM/10^6).
const ClientPPM = 500

// Op is one recorded operation. Times are ns on the history's one
// monotonic clock.
type Op struct {
	ID     int    `json:"id"`
	Client int    `json:"client"`
	Kind   Kind   `json:"kind"`
	Ticket string `json:"ticket"`
	Holder string `json:"holder"`
	// LeaseS is the lease asked for (grant, renew).
	LeaseS int `json:"lease_s,omitempty"`
	// Token is the token sent (renew, release, write) or, for an ok grant
	// or renew, the token answered.
	Token   uint64  `json:"token,omitempty"`
	Call    int64   `json:"call_ns"`
	Return  int64   `json:"return_ns"`
	Node    string  `json:"node,omitempty"`
	Outcome Outcome `json:"outcome"`
	// Code is the refusal's error code (held, not_held, wrong_token,
	// lease_over, ...) or the error text of an unknown outcome.
	Code string `json:"code,omitempty"`
	// Deadline is an ok grant's or renew's client-side deadline (history
	// clock): Call + remaining × (1 − 500 ppm).
	Deadline int64 `json:"deadline_ns,omitempty"`
	// RespHolder and RespToken are who holds it: a found Get, or a grant
	// refused as held. An ok Get with RespHolder "" found nothing.
	RespHolder string `json:"resp_holder,omitempty"`
	RespToken  uint64 `json:"resp_token,omitempty"`
	// ServerExpiryMs is a found Get's server_expiry_unix_ms.
	ServerExpiryMs uint64 `json:"server_expiry_unix_ms,omitempty"`
	// RespRevoked: a found Get's ticket is revoked.
	RespRevoked bool `json:"resp_revoked,omitempty"`
	// OffsetsMs are the clock offsets injected at Call, by node.
	OffsetsMs map[string]int64 `json:"offsets_ms,omitempty"`
}

func (o Op) String() string {
	s := fmt.Sprintf("#%d c%d %s %s h=%s", o.ID, o.Client, o.Kind, o.Ticket, o.Holder)
	if o.Token != 0 {
		s += fmt.Sprintf(" tok=%d", o.Token)
	}
	s += " → " + string(o.Outcome)
	if o.Code != "" {
		s += " " + o.Code
	}
	if o.RespHolder != "" {
		s += fmt.Sprintf(" (%s tok=%d)", o.RespHolder, o.RespToken)
	}
	return s
}

// History is a recorded run: safe for concurrent Add.
type History struct {
	// DeltaMs is the cluster's Δ.
	DeltaMs uint64 `json:"delta_ms"`
	mu      sync.Mutex
	ops     []Op
	// Faults counts the faults injected, by kind (for the report).
	faults map[string]int
}

// NewHistory starts an empty history for a cluster with Δ deltaMs.
func NewHistory(deltaMs uint64) *History {
	return &History{DeltaMs: deltaMs, faults: map[string]int{}}
}

// Add records op (its ID is assigned here) and returns the ID.
func (h *History) Add(op Op) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops)
	h.ops = append(h.ops, op)
	return op.ID
}

// Fault counts one injected fault of kind.
func (h *History) Fault(kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[kind]++
}

// Ops is a copy of the recorded operations.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Faults is a copy of the fault counts.
func (h *History) Faults() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.faults {
		out[k] = v
	}
	return out
}

type historyJSON struct {
	DeltaMs uint64         `json:"delta_ms"`
	Faults  map[string]int `json:"faults,omitempty"`
	Ops     []Op           `json:"ops"`
}

// WriteJSON writes the history to path.
func (h *History) WriteJSON(path string) error {
	b, err := json.MarshalIndent(historyJSON{DeltaMs: h.DeltaMs, Faults: h.Faults(), Ops: h.Ops()}, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// ReadJSON reads a history written by WriteJSON.
func ReadJSON(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j historyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("safety: %s: %w", path, err)
	}
	h := NewHistory(j.DeltaMs)
	h.ops = append(h.ops, j.Ops...)
	for k, v := range j.Faults {
		h.faults[k] = v
	}
	return h, nil
}
