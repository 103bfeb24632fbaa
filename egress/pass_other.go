//go:build !linux

package egress

import (
	"errors"
	"net"
	"syscall"
)

// passedConn refuses a handed-over connection: only Linux tiers hand
// connections over.
func passedConn(fd int) (net.Conn, error) {
	syscall.Close(fd)
	return nil, errors.New("connections are handed over only on Linux")
}

// tcpProgress: no kernel counters here; pipe notes each read instead.
func tcpProgress(net.Conn) func() uint64 { return nil }
