package egress

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// passedConn makes a connection of a descriptor handed over by a sandbox,
// which must be a connected TCP socket (whatever else a workload might
// send is refused), and closes the descriptor.
func passedConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "egress-passed")
	defer f.Close()
	get := func(opt int) int {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
		if err != nil {
			return -1
		}
		return v
	}
	domain := get(unix.SO_DOMAIN)
	if (domain != unix.AF_INET && domain != unix.AF_INET6) || get(unix.SO_TYPE) != unix.SOCK_STREAM ||
		get(unix.SO_PROTOCOL) != unix.IPPROTO_TCP || get(unix.SO_ACCEPTCONN) != 0 {
		return nil, fmt.Errorf("a handed-over connection must be a connected TCP socket")
	}
	return net.FileConn(f)
}

// tcpProgress returns a count that grows whenever bytes arrive from up or
// up acknowledges bytes sent to it, as the kernel keeps it (TCP_INFO).
func tcpProgress(up net.Conn) func() uint64 {
	tc, ok := up.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	read := func() (n uint64, ok bool) {
		_ = raw.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				n, ok = info.Bytes_acked+info.Bytes_received, true
			}
		})
		return n, ok
	}
	if _, ok := read(); !ok {
		return nil
	}
	return func() uint64 { n, _ := read(); return n }
}
