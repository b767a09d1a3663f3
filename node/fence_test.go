package node

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"testing"
)

// The cluster half and its libraries stand alone (docs/ARCHITECTURE.md):
// no package under node/cluster — node/cluster itself included — imports
// the node, in its code or its tests, so the node reaches them and never
// the other way round (the cluster half asks the node through
// cluster.Host).
func TestClusterLibrariesDoNotImportNode(t *testing.T) {
	const self = "github.com/tckclk/tckclk/node"
	checked, root := 0, false
	err := filepath.WalkDir("cluster", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		pkg, err := build.ImportDir(dir, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return err
		}
		checked++
		root = root || dir == "cluster" // the cluster half itself (package cluster)
		for _, list := range [][]string{pkg.Imports, pkg.TestImports, pkg.XTestImports} {
			for _, imp := range list {
				if imp == self {
					t.Errorf("%s imports %s: the cluster libraries must not reach back into the node", dir, imp)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !root {
		t.Fatal("node/cluster itself (the cluster half) was not checked")
	}
	if checked < 6 {
		t.Fatalf("checked %d packages under node/cluster, want the 6 libraries at least: the check is not looking at them", checked)
	}
}
