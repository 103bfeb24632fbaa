package agent

import (
	"bytes"
	"strings"
	"testing"
)

// TestRetained: one offset space for both streams in the order written;
// a reader resumes anywhere held; eviction drops the oldest whole chunks
// and a read before what is held is refused with where to resume.
func TestRetained(t *testing.T) {
	r := newRetained(10)
	r.write(1, []byte("abc"))
	r.write(2, []byte("DE"))
	r.write(1, []byte("fgh"))
	out, first, done, ok, _ := r.read(0, 100)
	if !ok || first != 0 || done || len(out) != 3 || string(out[1].data) != "DE" || out[1].stream != 2 || out[2].off != 5 {
		t.Fatalf("read from 0: %+v first %d done %v ok %v", out, first, done, ok)
	}
	// From the middle of a chunk.
	if out, _, _, ok, _ := r.read(4, 100); !ok || string(out[0].data) != "E" || out[0].off != 4 {
		t.Fatalf("read from 4: %+v", out)
	}
	// Past the bound: the oldest chunks go, whole.
	r.write(1, []byte("ijklm"))
	first, next := r.bounds()
	if first != 3 || next != 13 {
		t.Fatalf("bounds %d %d, want 3 13", first, next)
	}
	if _, first, _, ok, _ := r.read(2, 100); ok || first != 3 {
		t.Fatalf("a read of evicted output: ok %v first %d", ok, first)
	}
	// A write larger than the bound keeps its tail.
	r.write(2, []byte(strings.Repeat("x", 12)+"END"))
	first, next = r.bounds()
	out, _, _, ok, _ = r.read(first, 100)
	var all bytes.Buffer
	for _, c := range out {
		all.Write(c.data)
	}
	if !ok || next != 28 || first != 18 || all.String() != "xxxxxxxEND" {
		t.Fatalf("after a large write: first %d next %d %q", first, next, all.String())
	}
	// The end: a reader at it is done once closed, and woken.
	_, _, done, _, changed := r.read(next, 100)
	if done {
		t.Fatal("done before close")
	}
	r.close()
	<-changed
	if _, _, done, _, _ := r.read(next, 100); !done {
		t.Fatal("not done after close")
	}
	// A read past the end is refused.
	if _, _, _, ok, _ := r.read(next+1, 100); ok {
		t.Fatal("a read past the end was accepted")
	}
}
