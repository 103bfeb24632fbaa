package agent

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// handleTCP connects to a port on the sandbox's loopback and hands the
// caller's connection over to it (wire.RouteTCP).
func (s *Server) handleTCP(w httpd.ResponseWriter, r *httpd.Request) {
	q := r.URL.Query()
	port, err := strconv.Atoi(q.Get("port"))
	if err != nil || port < 1 || port > 65535 {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidPort, Message: "port must be from 1 to 65535"})
		return
	}
	host := q.Get("host")
	switch host {
	case "", "127.0.0.1":
		host = "127.0.0.1"
	case "::1":
	default:
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidPort, Message: "host must be 127.0.0.1 or ::1: the sandbox's own loopback"})
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), wire.UpgradeTCP) {
		writeJSON(w, httpd.StatusBadRequest, wire.ErrorBody{Error: wire.CodeInvalidBody, Message: "want Connection: Upgrade, Upgrade: " + wire.UpgradeTCP})
		return
	}
	hj, ok := w.(interface {
		Hijack() (net.Conn, *bufio.Reader, error)
	})
	if !ok {
		writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: "this connection cannot be taken over"})
		return
	}
	target, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 10*time.Second)
	if err != nil {
		writeJSON(w, httpd.StatusBadGateway, wire.ErrorBody{Error: wire.CodeConnectFailed, Message: "connect to " + net.JoinHostPort(host, strconv.Itoa(port)) + ": " + err.Error()})
		return
	}
	defer target.Close()
	nc, br, err := hj.Hijack()
	if err != nil {
		writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: err.Error()})
		return
	}
	defer nc.Close()
	head := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + wire.UpgradeTCP + "\r\n"
	if q.Get("pass") == "1" && s.cfg.EgressPass && br.Buffered() == 0 {
		if uc, ok := passable(nc); ok {
			// The host shares this kernel: the socket goes to it, and the
			// bytes never pass through the agent.
			if err := sendSocket(uc, head+wire.PassHeader+": 1\r\n\r\n", target); err == nil {
				return
			}
			return // the answer may be half sent: nothing more is certain
		}
	}
	if _, err := io.WriteString(nc, head+"\r\n"); err != nil {
		return
	}
	pipeBoth(nc, br, target)
}

// passable is the host's unix connection under nc, when a descriptor can
// go to it: the agent's own listener, a peer outside the sandbox.
func passable(nc net.Conn) (*net.UnixConn, bool) {
	if w, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = w.NetConn()
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok || fromInside(uc, false) {
		return nil, false
	}
	return uc, true
}

// sendSocket writes head with target's descriptor attached to its first
// byte.
func sendSocket(uc *net.UnixConn, head string, target net.Conn) error {
	sc, ok := target.(syscall.Conn)
	if !ok {
		return errors.New("the connection has no descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix([]byte(head), syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}

// pipeBoth copies between the caller (nc, read through br) and target
// until both directions end, passing each end on as a half-close.
func pipeBoth(nc net.Conn, br *bufio.Reader, target net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	closeWrite := func(c net.Conn) {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = c.Close()
		}
	}
	go func() {
		defer wg.Done()
		_, _ = io.Copy(target, br)
		closeWrite(target)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(nc, target)
		closeWrite(nc)
	}()
	wg.Wait()
}
