// Package logbuf is a bounded, concurrency-safe buffer for what a sandbox's
// agent prints: kept for error messages, never allowed to grow without end.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer keeps the first Max bytes written to it and drops the rest.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	Max int
}

// New returns a buffer that keeps at most max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.Max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
