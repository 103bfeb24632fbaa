package vminit

import (
	"os"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/connq"
	"github.com/hashicorp/yamux"
)

// sessionPort is the agent's port as each session's multiplexer holds
// it: a session's end does not close it, for the next host's session.
type sessionPort struct{ *os.File }

func (sessionPort) Close() error { return nil }

// sessions serves the agent on the port, one multiplexed session per
// host: when a host goes (its daemon stopped or was killed), the agent
// and its commands run on, and the next host that rejoins (Rejoin) gets
// a new session on the same agent.
type sessions struct {
	port    *sessionPort
	streams *connq.Listener // every session's streams, the agent's listener
	mu      sync.Mutex
	cur     *yamux.Session
}

func newSessions(port *sessionPort) *sessions {
	s := &sessions{port: port, streams: connq.New(portAddr{})}
	s.cur = s.start()
	return s
}

// start begins a session on the port (nil if the multiplexer fails).
func (s *sessions) start() *yamux.Session {
	session, err := yamux.Server(s.port, muxConfig())
	if err != nil {
		return nil
	}
	go func() {
		for {
			c, err := session.Accept()
			if err != nil {
				return
			}
			if !s.streams.Push(c) {
				return
			}
		}
	}()
	return session
}

func (s *sessions) current() *yamux.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// serve starts a new session each time a host rejoins after the last one
// ended.
func (s *sessions) serve() {
	for {
		if cur := s.current(); cur != nil {
			<-cur.CloseChan()
		}
		if err := awaitRejoin(s.port.File); err != nil {
			return
		}
		next := s.start()
		s.mu.Lock()
		s.cur = next
		s.mu.Unlock()
	}
}

// awaitRejoin reads the port until a host writes Rejoin.
func awaitRejoin(port *os.File) error {
	for {
		b, err := hostByte(port)
		if err != nil || b == Rejoin {
			return err
		}
	}
}

// portAddr names the agent's listener.
type portAddr struct{}

func (portAddr) Network() string { return "yamux" }
func (portAddr) String() string  { return "local" }
