package node

// Replacement by a new generation (SPEC §3.4). A node's NodeId is its
// cluster.name (generation 1) or NAME~G (G ≥ 2); the trust map, the gossip
// name and the mesh id stay NAME's (ClusterConfig.gossipName). The data
// dir says which generation it belongs to (datadir.GenerationFile; none:
// NAME). A cluster node started on its retired data dir with
// cluster.auto_replace moves that dir aside (retired-<NodeId>-<unix_s>
// beside it, the newest keepAside kept) and starts a fresh one as the
// generation above every one of NAME it knows — the retired marker (which
// may carry the cluster's replicated retired list as a floor), the dir's
// own NodeId and the dirs kept aside — so a NodeId is never reused. The
// fresh generation never bootstraps: it joins as a non-voter and the
// reconciler promotes it once caught up. It refuses instead (exit 2, with
// the operator's next step) for an agent that lied or is misconfigured,
// past cluster.auto_replace_max replacements of NAME within an hour, or
// with auto_replace off; a single node is never replaced (SPEC §4).

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/protocol"
)

// keepAside is how many retired dirs of a NAME are kept beside the data
// dir (for forensics); older ones are removed after a replacement.
const keepAside = 3

// replaceWindow is the window cluster.auto_replace_max counts in.
const replaceWindow = time.Hour

// ReplaceRefusedError refuses to replace a retired data dir by a new
// generation (exit 2: restarting cannot help). errors.Is(err, ErrRetired)
// holds.
type ReplaceRefusedError struct {
	Dir    string
	NodeID string // the retired NodeId
	Why    string // the reason, naming the rule
	Next   string // the operator's next step
}

func (e *ReplaceRefusedError) Error() string {
	return fmt.Sprintf("node: data dir %s of retired NodeId %s is not replaced by a new generation: %s; next: %s", e.Dir, e.NodeID, e.Why, e.Next)
}

// Is makes errors.Is(err, ErrRetired) true.
func (e *ReplaceRefusedError) Is(target error) bool { return target == ErrRetired }

// agentMisbehaved reports whether a FAILED reason says the agent lied or
// is misconfigured (SPEC §3.4: someone must look): version, nonce, mac,
// format, size. reason is the SPEC §1.5 reason as the marker recorded it,
// or an error text naming it in parentheses.
func agentMisbehaved(reason string) bool {
	r := reason
	if _, in, ok := strings.Cut(reason, "("); ok {
		r, _, _ = strings.Cut(in, ")")
	}
	switch protocol.Reason(strings.TrimSpace(r)) {
	case protocol.ReasonVersion, protocol.ReasonNonce, protocol.ReasonMAC, protocol.ReasonFormat, protocol.ReasonSize:
		return true
	}
	return false
}

// dataDirID opens the data dir and decides this node's NodeId: the one
// the dir belongs to, or — on a retired dir with auto_replace, or on a
// fresh dir beside retired dirs of NAME — the next generation's, in a
// fresh dir. It returns the open dir and the NodeId.
func dataDirID(cfg *Config, now time.Time, log *slog.Logger) (*datadir.Dir, string, error) {
	path, name := cfg.Cluster.Raft.DataDir, cfg.Cluster.Name
	d, err := datadir.Open(path)
	if err != nil {
		return nil, "", err
	}
	id, replaced, err := dirNodeID(d, name)
	if err != nil {
		d.Close()
		return nil, "", err
	}
	rerr := d.CheckRetired()
	var re *datadir.RetiredError
	switch {
	case rerr == nil && cfg.Cluster.Enabled && id == name && isFresh(d):
		// A new or emptied data dir: above every generation of NAME kept
		// aside (an operator who moved a retired dir away by hand).
		gen, err := highestAside(path, name)
		if err != nil || gen == 0 {
			return d, id, nil // unreadable parent: the cluster's retired list still refuses a reused NodeId
		}
		next := identity.GenerationID(name, gen+1)
		if err := d.WriteGeneration(datadir.Generation{NodeID: next}); err != nil {
			d.Close()
			return nil, "", &datadir.Error{File: d.File(datadir.GenerationFile), Err: err}
		}
		log.Warn("new data dir beside retired generations of this name: starting as the next generation", "node_id", next, "dir", path)
		return d, next, nil
	case rerr == nil:
		return d, id, nil
	case !errors.As(rerr, &re) || !cfg.Cluster.Enabled:
		d.Close()
		return nil, "", rerr
	}
	if re.NodeID == "" {
		re.NodeID = id
	}
	if nm, _, ok := identity.SplitGeneration(re.NodeID); !ok || nm != name {
		d.Close()
		return nil, "", &datadir.Error{File: d.File(datadir.RetiredFile),
			Err: fmt.Errorf("node_id %q is not cluster.name %q or one of its generations NAME~G (refusing to start: whose retired dir this is is unknown)", re.NodeID, name)}
	}
	nd, next, err := replaceRetired(cfg, d, re, replaced, now, log)
	if err != nil {
		d.Close()
		return nil, "", err
	}
	return nd, next, nil
}

