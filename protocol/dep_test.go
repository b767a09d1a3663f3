package protocol

import (
	"go/build"
	"strings"
	"testing"
)

// DESIGN §2: protocol (and its vectors) import the standard library only.
func TestStdlibOnly(t *testing.T) {
	for _, dir := range []string{".", "vectors"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pkg.Imports) == 0 {
			t.Fatalf("%s: no imports found: the check is not looking at the package", dir)
		}
		for _, imp := range pkg.Imports {
			first := strings.SplitN(imp, "/", 2)[0]
			if strings.Contains(first, ".") {
				t.Errorf("%s imports %q, outside the standard library", pkg.ImportPath, imp)
			}
		}
	}
}
