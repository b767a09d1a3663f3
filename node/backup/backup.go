// Package backup reads and writes the backup file of SPEC §3.4 (`ticketctl
// snapshot save`, `ticketd restore --from-snapshot`): the envelope of
// node/api/wire (magic, version, a header naming the state, SHA-256 over
// everything) around a ticket snapshot (node/ticket, version 4 or later:
// Δ, the Raft position, the token epoch, the highest token, every ticket
// with its absolute expiry, the retired NodeIds, under its own CRC-32C).
//
// Invariants: Read accepts a backup only when the envelope verifies end to
// end (length, SHA-256, nothing after it), the state decodes and verifies
// as a snapshot a node would restore, and every header field equals the
// state's own; otherwise it says which and what, and the caller has
// written nothing. Every accepted backup re-encodes (Encode) to the same
// bytes.
package backup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

// Backup is a verified backup.
type Backup struct {
	Header wire.BackupHeader
	SHA256 [sha256.Size]byte // of the whole file
	// State is the restored state (its token epoch is the backup's).
	State *ticket.FSM
	// Position is where in the old cluster's Raft log it was taken.
	Position ticket.Position
	// Retired are the NodeIds the old cluster had retired.
	Retired []string
}

// Header builds the header of a backup of s (which carries its Raft
// position) taken by nodeID, whose state holds tickets and is stateBytes
// long.
func Header(nodeID string, s *ticket.Snapshot, tickets, stateBytes uint64) (*wire.BackupHeader, error) {
	if s.Raft == nil {
		return nil, errors.New("backup: the snapshot carries no Raft position (format 3 or later is needed)")
	}
	h := &wire.BackupHeader{
		Version: wire.BackupVersion, TakenUnixMs: s.Raft.TakenMs, NodeID: nodeID,
		DeltaMs: s.DeltaMs, Index: s.Raft.Index, Term: s.Raft.Term,
		Epoch: s.Epoch, HighestToken: s.MaxToken, Tickets: tickets, StateBytes: stateBytes,
	}
	for _, sv := range s.Raft.Servers {
		if sv.Suffrage == ticket.SuffrageVoter {
			h.Voters = append(h.Voters, sv.ID)
		}
	}
	if len(h.Voters) > wire.MaxBackupVoters {
		return nil, fmt.Errorf("backup: %d voters, a backup names at most %d", len(h.Voters), wire.MaxBackupVoters)
	}
	return h, nil
}

// Encode writes a backup of s (with its Raft position) taken by nodeID.
func Encode(w io.Writer, nodeID string, s *ticket.Snapshot) (int64, error) {
	var state bytes.Buffer
	if _, err := s.WriteTo(&state); err != nil {
		return 0, err
	}
	h, err := Header(nodeID, s, uint64(s.Len()), uint64(state.Len()))
	if err != nil {
		return 0, err
	}
	return wire.WriteBackup(w, h, &state)
}

// Read reads and verifies the backup in r (size bytes): the envelope
// first, end to end, then the state, restored into a new FSM and checked
// against the header.
func Read(r io.ReaderAt, size int64) (*Backup, error) {
	h, sum, err := wire.CopyBackup(nil, io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, err
	}
	b := &Backup{Header: *h, SHA256: sum, State: ticket.New(h.DeltaMs)}
	state := io.NewSectionReader(r, int64(h.Len()), int64(h.StateBytes))
	var head *ticket.Snapshot
	err = b.State.RestoreChecked(state, func(s *ticket.Snapshot) error {
		head = s
		return matches(h, s)
	})
	if err != nil {
		return nil, fmt.Errorf("its state: %w", err)
	}
	if n := uint64(b.State.Len()); n != h.Tickets {
		return nil, mismatch("tickets", h.Tickets, n)
	}
	b.Position = *head.Raft
	b.Retired = head.Retired
	return b, nil
}

// ReadFile reads and verifies the backup file at path; every error names
// the file.
func ReadFile(path string) (*Backup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, &FileError{File: path, Err: fmt.Errorf("not a regular file (%v)", fi.Mode().Type())}
	}
	b, err := Read(f, fi.Size())
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	return b, nil
}

// FileError is a backup file refused: the file and why.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("backup %s: %v", e.File, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// matches checks the state's head against the header, field by field.
func matches(h *wire.BackupHeader, s *ticket.Snapshot) error {
	if s.Raft == nil {
		return wireErr("the state carries no Raft position (ticket snapshot format 3 or later is needed)")
	}
	voters := 0
	for _, sv := range s.Raft.Servers {
		if sv.Suffrage != ticket.SuffrageVoter {
			continue
		}
		if voters >= len(h.Voters) || h.Voters[voters] != sv.ID {
			return wireErr("the header's voters %q are not the state's configuration %v", h.Voters, s.Raft.Servers)
		}
		voters++
	}
	for _, c := range []struct {
		field        string
		header, head uint64
	}{
		{"taken_unix_ms", h.TakenUnixMs, s.Raft.TakenMs},
		{"delta_ms", h.DeltaMs, s.DeltaMs},
		{"index", h.Index, s.Raft.Index},
		{"term", h.Term, s.Raft.Term},
		{"token_epoch", h.Epoch, s.Epoch},
		{"highest_token", h.HighestToken, s.MaxToken},
		{"voters", uint64(len(h.Voters)), uint64(voters)},
	} {
		if c.header != c.head {
			return mismatch(c.field, c.header, c.head)
		}
	}
	return nil
}

func mismatch(field string, header, state uint64) error {
	return wireErr("the header says %s %d, the state %d", field, header, state)
}

func wireErr(format string, args ...any) error {
	return &wire.BackupError{Kind: wire.ErrBackupFormat, Detail: fmt.Sprintf(format, args...)}
}
