package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testnet"
)

// upstream is a loopback server (testnet.Upstream).
func upstream(b *testing.B) (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	testnet.Upstream(b, ln)
	return ln.Addr().String(), func() { ln.Close() }
}

// viaProxy attaches a binding on a unix socket, as a sandbox has, allowing
// the loopback upstream by address.
func viaProxy(b *testing.B, up string) (dial func() (net.Conn, error), stop func()) {
	dir, _ := os.MkdirTemp("", "egress-bench")
	sock := filepath.Join(dir, "e.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(up)
	var p int
	fmt.Sscan(port, &p)
	bind, err := New(Config{MaxConns: 1024}).Attach(context.Background(), "bench", ln, Policy{Mode: Static, Rules: []Rule{{Host: host, Ports: []int{p}}}})
	if err != nil {
		b.Fatal(err)
	}
	return func() (net.Conn, error) {
			c, err := net.Dial("unix", sock)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", up, up)
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			if err != nil || line[:12] != "HTTP/1.1 200" {
				c.Close()
				return nil, fmt.Errorf("CONNECT: %q %v", line, err)
			}
			br.ReadString('\n')
			return c, nil
		}, func() {
			bind.Close()
			os.RemoveAll(dir)
		}
}

func BenchmarkEgress(b *testing.B) {
	up, stopUp := upstream(b)
	defer stopUp()
	proxied, stopProxy := viaProxy(b, up)
	defer stopProxy()
	paths := []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"direct", func() (net.Conn, error) { return net.Dial("tcp", up) }},
		{"proxy", proxied},
	}
	for _, p := range paths {
		b.Run(p.name+"/NewConnection", func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				c, err := p.dial()
				if err != nil {
					b.Fatal(err)
				}
				c.Write([]byte{'p'})
				var one [1]byte
				if _, err := io.ReadFull(c, one[:]); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				c.Close()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
		b.Run(p.name+"/Throughput", func(b *testing.B) {
			buf := make([]byte, 1<<20)
			const total = 1 << 30
			b.SetBytes(total)
			for b.Loop() {
				c, err := p.dial()
				if err != nil {
					b.Fatal(err)
				}
				c.Write([]byte{'s'})
				for sent := 0; sent < total; sent += len(buf) {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				c.(interface{ CloseWrite() error }).CloseWrite()
				io.ReadAll(c)
				c.Close()
			}
		})
		b.Run(p.name+"/200Concurrent", func(b *testing.B) {
			for b.Loop() {
				var wg sync.WaitGroup
				conns := make([]net.Conn, 200)
				errs := make(chan error, 200)
				for i := range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c, err := p.dial()
						if err != nil {
							errs <- err
							return
						}
						conns[i] = c
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				for _, c := range conns {
					c.Write([]byte{'p'})
				}
				for _, c := range conns {
					var one [1]byte
					if _, err := io.ReadFull(c, one[:]); err != nil {
						b.Fatal(err)
					}
					c.Close()
				}
			}
		})
	}
}

// BenchmarkSNI is reading a real ClientHello's server name, as the proxy
// does for every TLS connection it screens by name.
func BenchmarkSNI(b *testing.B) {
	hello := clientHello(b, "api.example.com")
	for b.Loop() {
		if name, err := readSNI(bufio.NewReader(bytes.NewReader(hello))); err != nil || name != "api.example.com" {
			b.Fatal(name, err)
		}
	}
}
