package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func exposeCmd(args []string) int {
	fs := newFlagSet("expose", "usage: cordon expose [flags] ID PORT\n\nExposes a port of a sandbox's own loopback at a URL of the daemon, over\nHTTP and WebSocket, and prints the URL: its token is its only credential\n(share it as a link to that one port). A browser is sent on from it to\nthe port's own origin where the daemon gives ports one (cordon serve\n--ports-url; on a loopback listener, http://pt-….localhost:PORT/).\n--revoke ends it; --list shows the sandbox's exposed ports: each one's\nport, URL and origin URL.")
	revoke := fs.Bool("revoke", false, "end the port's URL")
	list := fs.Bool("list", false, "list the sandbox's exposed ports (ID only)")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	ctx := context.Background()
	if *list {
		if len(rest) != 1 {
			fs.Usage()
			return 2
		}
		ports, err := c.Ports(ctx, rest[0])
		if err != nil {
			return apiFail(err)
		}
		for _, p := range ports {
			fmt.Printf("%d\t%s\t%s\n", p.Port, exposedURL(c.Base(), p.URL), cmp.Or(p.OriginURL, "-"))
		}
		return 0
	}
	if len(rest) != 2 {
		fs.Usage()
		return 2
	}
	port, err := strconv.Atoi(rest[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: port %q: want 1 to 65535\n", rest[1])
		return 2
	}
	if *revoke {
		if err := c.RevokePort(ctx, rest[0], port); err != nil {
			return apiFail(err)
		}
		return 0
	}
	p, err := c.ExposePort(ctx, rest[0], port)
	if err != nil {
		return apiFail(err)
	}
	fmt.Println(exposedURL(c.Base(), p.URL))
	return 0
}

// exposedURL is a port's URL in full where the daemon has an address to
// give (on its unix socket, the path).
func exposedURL(base, path string) string {
	if strings.HasPrefix(base, "http://cordon") {
		return path
	}
	return base + path
}

func urlCmd(args []string) int {
	fs := newFlagSet("url", "usage: cordon url [flags] ID PATH\n\nPrints a URL of the daemon that reads one file of a sandbox (GET, HEAD,\nRange), or with --put writes it (PUT its bytes, or POST a form holding\nthe file, as a browser does: curl -F file=@F URL), without an API key, until\nit expires: a link for a browser or another program (E2B's download_url\nand upload_url). It is signed with the daemon's own key and cannot be\nrevoked before it expires.")
	put := fs.Bool("put", false, "a URL that writes the file, rather than reads it")
	expires := duration(fs, "expires", time.Hour, "how long the URL works (1s to 24h)")
	c, rest, code := daemonClientArgs(fs, args, 2)
	if c == nil {
		return code
	}
	if *expires < time.Second || *expires > 24*time.Hour {
		fmt.Fprintln(os.Stderr, "cordon: --expires must be between 1s and 24h")
		return 2
	}
	method := http.MethodGet
	if *put {
		method = http.MethodPut
	}
	u, err := c.FileURL(context.Background(), rest[0], rest[1], method, *expires)
	if err != nil {
		return apiFail(err)
	}
	fmt.Println(exposedURL(c.Base(), u.URL))
	return 0
}
