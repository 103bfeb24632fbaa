//go:build linux

package host

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// TestUsernsCache: a mapping's id-mapping namespace is made once and then
// shared (the caller's copy may be closed), a different mapping gets its
// own, and each maps what it was asked to.
func TestUsernsCache(t *testing.T) {
	testutil.RequiresRoot(t)
	agent := testutil.BuildAgent(t)
	ino := func(f *os.File) uint64 {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	a, err := holdUserns(agent, idmap{0, 0, 301000, 301000, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	first := ino(a)
	a.Close()
	b, err := holdUserns(agent, idmap{0, 0, 301000, 301000, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ino(b) != first {
		t.Error("the same mapping made a second namespace")
	}
	c, err := holdUserns(agent, idmap{1000, 1000, 301000, 301000, 1000, 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ino(c) == first {
		t.Error("a different mapping shares a namespace")
	}
	// What a mapping does: a directory owned by 1000 on the host shows,
	// through a tree id-mapped with it, as owned by 301000 (the sandbox
	// user's host id), twice in a row from the cache.
	dir := t.TempDir()
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		trees, err := IdmappedTrees(agent, []LayoutMount{{Host: dir, Target: "/x", UID: 1000, GID: 1000}}, 301000, 301000)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		err = unix.Fstatat(int(trees[0].Fd()), "", &st, unix.AT_EMPTY_PATH)
		trees[0].Close()
		if err != nil || st.Uid != 301000 || st.Gid != 301000 {
			t.Errorf("through the mapping: uid %d gid %d (%v), want 301000", st.Uid, st.Gid, err)
		}
	}
}

// TestLayoutMountsRootOwned: a read-write layout directory that the
// sandbox would write as root (its owner, or a named owner of root's) is
// refused; read-only, or with an unprivileged owner named, it is not.
func TestLayoutMountsRootOwned(t *testing.T) {
	testutil.RequiresRoot(t) // only root has root-owned directories to offer (and chown)
	root := t.TempDir()
	group := t.TempDir()
	if err := os.Chown(group, 1000, 0); err != nil {
		t.Fatal(err)
	}
	owner := &sandbox.HostOwner{UID: 4321, GID: 4321}
	for _, c := range []struct {
		name   string
		layout sandbox.Layout
		ok     bool
	}{
		{"outputs", sandbox.Layout{Outputs: root}, false},
		{"scratch", sandbox.Layout{Scratch: root}, false},
		{"root's group", sandbox.Layout{Outputs: group}, false},
		{"read-only", sandbox.Layout{Uploads: root, Skills: root}, true},
		{"named owner", sandbox.Layout{Outputs: root, Scratch: group, Owner: owner}, true},
	} {
		ms, err := LayoutMounts(c.layout)
		if c.ok != (err == nil) || err != nil && (!errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "--mount-owner")) {
			t.Errorf("%s: %v", c.name, err)
		}
		for _, m := range ms {
			if !m.ReadOnly && (m.UID != 4321 || m.GID != 4321) {
				t.Errorf("%s: %s is written as %d:%d", c.name, m.Target, m.UID, m.GID)
			}
		}
	}
	bad := sandbox.Spec{Layout: sandbox.Layout{Outputs: root, Owner: &sandbox.HostOwner{UID: 0, GID: 5}}}
	if err := bad.Validate(); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a root owner named: %v", err)
	}
}

// TestExactDir: a directory is opened only by a path with no symbolic
// link on its way, its last component included; what is refused says why,
// as the caller's mistake.
func TestExactDir(t *testing.T) {
	dir := t.TempDir()
	real := dir + "/real"
	os.MkdirAll(real+"/sub", 0o755)
	os.Symlink(real, dir+"/link")
	os.WriteFile(dir+"/file", nil, 0o644)
	if f, err := ExactDir("test", real+"/sub"); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	for path, want := range map[string]string{dir + "/link": "symbolic link", dir + "/link/sub": "symbolic link", dir + "/file": "not a directory", dir + "/none": "no such"} {
		_, err := ExactDir("test", path)
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an invalid spec saying %q", path, err, want)
		}
	}
}
