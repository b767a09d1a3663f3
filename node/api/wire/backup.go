package wire

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
)

// A backup (SPEC §3.4) is the body of GET /v1/cluster/backup and the file
// `ticketctl snapshot save` writes; `ticketd restore --from-snapshot`
// reads it. All integers big-endian:
//
//	"TCKTBKUP"  magic, 8 bytes
//	u16         format version (1..=BackupVersion)
//	u64         taken at (unix ms): when the state was captured
//	u8 len, NodeId of the node (the leader) that took it
//	u8          voter count (1..=255); per voter: u8 len, NodeId — the
//	            voters of the Raft configuration the state was taken under
//	            (what names the cluster: it has no other identity)
//	u64         Δ ms
//	u64         Raft index of the last entry the state includes
//	u64         that entry's term
//	u64         token epoch
//	u64         highest fencing token issued
//	u64         ticket count
//	u64         N, the length of the state
//	N bytes     the state: a ticket snapshot (node/ticket, "TCKTSNAP"
//	            version 4 or later, with its own CRC-32C) whose fields
//	            repeat the ones above
//	32 bytes    SHA-256 of every byte before it
//
// Nothing may follow the SHA-256. The header is what a reader without the
// ticket package (ticketctl) shows; ticketd restore checks the state
// against it field by field.
const (
	BackupMagic   = "TCKTBKUP"
	BackupVersion = 1
	// MaxBackupVoters bounds the voter list (its u8 count).
	MaxBackupVoters = 255
	// maxBackupID bounds a NodeId (its u8 length).
	maxBackupID = 255
)

// BackupHeader is everything a backup says before its state.
type BackupHeader struct {
	Version      uint16   `json:"format_version"`
	TakenUnixMs  uint64   `json:"taken_unix_ms"`
	NodeID       string   `json:"node_id"`
	Voters       []string `json:"voters"`
	DeltaMs      uint64   `json:"delta_ms"`
	Index        uint64   `json:"index"`
	Term         uint64   `json:"term"`
	Epoch        uint64   `json:"token_epoch"`
	HighestToken uint64   `json:"highest_token"`
	Tickets      uint64   `json:"tickets"`
	StateBytes   uint64   `json:"state_bytes"`
}

// Refusals of a backup, matched with errors.Is on a *BackupError.
var (
	ErrBackupForeign   = errors.New("not a ticketd backup")
	ErrBackupVersion   = errors.New("unknown backup format version")
	ErrBackupTruncated = errors.New("truncated backup")
	ErrBackupChecksum  = errors.New("backup SHA-256 mismatch")
	ErrBackupFormat    = errors.New("malformed backup")
)

// BackupError is a refused backup: its kind and what is wrong.
type BackupError struct {
	Kind   error
	Detail string
}

func (e *BackupError) Error() string { return e.Kind.Error() + ": " + e.Detail }
func (e *BackupError) Unwrap() error { return e.Kind }

func backupErr(kind error, format string, args ...any) *BackupError {
	return &BackupError{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Len is the length of the encoded header.
func (h *BackupHeader) Len() int {
	n := 8 + 2 + 8 + 1 + len(h.NodeID) + 1 + 7*8
	for _, v := range h.Voters {
		n += 1 + len(v)
	}
	return n
}

// Size is the length of the whole backup: header, state and SHA-256.
func (h *BackupHeader) Size() uint64 {
	return uint64(h.Len()) + h.StateBytes + sha256.Size
}

// check refuses a header no reader would accept.
func (h *BackupHeader) check() error {
	switch {
	case h.NodeID == "" || len(h.NodeID) > maxBackupID:
		return backupErr(ErrBackupFormat, "node_id is %d bytes, want 1..=%d", len(h.NodeID), maxBackupID)
	case len(h.Voters) == 0 || len(h.Voters) > MaxBackupVoters:
		return backupErr(ErrBackupFormat, "%d voters, want 1..=%d", len(h.Voters), MaxBackupVoters)
	case h.Index == 0 || h.Term == 0:
		return backupErr(ErrBackupFormat, "Raft index %d, term %d: both must be set", h.Index, h.Term)
	case h.StateBytes == 0:
		return backupErr(ErrBackupFormat, "the state is empty")
	}
	for i, v := range h.Voters {
		if v == "" || len(v) > maxBackupID {
			return backupErr(ErrBackupFormat, "voter %d is %d bytes, want 1..=%d", i, len(v), maxBackupID)
		}
	}
	return nil
}

// AppendHeader encodes h (its version is BackupVersion, whatever
// h.Version says).
func (h *BackupHeader) AppendHeader(b []byte) ([]byte, error) {
	if err := h.check(); err != nil {
		return b, err
	}
	b = append(b, BackupMagic...)
	b = binary.BigEndian.AppendUint16(b, BackupVersion)
	b = binary.BigEndian.AppendUint64(b, h.TakenUnixMs)
	b = append(b, byte(len(h.NodeID)))
	b = append(b, h.NodeID...)
	b = append(b, byte(len(h.Voters)))
	for _, v := range h.Voters {
		b = append(b, byte(len(v)))
		b = append(b, v...)
	}
	for _, v := range []uint64{h.DeltaMs, h.Index, h.Term, h.Epoch, h.HighestToken, h.Tickets, h.StateBytes} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b, nil
}

// WriteBackup writes a whole backup to w: h, then h.StateBytes bytes of
// state, then the SHA-256. A state shorter than h says is an error (what
// was written is then a truncated backup, which every reader refuses).
func WriteBackup(w io.Writer, h *BackupHeader, state io.Reader) (int64, error) {
	head, err := h.AppendHeader(nil)
	if err != nil {
		return 0, err
	}
	sum := sha256.New()
	out := io.MultiWriter(w, sum)
	n, err := out.Write(head)
	written := int64(n)
	if err != nil {
		return written, err
	}
	m, err := io.Copy(out, io.LimitReader(state, int64(h.StateBytes)))
	written += m
	if err != nil {
		return written, err
	}
	if uint64(m) != h.StateBytes {
		return written, fmt.Errorf("wire: backup state ended after %d of %d bytes", m, h.StateBytes)
	}
	n, err = w.Write(sum.Sum(nil))
	return written + int64(n), err
}

// backupReader reads a backup, hashing and counting every byte.
type backupReader struct {
	r   *bufio.Reader
	h   hash.Hash
	n   uint64
	tee io.Writer // every byte read, or nil
}

func (br *backupReader) full(b []byte) error {
	n, err := io.ReadFull(br.r, b)
	br.h.Write(b[:n])
	if br.tee != nil && n > 0 {
		if _, werr := br.tee.Write(b[:n]); werr != nil {
			return werr
		}
	}
	br.n += uint64(n)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return backupErr(ErrBackupTruncated, "it ends after %d bytes", br.n)
		}
		return err
	}
	return nil
}

