package privdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsure(t *testing.T) {
	base := t.TempDir()
	if err := Ensure(filepath.Join(base, "new", "state"), 0o700); err != nil {
		t.Fatalf("a new directory of this user's: %v", err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(filepath.Join(base, "new"), link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{open, "can be written by other users"},
		{filepath.Join(open, "state"), "is not sticky"},
		{link, "is not a directory"},
	} {
		if err := Ensure(c.dir, 0o700); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.dir, err, c.want)
		}
	}
	// Sticky, as /tmp is: others cannot rename what is in it.
	if err := os.Chmod(open, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(filepath.Join(open, "state"), 0o700); err != nil {
		t.Errorf("under a sticky directory: %v", err)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		if err := os.Mkdir(other, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ dir, want string }{
			{other, "belongs to uid 65534"},
			{filepath.Join(other, "state"), "who could rename it away"},
		} {
			if err := Ensure(c.dir, 0o700); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want %q", c.dir, err, c.want)
			}
		}
	}
}
