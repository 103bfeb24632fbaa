package egress

import (
	"context"
	"net"

	"github.com/cordon-sandbox/cordon/internal/netns"
)

// dialInNetNS connects from another network namespace.
func dialInNetNS(ctx context.Context, nsPath string, d *net.Dialer, target string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(nsPath, func() (err error) {
		c, err = d.DialContext(ctx, "tcp", target)
		return err
	})
	return c, err
}
