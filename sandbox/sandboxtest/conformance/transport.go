package conformance

import (
	"context"
	"net"
	"net/http"

	"github.com/cordon-sandbox/cordon/agent/client"
)

func transport(ep client.Endpoint) *http.Transport {
	d := &net.Dialer{}
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, ep.Network, ep.Address)
		},
		MaxIdleConnsPerHost: 32,
		DisableCompression:  true,
	}
}
