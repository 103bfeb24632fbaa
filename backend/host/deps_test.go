package host_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestTiersApart: no tier imports another (tests included); what they
// share is this package and the baseline.
func TestTiersApart(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./backend/...")
	cmd.Dir = testutil.RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "github.com/cordon-sandbox/cordon/backend/"
	// Packages under backend that are not tiers: shared by them all.
	shared := map[string]bool{prefix + "host": true}
	tiers := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if shared[pkg] {
			continue
		}
		tiers++
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, prefix) && !shared[imp] && imp != pkg {
				t.Errorf("%s imports %s: tiers share host and baseline, never each other", pkg, imp)
			}
		}
	}
	if tiers < 3 {
		t.Fatalf("found %d tiers under backend/, want the process, OCI and passthrough tiers at least:\n%s", tiers, out)
	}
}
