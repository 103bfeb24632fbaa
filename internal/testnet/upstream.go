package testnet

import (
	"fmt"
	"net"
	"testing"
)

// SourceBytes is what an upstream sends for 'g'.
const SourceBytes = 1 << 30

// Upstream serves each connection on ln, until ln closes (at the end of
// tb), by its first byte, for tests and benchmarks of egress: 'p' answers
// '!' and then echoes until EOF; 's' reads until EOF and answers the count
// in decimal; 'g' sends SourceBytes and closes.
func Upstream(tb testing.TB, ln net.Listener) {
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveUpstream(c)
		}
	}()
}

func serveUpstream(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 1<<20)
	if _, err := c.Read(buf[:1]); err != nil {
		return
	}
	switch buf[0] {
	case 'p':
		c.Write([]byte{'!'})
		for {
			n, err := c.Read(buf)
			if _, werr := c.Write(buf[:n]); err != nil || werr != nil {
				return
			}
		}
	case 's':
		got := 0
		for {
			n, err := c.Read(buf)
			got += n
			if err != nil {
				break
			}
		}
		fmt.Fprintf(c, "%d", got)
	case 'g':
		clear(buf)
		for sent := 0; sent < SourceBytes; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
}
