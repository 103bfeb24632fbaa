//go:build linux

package process

import (
	"os"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
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
	a, err := holdUserns(agent, 0, 0, 301000, 301000)
	if err != nil {
		t.Fatal(err)
	}
	first := ino(a)
	a.Close()
	b, err := holdUserns(agent, 0, 0, 301000, 301000)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ino(b) != first {
		t.Error("the same mapping made a second namespace")
	}
	c, err := holdUserns(agent, 1000, 1000, 301000, 301000)
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
		trees, err := IdmappedTrees(agent, []LayoutMount{{Host: dir, Target: "/x"}}, 301000, 301000)
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
