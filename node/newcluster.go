package node

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
	"github.com/tckclk/tckclk/protocol"
)

// newCluster is what `ticketd recover` and `ticketd restore` share (SPEC
// §3.4): a new data dir To holding a state as a one-voter cluster under a
// NodeId the old cluster never used, with Grant and Expire held off for
// 250 s + Δ.
type newCluster struct {
	To       string // the new data dir; must not exist or be empty
	NodeID   string
	Address  string // its Raft address ("" = NodeID)
	LogStore string
	Now      time.Time
	Logger   *slog.Logger
}

// check validates the options that need no file, filling in the defaults.
// deltaMs 0 is not checked (restore takes the backup's).
func (o *newCluster) check(deltaMs uint64) error {
	if err := ticket.ValidName(o.NodeID); err != nil {
		return config.Errorf("--node-id", "%v", err)
	}
	if deltaMs != 0 {
		if err := protocol.ValidateDelta(deltaMs); err != nil {
			return config.Errorf("--delta-ms", "%v", err)
		}
	}
	if o.To == "" {
		return config.Errorf("--data-dir", "the new data dir is required")
	}
	if o.Address == "" {
		o.Address = o.NodeID
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	return checkNewDataDir(o.To)
}

// checkNewDataDir refuses a data dir that holds anything: recover and
// restore write a new one, never over a node's state.
func checkNewDataDir(to string) error {
	ents, err := os.ReadDir(to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return config.Errorf("--data-dir", "%s: %v", to, err)
	case len(ents) > 0:
		return config.Errorf("--data-dir", "%s already holds data (%s): a new data dir is written here, never over one; give a new or empty directory", to, ents[0].Name())
	}
	return nil
}

// checkNewID refuses a NodeId the old cluster used.
func (o *newCluster) checkNewID(old map[string]bool, fsm *ticket.FSM) error {
	if old[o.NodeID] || fsm.IsRetired(o.NodeID) {
		return config.Errorf("--node-id", "%q was a member of the old cluster; the new cluster needs a NodeId never used before", o.NodeID)
	}
	return nil
}

// holdUntil is when the new cluster's hold-off ends.
func (o *newCluster) holdUntil(deltaMs uint64) time.Time { return o.Now.Add(holdOffFor(deltaMs)) }

// write builds the new data dir from fsm at info's position: in a fresh
// directory next to To, renamed to To once complete (snapshot, log,
// high-water mark and the hold-off marker, each synced; an empty To is
// removed first), so To is either absent or empty, or a whole data dir —
// never a state without its hold-off. To cannot be a mount point (use a
// directory inside it). source is what the marker names as its origin.
func (o *newCluster) write(fsm *ticket.FSM, info consensus.RecoverInfo, source string, holdUntil time.Time) (err error) {
	to := filepath.Clean(o.To)
	parent := filepath.Dir(to)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return &datadir.Error{File: parent, Err: err}
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(to)+".new-")
	if err != nil {
		return &datadir.Error{File: parent, Err: err}
	}
	d, err := datadir.Open(tmp)
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	defer func() {
		d.Close()
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := consensus.WriteRecovered(d, fsm, info, o.NodeID, o.Address, o.LogStore, o.Logger); err != nil {
		return err
	}
	if err := d.WriteRecovered(source, holdUntil, info.LastIndex); err != nil {
		return &datadir.Error{File: d.File(datadir.RecoveredFile), Err: err}
	}
	if err := checkNewDataDir(to); err != nil {
		return err // filled meanwhile
	}
	// An empty To goes first (not every filesystem renames a directory
	// over an empty one); a mount point cannot go, and says so.
	if err := os.Remove(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &datadir.Error{File: to, Err: fmt.Errorf("replacing the empty directory: %w (a mount point cannot be replaced: give a directory inside it)", err)}
	}
	if err := os.Rename(tmp, to); err != nil {
		return &datadir.Error{File: to, Err: fmt.Errorf("moving the new data dir into place: %w", err)}
	}
	if err := syncDir(parent); err != nil {
		return &datadir.Error{File: parent, Err: err}
	}
	return nil
}

// syncDir fsyncs a directory, making a rename in it durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
