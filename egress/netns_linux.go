package egress

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// dialInNetNS connects from another network namespace, on a locked thread
// that enters it and comes back; the socket keeps the namespace it was
// made in. A thread that cannot come back is never unlocked, so the runtime
// discards it rather than reuse it in the wrong namespace.
func dialInNetNS(ctx context.Context, nsPath string, d *net.Dialer, target string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer home.Close()
		f, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		c, err := d.DialContext(ctx, "tcp", target)
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
