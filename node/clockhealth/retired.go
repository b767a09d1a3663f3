package clockhealth

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// RetiredFile is the marker a FAILED node leaves in its data dir (SPEC §3.4).
const RetiredFile = "retired"

// ErrRetired matches (errors.Is) the error CheckRetired returns for a
// retired data dir.
var ErrRetired = errors.New("clockhealth: data dir is retired")

// RetiredError is CheckRetired's refusal: the data dir belongs to a NodeId
// whose clock FAILED after it joined; it must never serve again.
type RetiredError struct {
	Dir    string
	Reason string // as recorded in the marker
}

func (e *RetiredError) Error() string {
	return fmt.Sprintf("clockhealth: data dir %s is retired (clock FAILED after joining: %s); this NodeId must never serve again: "+
		"bring up a new node with a new NodeId and an empty data dir (it joins as a non-voter and the reconciler promotes it), "+
		"or, if every voter is lost, see `ticketd recover`", e.Dir, e.Reason)
}

// Is makes errors.Is(err, ErrRetired) true.
func (e *RetiredError) Is(target error) bool { return target == ErrRetired }

const maxMarker = 4096

// WriteRetired writes the retired marker into dataDir durably (WriteMarker).
// reason is one line of text (typically the FAILED error); newlines are
// flattened.
func WriteRetired(dataDir, reason string) error {
	body := "retired: the clock of this node FAILED after it joined (SPEC 3.4)\n" +
		"reason: " + oneLine(reason) + "\n" +
		"action: bring up a new node with a new NodeId and an empty data dir; never restart this one\n"
	if err := WriteMarker(dataDir, RetiredFile, body); err != nil {
		return fmt.Errorf("clockhealth: retired marker: %w", err)
	}
	return nil
}

// WriteMarker writes a marker file name into dataDir durably: a temporary
// file, fsync, rename, then fsync of the directory, so after it returns the
// marker survives a crash or power loss. The node's single-node FAILED
// marker uses it too.
func WriteMarker(dataDir, name, body string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dataDir, "."+name+"-*")
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
		werr = os.Rename(tmp, filepath.Join(dataDir, name))
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return werr
	}
	return syncDir(dataDir)
}

// RemoveMarker removes a marker file durably (the directory is fsynced); a
// missing marker is not an error.
func RemoveMarker(dataDir, name string) error {
	if err := os.Remove(filepath.Join(dataDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(dataDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// CheckRetired refuses a data dir that holds the retired marker with a
// *RetiredError telling the operator to bring a new NodeId. A marker that
// cannot be examined is an error too (fail closed); no marker is nil.
func CheckRetired(dataDir string) error {
	path := filepath.Join(dataDir, RetiredFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clockhealth: cannot examine the retired marker %s (refusing to start): %w", path, err)
	}
	defer f.Close()
	reason := "reason not recorded"
	sc := bufio.NewScanner(io.LimitReader(f, maxMarker))
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), "reason: "); ok {
			reason = oneLine(r)
			break
		}
	}
	return &RetiredError{Dir: dataDir, Reason: reason}
}

// oneLine keeps printable characters, flattening control characters and
// invalid UTF-8 to a space, and caps the length, so a marker's text is safe
// in a log line.
func oneLine(s string) string {
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
	return s
}
