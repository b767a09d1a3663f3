package datadir

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// maxMarker bounds what is read of a marker.
const maxMarker = 4096

// WriteMarker writes a marker file durably: a temporary file, fsync,
// rename, then fsync of the directory.
func (d *Dir) WriteMarker(name, body string) error {
	f, err := os.CreateTemp(d.path, "."+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.WriteString(body)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, d.File(name))
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return werr
	}
	return syncDir(d.path)
}

// RemoveMarker removes a marker durably (the directory is fsynced); a
// missing marker is not an error.
func (d *Dir) RemoveMarker(name string) error {
	if err := os.Remove(d.File(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(d.path)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// ReadMarker returns the "key: value" lines of a marker (bounded), whether
// it exists, and an error when it exists but cannot be read.
func (d *Dir) ReadMarker(name string) (map[string]string, bool, error) {
	path := d.File(name)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, &Error{File: path, Err: fmt.Errorf("cannot read the marker (refusing to start): %w", err)}
	}
	defer f.Close()
	fields, err := ParseMarker(io.LimitReader(f, maxMarker))
	if err != nil {
		return nil, true, &Error{File: path, Err: fmt.Errorf("cannot read the marker (refusing to start): %w", err)}
	}
	return fields, true, nil
}

// ParseMarker reads "key: value" lines; values are flattened to one
// printable line (OneLine). Later keys win; lines without ": " are skipped.
func ParseMarker(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxMarker)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok || k == "" || len(k) > 32 {
			continue
		}
		out[OneLine(k)] = OneLine(v)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return nil, err
	}
	return out, nil
}

// OneLine keeps printable characters, flattening control characters and
// invalid UTF-8 to a space, trims, and caps the length at 512 bytes, so a
// marker's text is safe in a log line.
func OneLine(s string) string {
	const limit = 512
	s = strings.ToValidUTF8(s, " ")
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "")
	}
	return strings.TrimSpace(s)
}

// ErrRetired matches (errors.Is) the refusal of a retired data dir.
var ErrRetired = errors.New("datadir: data dir is retired")

// RetiredError refuses a data dir whose NodeId's clock FAILED after it
// joined a cluster (SPEC §3.4): it must never serve again.
type RetiredError struct {
	Dir    string
	Reason string // as recorded in the marker
	NodeID string // the retired NodeId, "" when not recorded
	// Floor is the highest generation of the NodeId's name the cluster
	// held retired when this node learnt its NodeId was retired there (0:
	// not recorded); the next generation goes above it.
	Floor int
}

func (e *RetiredError) Error() string {
	return fmt.Sprintf("node: data dir %s is retired (clock FAILED after joining: %s); this NodeId must never serve again: "+
		"bring up a new node with a new NodeId and an empty data dir (it joins as a non-voter and the reconciler promotes it), "+
		"or, if every voter is lost, see `ticketd recover`", e.Dir, e.Reason)
}

// Is makes errors.Is(err, ErrRetired) true.
func (e *RetiredError) Is(target error) bool { return target == ErrRetired }

// Retirement is what the retired marker records.
type Retirement struct {
	Reason string // why (the FAILED clock's error)
	NodeID string // the NodeId that retired
	Floor  int    // see RetiredError.Floor
}

// WriteRetired records durably that this NodeId retired; reason is
// flattened to one line.
func (d *Dir) WriteRetired(reason string) error {
	return d.WriteRetirement(Retirement{Reason: reason})
}

// WriteRetirement records r durably (the retired marker).
func (d *Dir) WriteRetirement(r Retirement) error {
	body := "retired: the clock of this node FAILED after it joined (SPEC 3.4)\n" +
		"reason: " + OneLine(r.Reason) + "\n"
	if r.NodeID != "" {
		body += "node_id: " + OneLine(r.NodeID) + "\n"
	}
	if r.Floor > 0 {
		body += "generation_floor: " + strconv.Itoa(r.Floor) + "\n"
	}
	body += "action: never serve on this data dir again; with cluster.auto_replace a restart moves it aside and starts the next generation NAME~G\n"
	if err := d.WriteMarker(RetiredFile, body); err != nil {
		return fmt.Errorf("datadir: retired marker: %w", err)
	}
	return nil
}

