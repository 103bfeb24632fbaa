//go:build !linux

package egress

import (
	"context"
	"errors"
	"net"
)

func dialInNetNS(ctx context.Context, nsPath string, d *net.Dialer, target string) (net.Conn, error) {
	return nil, errors.New("network namespaces are Linux-only")
}
