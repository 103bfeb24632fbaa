package agent

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
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
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+wire.UpgradeTCP+"\r\n\r\n"); err != nil {
		return
	}
	pipeBoth(nc, br, target)
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