// CheckRetired refuses a retired data dir with a *RetiredError; a marker
// that cannot be examined refuses too (fail closed).
func (d *Dir) CheckRetired() error {
	fields, ok, err := d.ReadMarker(RetiredFile)
	if err != nil || !ok {
		return err
	}
	reason := fields["reason"]
	if reason == "" {
		reason = "reason not recorded"
	}
	e := &RetiredError{Dir: d.path, Reason: reason, NodeID: fields["node_id"]}
	if f, err := strconv.Atoi(fields["generation_floor"]); err == nil && f > 0 {
		e.Floor = f
	}
	return e
}

// PriorFailure is what a FAILED marker found at start says.
type PriorFailure struct {
	Reason string // SPEC §1.5 reason, as recorded ("not recorded" if absent)
	AtMs   int64  // wall ms of the failure, 0 if not recorded
}

func (p *PriorFailure) String() string {
	s := "restart after a FAILED clock (reason " + p.Reason
	if p.AtMs > 0 {
		s += " at " + time.UnixMilli(p.AtMs).UTC().Format(time.RFC3339Nano)
	}
	return s + ")"
}

// WriteFailed records durably that this single node's clock FAILED (SPEC
// §4): every start on the dir then holds off Grant and Expire 250 s + Δ.
func (d *Dir) WriteFailed(reason string, at time.Time, errText string) error {
	body := "clock FAILED on this single node (SPEC 4)\n" +
		"reason: " + OneLine(reason) + "\n" +
		"at_unix_ms: " + strconv.FormatInt(at.UnixMilli(), 10) + "\n" +
		"error: " + OneLine(errText) + "\n" +
		"action: every start on this data dir refuses Grant and Expire for 250 s + delta; ticketd removes this file once a hold-off has passed\n"
	return d.WriteMarker(FailedFile, body)
}

// ReadFailed returns the prior failure recorded in the dir, or nil. A
// marker that exists but cannot be read refuses the start; one whose
// content is garbled still holds off.
func (d *Dir) ReadFailed() (*PriorFailure, error) {
	fields, ok, err := d.ReadMarker(FailedFile)
	if err != nil || !ok {
		return nil, err
	}
	p := &PriorFailure{Reason: "not recorded"}
	if r := fields["reason"]; r != "" && len(r) <= 64 {
		p.Reason = r
	}
	if v, err := strconv.ParseInt(fields["at_unix_ms"], 10, 64); err == nil && v > 0 {
		p.AtMs = v
	}
	return p, nil
}

// RemoveFailed removes the FAILED marker durably.
func (d *Dir) RemoveFailed() error { return d.RemoveMarker(FailedFile) }

// Exists reports whether name exists in the dir.
func (d *Dir) Exists(name string) bool {
	_, err := os.Lstat(filepath.Join(d.path, name))
	return err == nil
}

// Recovered is what a recovered data dir's marker says.
type Recovered struct {
	From        string // the data dir it was recovered from
	HoldUntilMs int64  // Grant and Expire refused until this wall ms
}

// WriteRecovered records that this dir was built by recovery from from,
// holding Grant and Expire off until holdUntil.
func (d *Dir) WriteRecovered(from string, holdUntil time.Time, lastIndex uint64) error {
	body := "recovered by ticketd recover (SPEC 3.4)\n" +
		"from: " + OneLine(from) + "\n" +
		"last_index: " + strconv.FormatUint(lastIndex, 10) + "\n" +
		"hold_until_unix_ms: " + strconv.FormatInt(holdUntil.UnixMilli(), 10) + "\n" +
		"action: Grant and Expire are refused until hold_until (250 s + delta after the recovery), so no old lease can overlap\n"
	return d.WriteMarker(RecoveredFile, body)
}

// ReadRecovered returns the recovery marker, or nil. An unreadable or
// garbled one refuses the start (its hold-off instant is not known).
func (d *Dir) ReadRecovered() (*Recovered, error) {
	fields, ok, err := d.ReadMarker(RecoveredFile)
	if err != nil || !ok {
		return nil, err
	}
	until, err := strconv.ParseInt(fields["hold_until_unix_ms"], 10, 64)
	if err != nil || until <= 0 {
		return nil, &Error{File: d.File(RecoveredFile), Err: fmt.Errorf("no readable hold_until_unix_ms (refusing to start: the hold-off is unknown)")}
	}
	return &Recovered{From: fields["from"], HoldUntilMs: until}, nil
}
