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
	// An open directory that holds something is refused (and left as it
	// was); an empty one is closed and taken.
	if err := os.WriteFile(filepath.Join(open, "planted"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(empty, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(empty, 0o700); err != nil {
		t.Fatalf("an empty open directory of this user's: %v", err)
	}
	if st, _ := os.Stat(empty); st.Mode().Perm() != 0o755 {
		t.Fatalf("the empty directory is %v after, want it closed to 0755", st.Mode().Perm())
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
	if st, _ := os.Stat(open); st.Mode().Perm() != 0o777 {
		t.Fatalf("a refused directory was changed to %v", st.Mode().Perm())
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
