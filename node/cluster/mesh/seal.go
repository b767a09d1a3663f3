package mesh

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/chacha20poly1305"
)

// Sealed records (SPEC §5 "Mesh": every frame after the handshake is
// sealed). After the handshake each direction is a sequence of records:
//
//	record = length[2] ciphertext[length]
//
// length is big-endian, 17..=MaxRecord+16 (a plaintext of 1..=MaxRecord
// bytes and the 16-byte tag). The ciphertext is ChaCha20-Poly1305 under
// that direction's key (SessionKeys), with the record's number in the
// direction (0, 1, 2, …) as the nonce — 4 zero bytes, then the number
// big-endian in 8 — and the length bytes as additional data. The number is
// not sent: a record that was changed, injected, replayed, reordered or
// dropped does not authenticate, and the first record that fails ends
// the connection. ChaCha20-Poly1305 has no practical limit on the data
// one key may seal within a 64-bit record number, so keys are never
// renewed within a session.
const (
	// MaxRecord is the largest plaintext of one record.
	MaxRecord = 16 << 10
	// recordOverhead is the tag.
	recordOverhead = chacha20poly1305.Overhead
	// KeySize is the size of a direction's key.
	KeySize = chacha20poly1305.KeySize
)

// Record errors, matched with errors.Is.
var (
	// ErrRecord: a record does not authenticate (tampered, injected,
	// replayed, reordered or a record missing before it) or its length is
	// out of range.
	ErrRecord = errors.New("mesh: sealed record refused")
	// ErrRecordsExhausted: 2^64 records were sealed under one key.
	ErrRecordsExhausted = errors.New("mesh: record numbers exhausted")
)

// Sealer seals the records of one direction.
type Sealer struct {
	aead  cipher.AEAD
	seq   uint64
	spent bool // seq wrapped: no nonce is left
}

// Opener opens the records of one direction, in order.
type Opener struct {
	aead  cipher.AEAD
	seq   uint64
	spent bool
	err   error // the first refused record: every later call returns it
	buf   []byte
}

// NewSealer returns the sealer of a direction keyed with key (KeySize bytes).
func NewSealer(key []byte) (*Sealer, error) {
	a, err := chacha20poly1305.New(key)
	if err != nil {
		return nil, fmt.Errorf("mesh: sealing key: %w", err)
	}
	return &Sealer{aead: a}, nil
}

// NewOpener returns the opener of a direction keyed with key (KeySize bytes).
func NewOpener(key []byte) (*Opener, error) {
	a, err := chacha20poly1305.New(key)
	if err != nil {
		return nil, fmt.Errorf("mesh: opening key: %w", err)
	}
	return &Opener{aead: a}, nil
}

func recordNonce(seq uint64) [chacha20poly1305.NonceSize]byte {
	var n [chacha20poly1305.NonceSize]byte
	binary.BigEndian.PutUint64(n[4:], seq)
	return n
}

// next takes the next record number.
func next(seq *uint64, spent *bool) (uint64, error) {
	if *spent {
		return 0, ErrRecordsExhausted
	}
	n := *seq
	if n == math.MaxUint64 {
		*spent = true
	} else {
		*seq++
	}
	return n, nil
}

