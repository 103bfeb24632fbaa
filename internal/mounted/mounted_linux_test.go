package mounted_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/mounted"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestRemove: a directory with a tmpfs mounted two levels down, holding a
// file, and a bind of a directory from outside it, is removed whole; the
// directory bound from outside keeps its file.
func TestRemove(t *testing.T) {
	testutil.RequiresRoot(t) // to mount
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	deep, bound := filepath.Join(dir, "a b", "c"), filepath.Join(dir, "bound")
	for _, d := range []string{deep, bound} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", deep, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(outside, bound, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := mounted.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("the bound directory lost its file: %v", err)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/a\134b`: `/a\b`, `/plain`: "/plain", `/end\04`: `/end\04`, `/tail\040`: "/tail "} {
		if got := mounted.Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
