package egress

import (
	"net"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// receivePass reads the first byte of a connection from a sandbox. A
// wire.EgressPass byte with one TCP connection attached hands that
// connection over: it takes c's place, and c is closed. Any other byte
// begins the request and is given back in first. Descriptors that came with
// anything else are closed unused.
func receivePass(c net.Conn, deadline time.Time) (conn net.Conn, first []byte, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c, nil, nil
	}
	_ = uc.SetReadDeadline(deadline)
	var one [1]byte
	// Room for a few descriptors: a sender that attaches more has the
	// rest closed by the kernel (MSG_CTRUNC), and is refused below.
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(one[:], oob)
	n, oobn = max(n, 0), max(oobn, 0) // (negative with some errors)
	fds := rights(oob[:oobn])
	if err != nil || n == 0 || one[0] != wire.EgressPass {
		closeAll(fds)
		return c, one[:n], err
	}
	if len(fds) != 1 {
		closeAll(fds)
		return c, nil, &refusal{reason: "a handed-over connection must come alone"}
	}
	passed, err := passedConn(fds[0])
	if err != nil {
		return c, nil, &refusal{reason: err.Error()}
	}
	c.Close()
	return passed, nil, nil
}

// rights returns the descriptors in a control message buffer.
func rights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}
