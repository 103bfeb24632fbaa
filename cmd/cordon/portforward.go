package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/agent/client"
)

func portForwardCmd(args []string) int {
	fs := newFlagSet("port-forward", "usage: cordon port-forward [flags] ID [LOCAL:]REMOTE...\n\nForwards local TCP ports to ports on a sandbox's own loopback, through the\ndaemon (the sandbox has no network interface): each connection to\n127.0.0.1:LOCAL becomes one to 127.0.0.1:REMOTE inside. LOCAL defaults to\nREMOTE; 0 picks a free port. Runs until interrupted.")
	address := fs.String("address", "127.0.0.1", "the local `ADDRESS` to listen on")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) < 2 {
		fs.Usage()
		return 2
	}
	ac := c.Agent(rest[0])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, spec := range rest[1:] {
		local, remote, ok := strings.Cut(spec, ":")
		if !ok {
			local, remote = spec, spec
		}
		rport, err := strconv.Atoi(remote)
		lport, err2 := strconv.Atoi(local)
		if err != nil || err2 != nil || rport < 1 || rport > 65535 || lport < 0 || lport > 65535 {
			fmt.Fprintf(os.Stderr, "cordon: %q: want [LOCAL:]REMOTE, ports from 1 to 65535 (LOCAL 0: any free one)\n", spec)
			return 2
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(*address, strconv.Itoa(lport)))
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return exitCordon
		}
		lns = append(lns, ln)
		fmt.Printf("Forwarding from %s -> %d\n", ln.Addr(), rport)
		go acceptForward(ctx, ln, ac, rport)
	}
	<-ctx.Done()
	return 0
}

// acceptForward serves one local listener until it closes.
func acceptForward(ctx context.Context, ln net.Listener, ac *client.Client, port int) {
	for {
		local, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer local.Close()
			remote, err := ac.DialTCP(ctx, port)
			if err != nil {
				fmt.Fprintf(os.Stderr, "cordon: port %d: %v\n", port, err)
				return
			}
			defer remote.Close()
			client.Splice(local, remote)
		}()
	}
}
