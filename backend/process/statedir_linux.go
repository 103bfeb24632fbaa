package process

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cordon-sandbox/cordon/internal/privdir"
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
// sandboxes' state, if it may not (privdir.Ensure).
func checkStateDir(dir string) error {
	if err := privdir.Ensure(dir, 0o711); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}
