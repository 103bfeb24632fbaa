// Package connq is a net.Listener whose connections are handed to it
// (Push) rather than accepted from a socket: connections that arrive
// some other way (streams of a multiplexed port, the listeners of
// instances that come and go) served as one listener.
package connq

import (
	"net"
	"sync"
)

// Listener hands out the connections pushed to it, until it is closed.
type Listener struct {
	once  sync.Once
	conns chan net.Conn
	done  chan struct{}
	addr  net.Addr
}

// New is a listener whose Addr is addr.
func New(addr net.Addr) *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// Push hands c to the next Accept; it reports false, with c closed, once
// the listener is closed.
func (l *Listener) Push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		c.Close()
		return false
	}
}

func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Done is closed when the listener is.
func (l *Listener) Done() <-chan struct{} { return l.done }

func (l *Listener) Addr() net.Addr { return l.addr }
