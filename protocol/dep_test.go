package protocol

import (
	"go/build"
	"strings"
	"testing"
)

// DESIGN §2: protocol imports the standard library only.
func TestStdlibOnly(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports found: the check is not looking at the package")
	}
	for _, imp := range pkg.Imports {
		first := strings.SplitN(imp, "/", 2)[0]
		if strings.Contains(first, ".") {
			t.Errorf("protocol imports %q, outside the standard library", imp)
		}
	}
}
