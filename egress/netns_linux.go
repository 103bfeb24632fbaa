package egress

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// dialInNetNS connects from another network namespace: on a thread of its
// own that enters the namespace and is then thrown away (it is never
// unlocked, so the runtime ends it). The socket keeps its namespace.
func dialInNetNS(ctx context.Context, nsPath string, d *net.Dialer, target string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(nsPath)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		c, err := d.DialContext(ctx, "tcp", target)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
