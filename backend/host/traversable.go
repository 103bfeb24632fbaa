package host

import (
	"fmt"
	"os"
	"path/filepath"
)

// Traversable checks that every directory from p up to / lets anyone
// pass: as root, a sandbox's processes are unprivileged mapped users, who
// must reach their state directory (its sockets, a bundle's root, the
// agent's copy) through it.
func Traversable(p string) error {
	for dir := p; ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err == nil && st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v); sandboxes run as unprivileged mapped users and must pass through it", dir, st.Mode().Perm())
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}
