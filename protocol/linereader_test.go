package protocol

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

// timeoutReader returns a deadline error like a net.Conn would.
type timeoutReader struct{}

func (timeoutReader) Read([]byte) (int, error) { return 0, os.ErrDeadlineExceeded }

type lineCase struct {
	name      string
	r         io.Reader
	wantLine  string
	wantErr   Reason // "" means ReadLine succeeds
	wantExtra int
	eofErr    Reason
}

// lineCases are fresh readers on every call.
func lineCases() []lineCase {
	line256 := strings.Repeat("A", 256)
	return []lineCase{
		{name: "simple", r: strings.NewReader("abc\n"), wantLine: "abc"},
		{name: "one byte at a time", r: iotest.OneByteReader(strings.NewReader("abc\n")), wantLine: "abc"},
		{name: "exactly 256", r: strings.NewReader(line256 + "\n"), wantLine: line256},
		{name: "257 without LF", r: strings.NewReader(line256 + "A\n"), wantErr: ReasonSize},
		{name: "endless stream", r: io.MultiReader(strings.NewReader(strings.Repeat("B", 10000))), wantErr: ReasonSize},
		{name: "EOF before LF", r: strings.NewReader("abc"), wantErr: ReasonFormat},
		{name: "empty stream", r: strings.NewReader(""), wantErr: ReasonFormat},
		{name: "CR in line", r: strings.NewReader("ab\rc\n"), wantErr: ReasonFormat},
		{name: "CRLF", r: strings.NewReader("abc\r\n"), wantErr: ReasonFormat},
		{name: "trailing bytes", r: strings.NewReader("abc\nxyz"), wantLine: "abc", wantExtra: 3, eofErr: ReasonFormat},
		{name: "second line later", r: io.MultiReader(strings.NewReader("abc\n"), strings.NewReader("x")), wantLine: "abc", eofErr: ReasonFormat},
		{name: "timeout", r: timeoutReader{}, wantErr: ReasonTimeout},
		{name: "timeout waiting for EOF", r: io.MultiReader(strings.NewReader("abc\n"), timeoutReader{}), wantLine: "abc", eofErr: ReasonTimeout},
		{name: "io error", r: iotest.ErrReader(errors.New("reset")), wantErr: ReasonIO},
		{name: "io error after data", r: iotest.DataErrReader(strings.NewReader("ab")), wantErr: ReasonFormat},
	}
}

// SPEC §1.1: bounded line reading, reading r only from ReadLine or with the
// first read done by ReadOnce (the agent's read when the socket becomes
// readable): the same lines and reasons either way.
func TestLineReader(t *testing.T) {
	for _, first := range []string{"ReadLine", "ReadOnce"} {
		for _, tc := range lineCases() {
			t.Run(first+"/"+tc.name, func(t *testing.T) { checkLine(t, tc, first == "ReadOnce") })
		}
	}
}

func checkLine(t *testing.T, tc lineCase, readOnce bool) {
	t.Helper()
	lr := NewLineReader(tc.r)
	if readOnce {
		lr.ReadOnce(tc.r.Read)
	}
	line, err := lr.ReadLine()
	if tc.wantErr != "" {
		if !hasReason(err, tc.wantErr) {
			t.Fatalf("got %q, %v; want reason %s", line, err, tc.wantErr)
		}
		return
	}
	if err != nil || string(line) != tc.wantLine {
		t.Fatalf("got %q, %v", line, err)
	}
	if lr.Extra() != tc.wantExtra {
		t.Fatalf("extra %d, want %d", lr.Extra(), tc.wantExtra)
	}
	err = lr.ExpectEOF()
	if tc.eofErr == "" && err != nil || tc.eofErr != "" && !hasReason(err, tc.eofErr) {
		t.Fatalf("ExpectEOF: %v, want %q", err, tc.eofErr)
	}
}

// The reader never consumes more than MaxLine+1 bytes looking for a line.
func TestLineReaderBounded(t *testing.T) {
	src := bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20))
	lr := NewLineReader(src)
	if _, err := lr.ReadLine(); !hasReason(err, ReasonSize) {
		t.Fatal(err)
	}
	if read := (1 << 20) - src.Len(); read != MaxLine+1 {
		t.Fatalf("read %d bytes", read)
	}
	if _, err := lr.ReadLine(); err == nil {
		t.Fatal("second ReadLine accepted")
	}
	lr.Reset(strings.NewReader("ok\n"))
	if l, err := lr.ReadLine(); err != nil || string(l) != "ok" {
		t.Fatal(l, err)
	}
}
