// Package privdir checks that a directory is private to the user who keeps
// state in it.
package privdir

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Ensure makes dir (with mode perm) if it is missing, and says why it may
// not hold this user's private state, if it may not: it must be a
// directory of this user's, writable by no one else, below directories
// that only this user or root own and no one else can write unless they
// are sticky (as /tmp is). Otherwise another user could rename it away and
// put one of theirs in its place, or replace what is in it. An empty one of
// this user's that others can write to is closed (chmod go-w) first.
func Ensure(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	me := os.Geteuid()
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (%v)", dir, st.Mode().Type())
	}
	if owner := int(st.Sys().(*syscall.Stat_t).Uid); owner != me {
		return fmt.Errorf("%s belongs to uid %d, not to this user (%d): its owner could replace what is in it; remove it, or name another directory", dir, owner, me)
	}
	if st.Mode().Perm()&0o022 != 0 {
		// An empty directory of this user's that a platform made open to
		// all (a Kubernetes emptyDir is 0777) is closed, then checked to
		// be empty still: nothing another user could have put there.
		why := ""
		if err := os.Chmod(dir, st.Mode().Perm()&^0o022); err != nil {
			why = fmt.Sprintf(" (closing it failed: %v)", err)
		} else if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
			_ = os.Chmod(dir, st.Mode().Perm()) // as it was: refused below
			why = " (it is not empty)"
			if len(ents) > 0 {
				why = fmt.Sprintf(" (it holds %s)", ents[0].Name())
			}
		} else if st, err = os.Lstat(dir); err != nil {
			return err
		}
		if st.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s can be written by other users (mode %v)%s: they could replace what is in it; chmod go-w it, or name another directory", dir, st.Mode().Perm(), why)
		}
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		owner := int(st.Sys().(*syscall.Stat_t).Uid)
		if owner != me && owner != 0 {
			return fmt.Errorf("%s, above %s, belongs to uid %d, who could rename it away and put another in its place", p, dir, owner)
		}
		if st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0 {
			return fmt.Errorf("%s, above %s, can be written by other users and is not sticky (mode %v): they could rename it away and put another in its place", p, dir, st.Mode())
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}
