package safety

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Config is how to check.
type Config struct {
	// Timeout bounds porcupine's search per ticket (default 30 s); running
	// out is a violation.
	Timeout time.Duration
	// OutDir receives the HTML visualisation and the history JSON on a
	// violation ("": a new directory under os.TempDir()).
	OutDir string
	// StrictRefusals checks every "409 held" as a linearizable read of the
	// holder. SPEC §4 makes only Get linearizable: the leader answers a
	// refused Grant from its applied state without VerifyLeader, so a
	// leader that has just lost leadership may name a holder who has
	// already released. Off (the default), a held answer must name a
	// holder that some grant of the ticket could have made (a direct
	// check, "held_unknown_holder").
	StrictRefusals bool
}

// Violation is one broken promise.
type Violation struct {
	// Check names the rule: linearizable, porcupine_timeout, overlap,
	// token_order, token_reuse, stale_write, expiry_moved,
	// held_unknown_holder, renew_after_revoke.
	Check  string `json:"check"`
	Ticket string `json:"ticket"`
	Ops    []int  `json:"ops,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s on %s (ops %v): %s", v.Check, v.Ticket, v.Ops, v.Detail)
}

// Result is what Check found.
type Result struct {
	Ops        int            `json:"ops"`
	Unknown    int            `json:"unknown"`
	Tickets    int            `json:"tickets"`
	Writes     int            `json:"writes"`
	Rejected   int            `json:"writes_rejected"`
	Faults     map[string]int `json:"faults,omitempty"`
	Violations []Violation    `json:"violations,omitempty"`
	// Files are the HTML and JSON written on a violation.
	Files []string `json:"files,omitempty"`
}

// OK is true when nothing was violated.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Summary is the one-line report every run prints.
func (r *Result) Summary() string {
	var fs []string
	for k, v := range r.Faults {
		fs = append(fs, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(fs)
	s := fmt.Sprintf("ops checked %d (tickets %d, register writes %d, rejected %d), unknown outcomes %d, faults injected [%s], violations %d",
		r.Ops, r.Tickets, r.Writes, r.Rejected, r.Unknown, strings.Join(fs, " "), len(r.Violations))
	if len(r.Files) > 0 {
		s += ", written: " + strings.Join(r.Files, " ")
	}
	return s
}

// Check checks h (see the package doc) and, on a violation, writes the
// visualisation and the history under cfg.OutDir.
func Check(h *History, cfg Config) (*Result, error) {
	ops := h.Ops()
	res := &Result{Faults: h.Faults()}
	b := bounds{deltaNs: int64(h.DeltaMs) * 1e6, strictRefusals: cfg.StrictRefusals}
	for _, op := range ops {
		if op.Return < op.Call {
			return res, fmt.Errorf("safety: op #%d returned (%d ns) before it was called (%d ns): the history clock is not monotonic", op.ID, op.Return, op.Call)
		}
	}
	byTicket := map[string][]Op{}
	for _, op := range ops {
		byTicket[op.Ticket] = append(byTicket[op.Ticket], op)
		if op.Kind == Write {
			res.Writes++
			if op.Outcome == Refused {
				res.Rejected++
			}
			continue
		}
		res.Ops++
		if op.Outcome == Unknown {
			res.Unknown++
		}
	}
	res.Tickets = len(byTicket)
	names := make([]string, 0, len(byTicket))
	for n := range byTicket {
		names = append(names, n)
	}
	slices.Sort(names)
	timeout := cmp.Or(cfg.Timeout, 30*time.Second)
	type failed struct {
		name string
		info porcupine.LinearizationInfo
	}
	var bad []failed
	for _, name := range names {
		tops := byTicket[name]
		res.Violations = append(res.Violations, directChecks(name, tops)...)
		pops := porcupineOps(tops)
		if len(pops) == 0 {
			continue
		}
		r, info := porcupine.CheckOperationsVerbose(b.pmodel(), pops, timeout)
		switch r {
		case porcupine.Ok:
		case porcupine.Illegal:
			res.Violations = append(res.Violations, Violation{Check: "linearizable", Ticket: name,
				Detail: "no linearization of the ticket's history fits the model (see the HTML)"})
			bad = append(bad, failed{name, info})
		default:
			res.Violations = append(res.Violations, Violation{Check: "porcupine_timeout", Ticket: name,
				Detail: fmt.Sprintf("porcupine gave %s within %v on %d ops: a timeout is a failure", r, timeout, len(pops))})
			bad = append(bad, failed{name, info})
		}
	}
	res.Violations = append(res.Violations, globalTokenChecks(ops)...)
	if res.OK() {
		return res, nil
	}
	dir := cfg.OutDir
	if dir == "" {
		d, err := os.MkdirTemp("", "tckclk-safety-")
		if err != nil {
			return res, err
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	hp := filepath.Join(dir, "history.json")
	if err := h.WriteJSON(hp); err != nil {
		return res, err
	}
	res.Files = append(res.Files, hp)
	if len(bad) == 0 { // a direct check failed: show the first violated ticket
		name := res.Violations[0].Ticket
		pops := porcupineOps(byTicket[name])
		if len(pops) > 0 {
			_, info := porcupine.CheckOperationsVerbose(b.pmodel(), pops, timeout)
			bad = append(bad, failed{name, info})
		}
	}
	for _, f := range bad {
		p := filepath.Join(dir, "ticket-"+fileSafe(f.name)+".html")
		if err := porcupine.VisualizePath(b.pmodel(), f.info, p); err != nil {
			return res, fmt.Errorf("safety: visualisation: %w", err)
		}
		res.Files = append(res.Files, p)
	}
	return res, nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func fileSafe(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// porcupineOps turns one ticket's ops into porcupine's, unknown outcomes
// open until the end of the history. Writes are the register's, not the
// ticket's.
func porcupineOps(ops []Op) []porcupine.Operation {
	var end int64
	for _, op := range ops {
		end = max(end, op.Return, op.Call)
	}
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Kind == Write {
			continue
		}
		ret := op.Return
		if op.Outcome == Unknown {
			ret = end + 1
			op.Return = forever
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Output: nil, Return: ret})
	}
	return out
}