// dirNodeID is the NodeId the data dir belongs to (its generation marker,
// else name) and the replacement times it records.
func dirNodeID(d *datadir.Dir, name string) (string, []int64, error) {
	g, err := d.ReadGeneration()
	if err != nil || g == nil {
		return name, nil, err
	}
	gname, _, ok := identity.SplitGeneration(g.NodeID)
	if !ok || gname != name {
		return "", nil, config.Errorf("cluster.name", "is %q but data dir %s belongs to NodeId %q (file %s): a data dir serves the name it was made for",
			name, d.Path(), g.NodeID, datadir.GenerationFile)
	}
	return g.NodeID, g.Replaced, nil
}

// isFresh: the dir holds nothing but its lock.
func isFresh(d *datadir.Dir) bool {
	ents, err := os.ReadDir(d.Path())
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Name() != datadir.LockFile {
			return false
		}
	}
	return true
}

// asideOf lists the retired dirs of name beside path, oldest first.
func asideOf(path, name string) ([]datadir.Aside, error) {
	all, err := datadir.ListAside(path)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(a datadir.Aside) bool { return identity.TrustName(a.NodeID) != name }), nil
}

// highestAside is the highest generation of name kept aside (0: none).
func highestAside(path, name string) (int, error) {
	as, err := asideOf(path, name)
	if err != nil {
		return 0, err
	}
	top := 0
	for _, a := range as {
		if _, g, ok := identity.SplitGeneration(a.NodeID); ok {
			top = max(top, g)
		}
	}
	return top, nil
}

