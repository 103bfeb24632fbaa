package vminit

import (
	"io"
	"net"

	"github.com/hashicorp/yamux"
)

// ServeStreams relays each connection ln accepts to a new stream of
// session, both ways, until ln closes: on the host, its connections to
// the agent; in the guest, the agent's to the egress proxy.
func ServeStreams(ln net.Listener, session *yamux.Session) {
	ServeStreamsTo(ln, func() *yamux.Session { return session })
}

// ServeStreamsTo is ServeStreams to whichever session current returns as
// each connection comes (none: the connection is closed).
func ServeStreamsTo(ln net.Listener, current func() *yamux.Session) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			session := current()
			if session == nil {
				return
			}
			s, err := session.Open()
			if err != nil {
				return
			}
			defer s.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(s, c); s.Close(); done <- struct{}{} }()
			go func() {
				io.Copy(c, s)
				if hc, ok := c.(interface{ CloseWrite() error }); ok {
					hc.CloseWrite()
				}
				done <- struct{}{}
			}()
			<-done
			<-done
		}()
	}
}
