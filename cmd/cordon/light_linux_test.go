package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestLightHandsOver: the light cordon (scripts/setup.sh's bin/cordon)
// runs the process and passthrough tiers itself and hands every other verb
// and tier to cordon-full beside it. Alone, it still runs those tiers, and
// says what is missing for the rest.
func TestLightHandsOver(t *testing.T) {
	testutil.RequiresRoot(t) // the default tier maps users, which needs root here
	cli := buildCLI(t)
	if out, _, _ := runBin(cli, "version"); !strings.Contains(out, "light build") {
		t.Fatalf("cordon version: %q, want the light build", out)
	}
	// Beside cordon-full: the full build answers what the light one
	// hands over. Its tiers are all of them; a tier the light build does
	// not know is refused by the full build, which names all it knows.
	if out, errOut, code := runBin(cli, "tiers"); code != 0 || !strings.Contains(out, "container") || !strings.Contains(out, "microvm") {
		t.Errorf("cordon tiers: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := runBin(cli, "run", "--tier", "nosuch", "--", "true"); code != 125 || !strings.Contains(errOut, "unknown sandbox tier") || !strings.Contains(errOut, "container") {
		t.Errorf("a tier the light build lacks: exit %d, %q", code, errOut)
	}
	if out, errOut, code := runBin(cli, "run", "--tier", "process", "--", "sh", "-c", "echo here; exit 3"); code != 3 || out != "here\n" {
		t.Errorf("the process tier: exit %d, %q %q", code, out, errOut)
	}

	// Alone (with its agent): it runs its own tiers, and refuses the rest
	// naming cordon-full and how to install it.
	dir, err := os.MkdirTemp("", "cordon-light-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the sandbox's mapped user reaches the agent
		t.Fatal(err)
	}
	for _, name := range []string{"cordon", "cordon-agent"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(cli), name))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	alone := filepath.Join(dir, "cordon")
	if out, errOut, code := runBin(alone, "run", "--", "echo", "alone"); code != 0 || out != "alone\n" {
		t.Errorf("alone, the default tier: exit %d, %q %q", code, out, errOut)
	}
	for _, args := range [][]string{{"tiers"}, {"serve", "--help"}, {"image", "ls"}, {"run", "--image", "debian.test/none", "--", "true"}, {"run", "--tier", "container", "--", "true"}} {
		_, errOut, code := runBin(alone, args...)
		if code != 125 || !strings.Contains(errOut, filepath.Join(dir, "cordon-full")) || !strings.Contains(errOut, "setup.sh") {
			t.Errorf("alone, cordon %v: exit %d, %q", args, code, errOut)
		}
	}
}