func (br *backupReader) u64() (uint64, error) {
	var b [8]byte
	if err := br.full(b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

func (br *backupReader) str() (string, error) {
	var l [1]byte
	if err := br.full(l[:]); err != nil {
		return "", err
	}
	b := make([]byte, l[0])
	if err := br.full(b); err != nil {
		return "", err
	}
	return string(b), nil
}

// header reads and checks the header.
func (br *backupReader) header() (*BackupHeader, error) {
	var head [10]byte
	if err := br.full(head[:8]); err != nil {
		if errors.Is(err, ErrBackupTruncated) {
			return nil, backupErr(ErrBackupForeign, "%d bytes: too short for the magic %q", br.n, BackupMagic)
		}
		return nil, err
	}
	if string(head[:8]) != BackupMagic {
		return nil, backupErr(ErrBackupForeign, "it starts with %q, not the magic %q", printable(head[:8]), BackupMagic)
	}
	if err := br.full(head[8:]); err != nil {
		return nil, err
	}
	h := &BackupHeader{Version: binary.BigEndian.Uint16(head[8:])}
	if h.Version < 1 || h.Version > BackupVersion {
		return nil, backupErr(ErrBackupVersion, "format version %d; this release reads version 1..=%d (a newer release wrote it?)", h.Version, BackupVersion)
	}
	var err error
	if h.TakenUnixMs, err = br.u64(); err != nil {
		return nil, err
	}
	if h.NodeID, err = br.str(); err != nil {
		return nil, err
	}
	var count [1]byte
	if err := br.full(count[:]); err != nil {
		return nil, err
	}
	h.Voters = make([]string, int(count[0]))
	for i := range h.Voters {
		if h.Voters[i], err = br.str(); err != nil {
			return nil, err
		}
	}
	for _, p := range []*uint64{&h.DeltaMs, &h.Index, &h.Term, &h.Epoch, &h.HighestToken, &h.Tickets, &h.StateBytes} {
		if *p, err = br.u64(); err != nil {
			return nil, err
		}
	}
	if err := h.check(); err != nil {
		return nil, err
	}
	return h, nil
}

// printable shows bytes of a foreign file safely in a message.
func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '.'
		}
		return r
	}, string(b))
}

// CopyBackup reads a whole backup from r, passing every byte read to w (nil:
// none), and checks it: magic, version, header, length and SHA-256, and
// that nothing follows. The state itself is not decoded (ticketd restore
// does). It returns the header and the SHA-256 of the whole backup.
func CopyBackup(w io.Writer, r io.Reader) (*BackupHeader, [sha256.Size]byte, error) {
	var digest [sha256.Size]byte
	br := &backupReader{r: bufio.NewReaderSize(r, 1<<16), h: sha256.New(), tee: w}
	h, err := br.header()
	if err != nil {
		return nil, digest, err
	}
	buf := make([]byte, 1<<16)
	for left := h.StateBytes; left > 0; {
		k := min(left, uint64(len(buf)))
		if err := br.full(buf[:k]); err != nil {
			if errors.Is(err, ErrBackupTruncated) {
				return h, digest, backupErr(ErrBackupTruncated, "it ends after %d bytes; its header says %d", br.n, h.Size())
			}
			return h, digest, err
		}
		left -= k
	}
	want := br.h.Sum(nil)
	var got [sha256.Size]byte
	if err := br.full(got[:]); err != nil {
		if errors.Is(err, ErrBackupTruncated) {
			return h, digest, backupErr(ErrBackupTruncated, "it ends after %d bytes; its header says %d", br.n, h.Size())
		}
		return h, digest, err
	}
	if string(got[:]) != string(want) {
		return h, digest, backupErr(ErrBackupChecksum, "stored %x, computed %x over its first %d bytes", got[:8], want[:8], h.Size()-sha256.Size)
	}
	if _, err := br.r.ReadByte(); err == nil {
		return h, digest, backupErr(ErrBackupFormat, "bytes follow the SHA-256 at offset %d (the header says the backup is %d bytes)", h.Size(), h.Size())
	} else if !errors.Is(err, io.EOF) {
		return h, digest, err
	}
	copy(digest[:], br.h.Sum(nil))
	return h, digest, nil
}
