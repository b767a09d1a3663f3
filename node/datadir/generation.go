package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// GenerationFile names the NodeId of a data dir made for a later
// generation NAME~G (SPEC §3.4); a dir without it belongs to cluster.name.
const GenerationFile = "generation"

// AsidePrefix starts the name of a retired data dir moved aside:
// retired-<NodeId>-<unix_s>, beside the data dir.
const AsidePrefix = "retired-"

// Generation is what a data dir's generation marker says.
type Generation struct {
	NodeID string
	// Replaced are the unix seconds of the replacements of this NAME that
	// led here and fell within the hour before the last one (the newest
	// last): with the dirs kept aside they count against
	// cluster.auto_replace_max.
	Replaced []int64
}

// WriteGeneration records durably that this dir belongs to g.NodeID.
func (d *Dir) WriteGeneration(g Generation) error {
	times := make([]string, len(g.Replaced))
	for i, t := range g.Replaced {
		times[i] = strconv.FormatInt(t, 10)
	}
	body := "generation: this data dir belongs to a later generation of its cluster.name (SPEC 3.4)\n" +
		"node_id: " + OneLine(g.NodeID) + "\n" +
		"replaced_unix_s: " + strings.Join(times, ",") + "\n"
	if err := d.WriteMarker(GenerationFile, body); err != nil {
		return fmt.Errorf("datadir: generation marker: %w", err)
	}
	return nil
}

// ReadGeneration returns the generation marker, or nil when the dir has
// none. One that cannot be read, or names no NodeId, refuses the start
// (the NodeId the dir's Raft state was written under is unknown).
func (d *Dir) ReadGeneration() (*Generation, error) {
	fields, ok, err := d.ReadMarker(GenerationFile)
	if err != nil || !ok {
		return nil, err
	}
	g := &Generation{NodeID: fields["node_id"]}
	if g.NodeID == "" {
		return nil, &Error{File: d.File(GenerationFile), Err: errors.New("no node_id (refusing to start: the NodeId this data dir was written under is unknown)")}
	}
	for f := range strings.SplitSeq(fields["replaced_unix_s"], ",") {
		if t, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil && t > 0 {
			g.Replaced = append(g.Replaced, t)
		}
	}
	return g, nil
}

// Aside is a retired data dir moved aside.
type Aside struct {
	Path   string
	NodeID string    // the retired NodeId
	At     time.Time // when it was moved aside (whole seconds)
}

// AsidePath is where the data dir at path is moved when nodeID retires
// at at: retired-<NodeId>-<unix_s> in the same parent directory (so the
// rename stays on one filesystem).
func AsidePath(path, nodeID string, at time.Time) string {
	return filepath.Join(filepath.Dir(filepath.Clean(path)), AsidePrefix+nodeID+"-"+strconv.FormatInt(at.Unix(), 10))
}

// ListAside lists the retired data dirs kept beside the data dir at path,
// oldest first. A parent that cannot be read is an error; entries that are
// not retired-<NodeId>-<unix_s> directories are ignored.
func ListAside(path string) ([]Aside, error) {
	parent := filepath.Dir(filepath.Clean(path))
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil, &Error{File: parent, Err: err}
	}
	var out []Aside
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), AsidePrefix)
		if !ok || !e.IsDir() {
			continue
		}
		i := strings.LastIndexByte(rest, '-')
		if i <= 0 {
			continue
		}
		sec, err := strconv.ParseInt(rest[i+1:], 10, 64)
		if err != nil || sec <= 0 {
			continue
		}
		out = append(out, Aside{Path: filepath.Join(parent, e.Name()), NodeID: rest[:i], At: time.Unix(sec, 0)})
	}
	slices.SortFunc(out, func(a, b Aside) int { return a.At.Compare(b.At) })
	return out, nil
}

// MoveAside renames this (locked) data dir to to, which must not exist,
// and syncs the parent; the lock stays held and the Dir now names to. On
// an error nothing was moved.
func (d *Dir) MoveAside(to string) error {
	if _, err := os.Lstat(to); err == nil {
		return fmt.Errorf("%s already exists", to)
	}
	if err := os.Rename(d.path, to); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(to)); err != nil {
		if back := os.Rename(to, d.path); back != nil {
			d.path = to
			return fmt.Errorf("%w; and it could not be moved back from %s: %v", err, to, back)
		}
		return err
	}
	d.path = to
	return nil
}

// MoveBack undoes MoveAside: the dir goes back to path (which must not
// exist again).
func (d *Dir) MoveBack(path string) error {
	if err := os.Rename(d.path, path); err != nil {
		return err
	}
	d.path = path
	return syncDir(filepath.Dir(path))
}
