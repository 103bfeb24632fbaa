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
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestAuditBound: a sandbox that asks for connections as fast as it can
// writes at most its burst and rate of audit lines; the lines written say
// how many were left out, and together with those account for every
// decision.
func TestAuditBound(t *testing.T) {
	var audit testutil.SyncBuffer
	b, addr := denyAll(t, Config{Audit: &audit, AuditRate: 10, AuditBurst: 5})
	const n = 200
	start := time.Now()
	for i := range n {
		if resp, want := connect(t, addr, fmt.Sprintf("host%d.invalid", i)), "HTTP/1.1 403 Forbidden\r\n"; resp != want {
			t.Fatalf("answer %q, want %q", resp, want)
		}
	}
	elapsed := time.Since(start)
	b.Close()
	var lines, refused, accounted int64
	var last Record
	for _, line := range bytes.Split(bytes.TrimSpace(audit.Bytes()), []byte("\n")) {
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
	bind, addr := denyAll(b, Config{Audit: io.Discard})
	defer bind.Close()
	for b.Loop() {
		if resp := connect(b, addr, "blocked.invalid"); resp == "" {
			b.Fatal("no answer")
		}
	}
}

// denyAll attaches a deny-all binding, of a proxy made from cfg, on a unix
// socket of its own, and returns it and the socket's address.
func denyAll(tb testing.TB, cfg Config) (*Binding, string) {
	ln, err := net.Listen("unix", filepath.Join(tb.TempDir(), "egress.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	b, err := New(cfg).Attach(context.Background(), "sbx", ln, Policy{Mode: DenyAll})
	if err != nil {
		tb.Fatal(err)
	}
	return b, ln.Addr().String()
}

// connect asks the binding at addr for a tunnel to host:443 and returns
// the answer's status line.
func connect(tb testing.TB, addr, host string) string {
	c, err := net.Dial("unix", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", host, host)
	resp, _ := bufio.NewReader(c).ReadString('\n')
	return resp
}
