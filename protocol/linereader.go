package protocol

import (
	"bytes"
	"errors"
	"io"
)

// LineReader reads one TCKCLK/2 line from a stream with a fixed buffer of
// MaxLine+1 bytes: nothing a peer sends can make it allocate or read more
// (SPEC §1.1).
type LineReader struct {
	r    io.Reader
	buf  [MaxLine + 1]byte
	n    int // bytes held in buf
	lf   int // index of the LF in buf, -1 until found
	done bool
	err  error // from ReadOnce: ReadLine returns it before reading r
}

// NewLineReader returns a reader of one line from r.
func NewLineReader(r io.Reader) *LineReader {
	return &LineReader{r: r, lf: -1}
}

// Reset makes lr read a new line from r, reusing its buffer.
func (lr *LineReader) Reset(r io.Reader) {
	lr.r, lr.n, lr.lf, lr.done, lr.err = r, 0, -1, false, nil
}

// ReadOnce fills lr's buffer with one call of read before ReadLine (which
// then reads from r only if no LF came): a server that does its first read
// itself, e.g. straight from the socket when it becomes readable, instead
// of peeking first. read gets the free part of the buffer and follows
// io.Reader's contract; an error it returns is the one ReadLine reports
// once the bytes read are used up.
func (lr *LineReader) ReadOnce(read func(p []byte) (int, error)) {
	if lr.done || lr.lf >= 0 || lr.err != nil || lr.n == len(lr.buf) {
		return
	}
	m, err := read(lr.buf[lr.n:])
	lr.took(min(max(m, 0), len(lr.buf)-lr.n)) // a read breaking io.Reader's contract never indexes past buf
	lr.err = err
}

// took adds m bytes just read into buf[n:] and notes the first LF.
func (lr *LineReader) took(m int) {
	if i := bytes.IndexByte(lr.buf[lr.n:lr.n+m], '\n'); i >= 0 && lr.lf < 0 {
		lr.lf = lr.n + i
	}
	lr.n += m
}

// ReadLine reads up to the first LF and returns the line without it. The
// returned slice aliases lr's buffer. Errors carry a reason: size when 257
// bytes arrive without LF, format for a missing LF before EOF or a CR in the
// line, timeout when the reader's deadline passes, io otherwise.
func (lr *LineReader) ReadLine() ([]byte, error) {
	if lr.done {
		return nil, errors.New("protocol: ReadLine called twice")
	}
	lr.done = true
	for lr.lf < 0 {
		if lr.n == len(lr.buf) {
			return nil, errSize
		}
		var m int
		err := lr.err
		if err == nil {
			m, err = lr.r.Read(lr.buf[lr.n:])
		}
		lr.err = nil
		if m > 0 {
			lr.took(m)
			continue
		}
		if err == io.EOF {
			return nil, errNoLF
		}
		if err != nil {
			return nil, readError("reading line", err)
		}
	}
	line := lr.buf[:lr.lf]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, errBytes
	}
	return line, nil
}

// Extra returns how many bytes after the LF were already read. An agent
// ignores them; a client treats any as a format violation.
func (lr *LineReader) Extra() int {
	if lr.lf < 0 {
		return 0
	}
	return lr.n - lr.lf - 1
}

// ExpectEOF is the client's last step (SPEC §1.1): after the LF the agent
// must close. Any byte after the LF is format; an error other than EOF is
// timeout (deadline) or io.
func (lr *LineReader) ExpectEOF() error {
	if lr.Extra() > 0 {
		return errTrailing
	}
	var one [1]byte
	for {
		m, err := lr.r.Read(one[:])
		if m > 0 {
			return errTrailing
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readError("waiting for EOF", err)
		}
	}
}

type timeouter interface{ Timeout() bool }

func readError(what string, err error) *Error {
	var t timeouter
	if errors.As(err, &t) && t.Timeout() {
		return Wrap(ReasonTimeout, what, err)
	}
	return Wrap(ReasonIO, what, err)
}
