package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// maxHello bounds how much of a ClientHello is read to find its SNI.
const maxHello = 64 << 10

// readSNI peeks (without consuming) the TLS ClientHello at the head of br
// and returns its server name, "" when it sends none. The records are
// gathered here, bounded by maxHello; crypto/tls reads the message, as a
// server would (GetConfigForClient sees it, then the handshake stops).
func readSNI(br *bufio.Reader) (string, error) {
	var hs []byte // the handshake message so far, to know when it is whole
	off := 0
	for len(hs) < 4 || len(hs) < 4+int(hs[1])<<16|int(hs[2])<<8|int(hs[3]) {
		hdr, err := br.Peek(off + 5)
		if err != nil {
			return "", err
		}
		h := hdr[off:]
		if h[0] != 0x16 {
			return "", errors.New("not a handshake record")
		}
		n := int(binary.BigEndian.Uint16(h[3:5]))
		if off+5+n > maxHello || n == 0 {
			return "", errors.New("ClientHello too large")
		}
		rec, err := br.Peek(off + 5 + n)
		if err != nil {
			return "", err
		}
		hs = append(hs, rec[off+5:]...)
		off += 5 + n
	}
	hello, err := br.Peek(off)
	if err != nil {
		return "", err
	}
	return helloServerName(hello)
}

// errHelloRead stops a handshake once its ClientHello has been read.
var errHelloRead = errors.New("hello read")

// helloServerName is the server name of the ClientHello in records.
func helloServerName(records []byte) (string, error) {
	var name string
	read := false
	conn := tls.Server(&helloConn{r: bytes.NewReader(records)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, read = h.ServerName, true
			return nil, errHelloRead
		},
	})
	if err := conn.Handshake(); !read {
		return "", fmt.Errorf("not a ClientHello: %w", err)
	}
	return name, nil
}

// helloConn is a net.Conn that reads the records and discards what the
// server would answer (its alert).
type helloConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *helloConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return helloAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return helloAddr{} }

type helloAddr struct{}

func (helloAddr) Network() string { return "tls-hello" }
func (helloAddr) String() string  { return "tls-hello" }