// AppendRecords appends plain to dst as records of at most MaxRecord
// plaintext bytes each (none for an empty plain).
func (s *Sealer) AppendRecords(dst, plain []byte) ([]byte, error) {
	for len(plain) > 0 {
		chunk := plain[:min(len(plain), MaxRecord)]
		plain = plain[len(chunk):]
		var err error
		if dst, err = s.appendRecord(dst, chunk); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// appendRecords2 is AppendRecords of head followed by plain (head at most
// MaxRecord bytes), without copying plain beyond the first record.
func (s *Sealer) appendRecords2(dst, scratch, head, plain []byte) ([]byte, []byte, error) {
	if len(head) == 0 {
		dst, err := s.AppendRecords(dst, plain)
		return dst, scratch, err
	}
	n := min(len(plain), MaxRecord-len(head))
	scratch = append(append(scratch[:0], head...), plain[:n]...)
	dst, err := s.appendRecord(dst, scratch)
	if err != nil {
		return dst, scratch, err
	}
	dst, err = s.AppendRecords(dst, plain[n:])
	return dst, scratch, err
}

// appendRecord seals one record of 1..=MaxRecord plaintext bytes.
func (s *Sealer) appendRecord(dst, chunk []byte) ([]byte, error) {
	seq, err := next(&s.seq, &s.spent)
	if err != nil {
		return dst, err
	}
	var hdr [2]byte
	binary.BigEndian.PutUint16(hdr[:], uint16(len(chunk)+recordOverhead))
	nonce := recordNonce(seq)
	dst = append(dst, hdr[:]...)
	return s.aead.Seal(dst, nonce[:], chunk, hdr[:]), nil
}

// ReadRecord reads and opens the next record from r and returns its
// plaintext (valid until the next call). Any failure is final for the
// direction: the caller closes the connection.
func (o *Opener) ReadRecord(r io.Reader) ([]byte, error) {
	if o.err != nil {
		return nil, o.err
	}
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[:]))
	if n <= recordOverhead || n > MaxRecord+recordOverhead {
		o.err = fmt.Errorf("%w: record %d has length %d, outside %d..=%d", ErrRecord, o.seq, n, recordOverhead+1, MaxRecord+recordOverhead)
		return nil, o.err
	}
	if cap(o.buf) < n {
		o.buf = make([]byte, MaxRecord+recordOverhead)
	}
	body := o.buf[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	seq, err := next(&o.seq, &o.spent)
	if err != nil {
		return nil, err
	}
	nonce := recordNonce(seq)
	plain, err := o.aead.Open(body[:0], nonce[:], body, hdr[:])
	if err != nil {
		o.err = fmt.Errorf("%w: record %d does not authenticate (changed, injected, replayed, reordered, or one before it is missing)", ErrRecord, seq)
		return nil, o.err
	}
	return plain, nil
}

// sealedConn carries a session's bytes as sealed records over conn.
// Reads are single-goroutine (yamux's receive loop), writes are
// serialized. The first failure on either side closes conn. A Read
// that fails because a failed Write closed conn returns that Write's
// error: a reset a write ran into ends the session as one (peerGone),
// whichever of yamux's loops ends the session first.
//
// yamux writes a data frame's 12-byte header and its body in two Writes,
// one right after the other on its send loop; the header of a data frame
// with a body is held back and sealed with the body, so a frame costs one
// record and one write, not two.
type sealedConn struct {
	net.Conn
	open    *Opener
	onBreak func(error) // a record failed to open (counted and logged by the mesh)

	rmu     sync.Mutex
	pending []byte // opened plaintext not read yet
	rerr    error

	wmu     sync.Mutex
	seal    *Sealer
	held    []byte // a data frame's header waiting for its body (in heldBuf)
	heldBuf [yamuxHeaderSize]byte
	scratch []byte
	wbuf    []byte
	werr    error
	broke   atomic.Pointer[error] // werr, stored before the Write closes conn
}

// yamux's frame header (hashicorp/yamux const.go): version, type, flags
// (2), stream id (4), length (4); type 0 is data, whose length is the
// size of the body that follows.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// maxKeptWriteBuffer bounds the sealed-write buffer a connection keeps
// between writes: room for yamux's largest frame (its default 256 KiB
// stream window) sealed. Allocating it afresh for every large write costs
// more than the sealing (allocation, zeroing, GC).
const maxKeptWriteBuffer = 320 << 10

// dataHeaderWithBody reports whether p is exactly a yamux data frame's
// header announcing a body.
func dataHeaderWithBody(p []byte) bool {
	return len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:]) > 0
}

func newSealedConn(c net.Conn, out, in []byte, onBreak func(error)) (*sealedConn, error) {
	s, err := NewSealer(out)
	if err != nil {
		return nil, err
	}
	o, err := NewOpener(in)
	if err != nil {
		return nil, err
	}
	return &sealedConn{Conn: c, open: o, seal: s, onBreak: onBreak}, nil
}

func (c *sealedConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		plain, err := c.open.ReadRecord(c.Conn)
		if err != nil {
			if b := c.broke.Load(); b != nil && errors.Is(err, net.ErrClosed) {
				err = *b
			}
			c.rerr = err
			if errors.Is(err, ErrRecord) {
				c.Conn.Close()
				if c.onBreak != nil {
					c.onBreak(err)
				}
			}
			return 0, err
		}
		c.pending = plain
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *sealedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	if c.held == nil && dataHeaderWithBody(p) {
		c.held = append(c.heldBuf[:0], p...)
		return len(p), nil
	}
	var err error
	c.wbuf, c.scratch, err = c.seal.appendRecords2(c.wbuf[:0], c.scratch, c.held, p)
	c.held = nil
	if err == nil {
		_, err = c.Conn.Write(c.wbuf)
	}
	if cap(c.wbuf) > maxKeptWriteBuffer {
		c.wbuf = nil // do not keep an unusually large buffer
	}
	if err != nil {
		// A record may be half sent: the direction is unusable.
		c.werr = err
		c.broke.Store(&err)
		c.Conn.Close()
		return 0, err
	}
	return len(p), nil
}
