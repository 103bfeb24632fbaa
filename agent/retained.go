package agent

import (
	"sync"
)

// retained is a program's output kept for readers who come later: an
// ordered log of its stdout and stderr chunks in one byte-offset space
// (a chunk's offset is the count of bytes, of either stream, written
// before it), bounded in bytes. When it evicts, it drops whole chunks from
// the front; a reader asking for an offset that is gone is told the first
// one still held, never given a gap.
type retained struct {
	mu     sync.Mutex
	chunks []chunk
	first  int64 // offset of chunks[0] (or next, when empty)
	next   int64 // offset the next byte gets
	held   int64 // bytes in chunks
	limit  int64
	closed bool
	// changed is closed and replaced on every write and at close.
	changed chan struct{}
}

// chunk is one write of one stream.
type chunk struct {
	stream byte // 1 stdout, 2 stderr
	off    int64
	data   []byte
}

func newRetained(limit int64) *retained {
	return &retained{limit: max(limit, 1), changed: make(chan struct{})}
}

// write appends p (a copy) as stream's, evicting the oldest chunks beyond
// the limit; a single write larger than the limit keeps its tail.
func (r *retained) write(stream byte, p []byte) {
	if len(p) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	off := r.next
	r.next += int64(len(p))
	if int64(len(p)) > r.limit {
		cut := int64(len(p)) - r.limit
		p, off = p[cut:], off+cut
		r.chunks, r.held, r.first = r.chunks[:0], 0, off
	}
	r.chunks = append(r.chunks, chunk{stream, off, append([]byte(nil), p...)})
	r.held += int64(len(p))
	for r.held > r.limit {
		r.held -= int64(len(r.chunks[0].data))
		r.chunks[0] = chunk{}
		r.chunks = r.chunks[1:]
		r.first = r.chunks[0].off
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// close marks the end of the output: readers at the end stop waiting.
func (r *retained) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// bounds are the first offset held and the next to be written.
func (r *retained) bounds() (first, next int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first, r.next
}

// read returns the chunks from offset from (the first cut to start there)
// up to about max bytes; ok is false when from is before the first offset
// held (first says where to resume) or past the end. done says the output
// has ended and from reached its end; changed is closed when more comes.
func (r *retained) read(from, maxBytes int64) (out []chunk, first int64, done, ok bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from < r.first || from > r.next {
		return nil, r.first, false, false, nil
	}
	var n int64
	for _, c := range r.chunks {
		end := c.off + int64(len(c.data))
		if end <= from {
			continue
		}
		d := c.data
		off := c.off
		if off < from {
			d, off = d[from-off:], from
		}
		if n > 0 && n+int64(len(d)) > maxBytes {
			break
		}
		out = append(out, chunk{c.stream, off, d})
		n += int64(len(d))
	}
	return out, r.first, r.closed && from == r.next, true, r.changed
}
