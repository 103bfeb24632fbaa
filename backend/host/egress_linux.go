package host

import (
	"net"
	"os"
	"path/filepath"
)

// ListenEgress listens on dir/egress.sock (replacing a stale socket there)
// for a sandbox whose agent runs as uid/gid on the host: the socket is
// theirs, mode 0600. It is the sandbox's only way out, served by the egress
// proxy.
func ListenEgress(dir string, uid, gid int) (net.Listener, error) {
	path := filepath.Join(dir, "egress.sock")
	if err := SocketPath(path); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chown(path, uid, gid); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
