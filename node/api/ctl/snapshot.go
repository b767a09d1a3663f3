package ctl

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// snapshotArgs checks `snapshot save FILE` and returns FILE.
func snapshotArgs(pos []string) (string, error) {
	switch {
	case len(pos) == 0 || pos[0] != "save":
		return "", usagef("snapshot takes a subcommand: snapshot save FILE")
	case len(pos) != 2 || pos[1] == "":
		return "", usagef("snapshot save needs exactly one FILE, got %d arguments", len(pos)-1)
	}
	return pos[1], nil
}

// saveBackup is `ticketctl snapshot save FILE` (SPEC §3.4): the leader's
// backup, verified as it arrives (length, SHA-256), into a temporary file
// (mode 0600) in FILE's directory, synced and renamed onto FILE, the
// directory synced; on any failure FILE is left as it was and the
// temporary file removed.
func saveBackup(ctx context.Context, c *client.Client, file string, p printer) (err error) {
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".part-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // its path is the temporary file's
		}
		return fmt.Errorf("snapshot save: cannot create a file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<16)
	s, err := c.Backup(ctx, w)
	if err != nil {
		return err
	}
	for _, step := range []func() error{w.Flush, tmp.Sync, tmp.Close} {
		if err = step(); err != nil {
			return fmt.Errorf("snapshot save: writing %s: %w", tmp.Name(), err)
		}
	}
	if err = os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("snapshot save: %s is written, but syncing its directory failed (a crash now may lose it): %w", file, err)
	}
	p.saved(file, s)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// SavedJSON is what snapshot save prints with --json.
type SavedJSON struct {
	File string `json:"file"`
	wire.BackupHeader
	Bytes  uint64 `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// saved prints what snapshot save wrote.
func (p printer) saved(file string, s *client.Saved) {
	sum := hex.EncodeToString(s.SHA256[:])
	if p.json {
		printJSON(p.out, SavedJSON{File: file, BackupHeader: s.BackupHeader, Bytes: s.Bytes, SHA256: sum})
		return
	}
	fmt.Fprintf(p.out, "saved %s: %d tickets at Raft index %d, term %d\n", file, s.Tickets, s.Index, s.Term)
	fmt.Fprintf(p.out, "taken %s by %s (voters %s), Δ %d ms\n", time.UnixMilli(int64(s.TakenUnixMs)).UTC().Format("2006-01-02T15:04:05.000Z"), s.NodeID, strings.Join(s.Voters, ","), s.DeltaMs)
	fmt.Fprintf(p.out, "highest token %d (token epoch %d)\n", s.HighestToken, s.Epoch)
	fmt.Fprintf(p.out, "%d bytes, sha256 %s\n", s.Bytes, sum)
}
