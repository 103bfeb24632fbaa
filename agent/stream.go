//go:build linux

package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// eventStream writes NDJSON events to one /execute response. Writes block
// when the caller stops reading, which is the backpressure that stops the
// command's pipes; a broken caller turns every later write into a no-op so
// output is still drained.
type eventStream struct {
	mu     sync.Mutex
	w      httpd.ResponseWriter
	broken bool
}

func newEventStream(w httpd.ResponseWriter) *eventStream {
	return &eventStream{w: w}
}

func (s *eventStream) send(ev any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Output is text for a program, not a page: '<', '>' and '&' go as
	// they are (as the reference worker sends them), not as six-byte
	// escapes. The encoder ends the line.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		return
	}
	s.sendLine(b.Bytes())
}

// sendLine sends an event line already encoded (ending in a newline).
func (s *eventStream) sendLine(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(b)
}

// sendBase64 sends an event of type typ whose data is base64 of chunk
// (with stream, when not empty), the line exactly as send would write it.
// It is written directly: base64 needs no escaping in a JSON string, which
// encoding/json would check byte by byte.
func (s *eventStream) sendBase64(typ, stream string, chunk []byte) {
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(chunk))+64)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","data":"`...)
	b = base64.StdEncoding.AppendEncode(b, chunk)
	if stream != "" {
		b = append(b, `","stream":"`...)
		b = append(b, stream...)
	}
	b = append(b, "\"}\n"...)
	s.sendLine(b)
}

func (s *eventStream) writeLocked(b []byte) {
	if s.broken {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.broken = true
		return
	}
	if err := s.w.Flush(); err != nil {
		s.broken = true
	}
}

// isBroken says a write has failed: the reader is gone.
func (s *eventStream) isBroken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

// flush sends what is buffered (the response head, before any event).
func (s *eventStream) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.broken && s.w.Flush() != nil {
		s.broken = true
	}
}

// heartbeat sends b unless a write is already in progress (a blocked write
// means the caller is not reading; piling frames on it helps nobody).
func (s *eventStream) heartbeat(b []byte) {
	if !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	s.writeLocked(b)
}

// abandonAfter bounds how long a blocked write may still take, so that a
// caller who stopped reading cannot hold a finished command open.
func (s *eventStream) abandonAfter(d time.Duration) {
	_ = s.w.SetWriteDeadline(time.Now().Add(d))
}

// outputClip applies maxOutputBytes to one stream and, for text, keeps a
// multi-byte UTF-8 character whole across chunk boundaries. With base64
// the stream's events carry its exact bytes (clip, not take).
type outputClip struct {
	max       int64
	base64    bool
	bytes     int64
	truncated bool
	carry     []byte
}

// clip returns what of chunk is within the limit.
func (c *outputClip) clip(chunk []byte) []byte {
	if c.truncated {
		return nil
	}
	remaining := c.max - c.bytes
	if remaining <= 0 {
		c.truncated = true
		return nil
	}
	if int64(len(chunk)) > remaining {
		chunk = chunk[:remaining]
		c.truncated = true
	}
	c.bytes += int64(len(chunk))
	return chunk
}

// take returns the text to emit for chunk, or "" when there is none yet.
func (c *outputClip) take(chunk []byte) string {
	chunk = c.clip(chunk)
	if len(chunk) == 0 {
		return ""
	}
	buf := append(c.carry, chunk...)
	cut := wire.CompleteUTF8(buf)
	c.carry = append([]byte(nil), buf[cut:]...)
	return string(buf[:cut])
}

// flush returns what is still carried; at the end of a stream an incomplete
// character is emitted as is and shows as U+FFFD.
func (c *outputClip) flush() string {
	s := string(c.carry)
	c.carry = nil
	return s
}
