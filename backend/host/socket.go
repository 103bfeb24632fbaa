package host

import (
	"fmt"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// MaxSocketPath is the longest path a unix socket can be bound at: the
// address holds 108 bytes, the last of them a NUL.
const MaxSocketPath = 107

// SocketPath refuses a socket path longer than a unix socket takes, which
// the kernel refuses only as an "invalid argument", saying nothing of the
// state directory that is too deep.
func SocketPath(path string) error {
	if len(path) > MaxSocketPath {
		return fmt.Errorf("%w: the socket %s is %d bytes long, more than a unix socket's %d: give the tiers a shorter state directory (CORDON_STATE_DIR; for cordon mcp's own daemon, TMPDIR)", sandbox.ErrUnavailable, path, len(path), MaxSocketPath)
	}
	return nil
}
