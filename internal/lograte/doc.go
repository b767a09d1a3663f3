// Package lograte bounds the log lines an outsider can cause. Lines are
// grouped by a key the caller chooses (a refusal reason, say): per key at
// most Burst lines pass in each Interval; the rest are counted, and when
// the interval ends one summary line reports how many were suppressed,
// with the fields of the last of them. Nothing is lost silently: every
// suppressed line is in a count.
//
// Use: rl := lograte.New(logger, lograte.Config{}); defer rl.Close();
// rl.Warn(reason, "refused", "peer", addr, "reason", reason).
//
// Invariants: at most MaxKeys keys are tracked (more share one "other"
// key), so neither memory nor the number of lines grows with the number
// of distinct keys an attacker can make up; lines per key per interval
// are at most Burst + 1. Hazard: a key must not carry attacker-chosen text
// if the caller wants one line per reason (use the reason, not the
// message).
package lograte