// replaceRetired applies the rules to the retired dir d and, when they
// allow it, moves d aside and returns a fresh dir of the next generation.
// On any refusal or error nothing was changed (d stays open and in place).
func replaceRetired(cfg *Config, d *datadir.Dir, re *datadir.RetiredError, replaced []int64, now time.Time, log *slog.Logger) (*datadir.Dir, string, error) {
	path, name := d.Path(), cfg.Cluster.Name
	aside := datadir.AsidePath(path, re.NodeID, now)
	refuse := func(why, next string) error {
		return &ReplaceRefusedError{Dir: path, NodeID: re.NodeID, Why: why, Next: next}
	}
	mv := fmt.Sprintf("`mv %s %s`", path, aside)
	if !cfg.Cluster.AutoReplace {
		return nil, "", refuse("cluster.auto_replace is off (clock FAILED after joining: "+re.Reason+")",
			"bring up a new node with a new NodeId and an empty data dir, or set cluster.auto_replace: true and start again; if every voter is lost, see `ticketd recover`")
	}
	if agentMisbehaved(re.Reason) {
		return nil, "", refuse("the clock FAILED with "+re.Reason+": the agent lied or is misconfigured (a wrong clock secret, another protocol version, or something rewriting its answers) and a new generation would fail the same way",
			"check the agent and this node's clock.secret_file (tckclk-conformance --addr AGENT --secret-file F); once fixed, move the retired dir aside, "+mv+", and start again: the node comes back as the next generation")
	}
	kept, err := asideOf(path, name)
	if err != nil {
		return nil, "", refuse(fmt.Sprintf("the directory beside the data dir cannot be read: %v", err),
			"make "+filepath.Dir(aside)+" readable, then start again")
	}
	count := recentReplacements(kept, replaced, now)
	if count >= cfg.Cluster.AutoReplaceMax {
		return nil, "", refuse(fmt.Sprintf("%s was replaced %d times within the last hour (cluster.auto_replace_max %d): a node that keeps failing needs a look", name, count, cfg.Cluster.AutoReplaceMax),
			"find why its clock keeps failing (the agent, the host's clock, CPU starvation: the FAILED reasons are in the retired dirs' markers beside the data dir); then move the retired dir aside, "+mv+", and start again, or raise cluster.auto_replace_max")
	}
	gen := re.Floor
	if _, g, ok := identity.SplitGeneration(re.NodeID); ok {
		gen = max(gen, g)
	}
	for _, a := range kept {
		if _, g, ok := identity.SplitGeneration(a.NodeID); ok {
			gen = max(gen, g)
		}
	}
	if gen+1 > identity.MaxGeneration {
		return nil, "", refuse(fmt.Sprintf("generation %d is the last one", gen), "bring up a node under a new name")
	}
	next := identity.GenerationID(name, gen+1)
	if err := d.MoveAside(aside); err != nil {
		return nil, "", refuse(fmt.Sprintf("the retired data dir cannot be moved aside to %s (nothing was changed): %v", aside, err),
			"make the directory holding the data dir writable with free space (a read-only filesystem or a full disk), then start again")
	}
	nd, err := freshGeneration(path, next, append(withinWindow(replaced, now), now.Unix()))
	if err != nil {
		if back := d.MoveBack(path); back != nil {
			return nil, "", refuse(fmt.Sprintf("a fresh data dir could not be made (%v), and the retired dir could not be moved back from %s: %v", err, aside, back),
				"move "+aside+" back to "+path+" by hand, make room, then start again")
		}
		return nil, "", refuse(fmt.Sprintf("a fresh data dir could not be made at %s (nothing was changed): %v", path, err),
			"make the directory holding the data dir writable with free space (a read-only filesystem or a full disk), then start again")
	}
	d.Close() // the aside dir's lock
	log.Warn("retired data dir moved aside: starting as the next generation (SPEC 3.4); it joins as a non-voter and is promoted once caught up",
		"retired_node_id", re.NodeID, "node_id", next, "aside", aside, "failed_reason", re.Reason, "replacements_last_hour", count+1)
	pruneAside(path, name, log)
	return nd, next, nil
}

// freshGeneration makes the fresh data dir of nodeID at path. On an error
// it leaves no dir at path.
func freshGeneration(path, nodeID string, replaced []int64) (*datadir.Dir, error) {
	nd, err := datadir.Open(path)
	if err != nil {
		_ = os.Remove(path) // an empty dir Open may have made
		return nil, err
	}
	if err := nd.WriteGeneration(datadir.Generation{NodeID: nodeID, Replaced: replaced}); err != nil {
		nd.Close()
		_ = os.RemoveAll(path)
		return nil, err
	}
	return nd, nil
}

// recentReplacements counts the distinct replacements of a name within
// replaceWindow before now: the dirs kept aside and the times the data
// dir's generation marker carried forward.
func recentReplacements(kept []datadir.Aside, replaced []int64, now time.Time) int {
	seen := map[int64]bool{}
	for _, a := range kept {
		seen[a.At.Unix()] = true
	}
	for _, t := range replaced {
		seen[t] = true
	}
	n := 0
	for t := range seen {
		if inWindow(t, now) {
			n++
		}
	}
	return n
}

func inWindow(unixS int64, now time.Time) bool {
	at := time.Unix(unixS, 0)
	return !at.After(now) && now.Sub(at) < replaceWindow
}

// withinWindow keeps the times within replaceWindow before now.
func withinWindow(ts []int64, now time.Time) []int64 {
	var out []int64
	for _, t := range ts {
		if inWindow(t, now) {
			out = append(out, t)
		}
	}
	return out
}

// pruneAside removes the retired dirs of name beyond the newest keepAside
// (best effort: logged).
func pruneAside(path, name string, log *slog.Logger) {
	kept, err := asideOf(path, name)
	if err != nil {
		log.Warn("listing the retired dirs kept aside", "err", err)
		return
	}
	for _, a := range kept[:max(0, len(kept)-keepAside)] {
		if err := os.RemoveAll(a.Path); err != nil {
			log.Warn("removing an old retired dir", "dir", a.Path, "err", err)
			continue
		}
		log.Info("removed an old retired dir (the newest are kept)", "dir", a.Path, "keep", keepAside)
	}
}
