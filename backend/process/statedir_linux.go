package process

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The state directory holds every sandbox's sockets, mount points and
// configuration: whoever can rename or replace what is in it can put a
// socket of their own where the host expects its agent (and receive the
// token and every command), or choose a sandbox's /etc/passwd. So it must
// belong to this user, be writable by nobody else, and sit where nobody
// else can rename it away (every directory above it belongs to this user
// or root, and is writable by no one else unless sticky, as /tmp is).

// defaultStateDir is StateDir when the configuration names none: /run/cordon
// as root; else the user's runtime directory ($XDG_RUNTIME_DIR, private
// and in memory on a systemd host), or one under the system temp dir.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/run/cordon"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "cordon")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("cordon-%d", os.Geteuid()))
}

// checkStateDir makes dir if it is missing and says why it may not hold
// sandboxes' state, if it may not.
func checkStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	me := os.Geteuid()
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("state directory %s is not a directory (%v)", dir, st.Mode().Type())
	}
	if owner := int(st.Sys().(*syscall.Stat_t).Uid); owner != me {
		return fmt.Errorf("state directory %s belongs to uid %d, not to this user (%d): its owner could replace a sandbox's sockets; remove it, or name another directory", dir, owner, me)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("state directory %s can be written by other users (mode %v): they could replace a sandbox's sockets; chmod go-w it, or name another directory", dir, st.Mode().Perm())
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		owner := int(st.Sys().(*syscall.Stat_t).Uid)
		if owner != me && owner != 0 {
			return fmt.Errorf("%s, above the state directory %s, belongs to uid %d, who could rename the state directory away and put another in its place", p, dir, owner)
		}
		if st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0 {
			return fmt.Errorf("%s, above the state directory %s, can be written by other users and is not sticky (mode %v): they could rename the state directory away and put another in its place", p, dir, st.Mode())
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}
