package microvm

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBuildOnceKeepsItsKindBounded: a build removes the built files of
// its kind (saved guests here) that no VM started from for cacheIdle, and
// keeps those of other kinds, those in use (touched by their use), and
// builds in progress; a use marks a file used.
func TestBuildOnceKeepsItsKindBounded(t *testing.T) {
	dir := t.TempDir()
	b := &Backend{cfg: Config{StateDir: dir}}
	old := time.Now().Add(-2 * cacheIdle)
	files := map[string]bool{ // name: kept after the build
		"saved-stale.vmstate":        false,
		"saved-used.vmstate":         true,
		"saved-building.vmstate.tmp": true,
		"root-stale.ext4":            true, // another kind
		"initramfs-stale.cpio":       true,
	}
	for name := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	// A VM starts from saved-used: it is marked used.
	if err := b.buildOnce(t.Context(), filepath.Join(dir, "saved-used.vmstate"), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.buildOnce(t.Context(), filepath.Join(dir, "saved-new.vmstate"), func(tmp string) error { return os.WriteFile(tmp, []byte("new"), 0o600) }); err != nil {
		t.Fatal(err)
	}
	files["saved-new.vmstate"] = true
	for name, kept := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", name, err == nil, kept)
		}
	}
}
