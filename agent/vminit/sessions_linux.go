package vminit

import (
	"io"
	"os"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/connq"
	"github.com/hashicorp/yamux"
)

// sessionPort is the agent's port as each session's multiplexer holds
// it: a session's end does not close it, for the next host's session.
type sessionPort struct {
	*os.File
	// rejoined: a host has just rejoined, and may have asked more than
	// once (it asks again when its first ask went to the old session, or
	// was slow to be answered): the asks before its first frame are
	// passed over. Only the session's one reader touches it.
	rejoined bool
}

func (*sessionPort) Close() error { return nil }

func (p *sessionPort) Read(b []byte) (int, error) {
	for p.rejoined && len(b) > 0 {
		// (End of file, the host gone again, ends the session.)
		c, err := p.byte()
		if err != nil {
			return 0, err
		}
		if c != Rejoin {
			// A frame's first byte (never Rejoin).
			p.rejoined = false
			b[0] = c
			return 1, nil
		}
		for n := 0; c != '\n' && n <= 64; n++ {
			if c, err = p.byte(); err != nil {
				return 0, err
			}
		}
	}
	return p.File.Read(b)
}

func (p *sessionPort) byte() (byte, error) {
	var b [1]byte
	if _, err := io.ReadFull(p.File, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

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
		s.port.rejoined = true
		next := s.start()
		s.mu.Lock()
		s.cur = next
		s.mu.Unlock()
	}
}

// awaitRejoin reads the port until a host asks to rejoin, and answers it
// (Rejoin).
func awaitRejoin(port *os.File) error {
	for {
		b, err := hostByte(port)
		if err != nil {
			return err
		}
		if b != Rejoin {
			continue
		}
		var nonce []byte
		for b != '\n' && len(nonce) <= 64 {
			if b, err = hostByte(port); err != nil {
				return err
			}
			nonce = append(nonce, b)
		}
		if b != '\n' {
			continue
		}
		if _, err := port.Write(append([]byte(RejoinAck), nonce...)); err != nil {
			return err
		}
		return nil
	}
}

// portAddr names the agent's listener.
type portAddr struct{}

func (portAddr) Network() string { return "yamux" }
func (portAddr) String() string  { return "local" }
