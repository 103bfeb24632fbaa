package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the proxy's writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestAuditBound: a sandbox that asks for connections as fast as it can
// writes at most its burst and rate of audit lines; the lines written say
// how many were left out, and together with those account for every
// decision.
func TestAuditBound(t *testing.T) {
	var audit syncBuffer
	p := New(Config{Audit: &audit, AuditRate: 10, AuditBurst: 5})
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "egress.sock"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Attach(context.Background(), "sbx", ln, Policy{Mode: DenyAll})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	start := time.Now()
	for i := range n {
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT host%d.invalid:443 HTTP/1.1\r\nHost: host%d.invalid:443\r\n\r\n", i, i)
		resp, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if want := "HTTP/1.1 403 Forbidden\r\n"; resp != want {
			t.Fatalf("answer %q, want %q", resp, want)
		}
	}
	elapsed := time.Since(start)
	b.Close()
	var lines, refused, accounted int64
	var last Record
	for _, line := range bytes.Split(bytes.TrimSpace(audit.b.Bytes()), []byte("\n")) {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		lines++
		if r.Decision == "refused" {
			refused++
		}
		accounted += r.Suppressed
		last = r
	}
	if most := 5 + int64(elapsed.Seconds()*10) + 2; lines > most {
		t.Errorf("%d audit lines in %v, want at most %d", lines, elapsed, most)
	}
	if refused+accounted != n || last.Decision != "suppressed" {
		t.Errorf("%d lines of refusals and %d left out, want %d in all, the last line a summary (%+v)", refused, accounted, n, last)
	}
}

// BenchmarkRefusal: refused CONNECTs, one connection each, with the audit
// log written (and bounded) as the daemon writes it.
func BenchmarkRefusal(b *testing.B) {
	p := New(Config{Audit: io.Discard})
	ln, err := net.Listen("unix", filepath.Join(b.TempDir(), "egress.sock"))
	if err != nil {
		b.Fatal(err)
	}
	bind, err := p.Attach(context.Background(), "sbx", ln, Policy{Mode: DenyAll})
	if err != nil {
		b.Fatal(err)
	}
	defer bind.Close()
	for b.Loop() {
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprint(c, "CONNECT blocked.invalid:443 HTTP/1.1\r\nHost: blocked.invalid:443\r\n\r\n")
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
