package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// Benchmarks through the REST API on the unix socket, against real
// process-tier sandboxes. Each reports the median and 99th percentile of
// its phases as custom metrics (ms); run with -benchtime 100x or so.

type phases struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (p *phases) add(name string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.d == nil {
		p.d = map[string][]time.Duration{}
	}
	p.d[name] = append(p.d[name], d)
}

func (p *phases) report(b *testing.B) {
	for name, ds := range p.d {
		testutil.ReportPercentiles(b, name, ds)
	}
}

// lifecycle is one create → first exec → delete, timed by phase.
func lifecycle(ctx context.Context, c *sclient.Client, req api.CreateRequest, p *phases) error {
	t0 := time.Now()
	sb, err := c.Create(ctx, req)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if _, err := c.Exec(ctx, sb.ID, "true", sclient.ExecOptions{}); err != nil {
		return err
	}
	t2 := time.Now()
	if err := c.Delete(ctx, sb.ID); err != nil {
		return err
	}
	t3 := time.Now()
	p.add("create", t1.Sub(t0))
	p.add("first-exec", t2.Sub(t1))
	p.add("create+exec", t2.Sub(t0))
	p.add("delete", t3.Sub(t2))
	p.add("total", t3.Sub(t0))
	return nil
}

// BenchmarkColdLifecycle: create → first exec → delete, no pool.
func BenchmarkColdLifecycle(b *testing.B) {
	d := startDaemon(b)
	var p phases
	for b.Loop() {
		if err := lifecycle(b.Context(), d.local, api.CreateRequest{}, &p); err != nil {
			b.Fatal(err)
		}
	}
	p.report(b)
}

// BenchmarkSpacedColdLifecycle: cold lifecycles with the daemon idle for
// 150 ms (untimed) before each, as sporadic creates come: the tier's
// prestarted inits (cordon serve's --prestart) have refilled by then.
func BenchmarkSpacedColdLifecycle(b *testing.B) {
	d := startDaemon(b)
	var p phases
	for b.Loop() {
		b.StopTimer()
		time.Sleep(150 * time.Millisecond)
		b.StartTimer()
		if err := lifecycle(b.Context(), d.local, api.CreateRequest{}, &p); err != nil {
			b.Fatal(err)
		}
	}
	p.report(b)
}

// BenchmarkPoolLifecycle: the same, claimed from a warm pool. The pool is
// given time to refill between iterations (untimed): this measures a
// claim, not a pool run dry.
func BenchmarkPoolLifecycle(b *testing.B) {
	d := startDaemon(b)
	ctx := b.Context()
	if _, err := d.local.PutPool(ctx, "bench", api.Spec{}, 4); err != nil {
		b.Fatal(err)
	}
	var p phases
	for b.Loop() {
		b.StopTimer()
		waitPool(b, d.local, "bench", 4)
		b.StartTimer()
		if err := lifecycle(ctx, d.local, api.CreateRequest{Pool: "bench"}, &p); err != nil {
			b.Fatal(err)
		}
	}
	p.report(b)
}

// BenchmarkConcurrentLifecycle: 50 clients at once, each doing create →
// exec → delete; b.N lifecycles in all.
func BenchmarkConcurrentLifecycle(b *testing.B) {
	d := startDaemon(b, func(c *server.Config) { c.Limits.MaxSandboxesPerTenant = 200 })
	var p phases
	const clients = 50
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				if err := lifecycle(b.Context(), d.local, api.CreateRequest{}, &p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "lifecycles/s")
	p.report(b)
}

// BenchmarkExecWarm: exec into a running sandbox through the API.
func BenchmarkExecWarm(b *testing.B) {
	d := startDaemon(b)
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	var p phases
	for b.Loop() {
		t0 := time.Now()
		if _, err := d.local.Exec(b.Context(), sb.ID, "true", sclient.ExecOptions{}); err != nil {
			b.Fatal(err)
		}
		p.add("exec", time.Since(t0))
	}
	p.report(b)
}

// BenchmarkUpdate: a sandbox's TTL moved through the API (PATCH; the
// registry's write included), as an SDK's setTimeout does.
func BenchmarkUpdate(b *testing.B) {
	d := startDaemon(b)
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := d.local.Update(b.Context(), sb.ID, api.UpdateRequest{TTLSeconds: new(int64(3600))}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkMetrics: a sandbox's metrics through the API, with an idle
// sandbox (metrics/idle) and with 200 processes running in it
// (metrics/busy: the agent reads every one's times in /proc).
func BenchmarkMetrics(b *testing.B) {
	d := startDaemon(b)
	for _, tc := range []struct{ name, start string }{{"idle", ""}, {"busy", "for i in $(seq 200); do sleep 600 & done; wait"}} {
		b.Run(tc.name, func(b *testing.B) {
			sb, err := d.local.Create(b.Context(), api.CreateRequest{})
			if err != nil {
				b.Fatal(err)
			}
			if tc.start != "" {
				if _, err := d.local.Agent(sb.ID).StartSession(b.Context(), wire.SessionRequest{Command: "sh", Args: []string{"-c", tc.start}}); err != nil {
					b.Fatal(err)
				}
				for {
					m, err := d.local.Metrics(b.Context(), sb.ID)
					if err != nil {
						b.Fatal(err)
					}
					if m.Tasks >= 201 {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := d.local.Metrics(b.Context(), sb.ID); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			testutil.ReportPercentiles(b, "", lat)
			d.local.Delete(b.Context(), sb.ID)
		})
	}
}

// BenchmarkMetricsHistory: a sandbox's readings read back, when the
// daemon has taken 50 of them (every 100 ms).
func BenchmarkMetricsHistory(b *testing.B) {
	d := startDaemon(b, func(c *server.Config) { c.MetricsInterval, c.MetricsHistory = 100*time.Millisecond, 5*time.Second })
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.local.Delete(b.Context(), sb.ID)
	var n int
	for deadline := time.Now().Add(time.Minute); n < 50; time.Sleep(100 * time.Millisecond) {
		h, err := d.local.MetricsHistory(b.Context(), sb.ID, time.Time{}, time.Time{})
		if err != nil || time.Now().After(deadline) {
			b.Fatalf("%d readings: %v", n, err)
		}
		n = len(h.Metrics)
	}
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := d.local.MetricsHistory(b.Context(), sb.ID, time.Time{}, time.Time{}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkFileURL: a small file read through a file URL (the signature
// checked, then the file route), against the same read with the key.
func BenchmarkFileURL(b *testing.B) {
	d := startDaemon(b)
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.local.Delete(b.Context(), sb.ID)
	if err := d.local.Upload(b.Context(), sb.ID, "f", strings.NewReader("0123456789"), 10); err != nil {
		b.Fatal(err)
	}
	u, err := d.local.FileURL(b.Context(), sb.ID, "f", "", 0)
	if err != nil {
		b.Fatal(err)
	}
	hc := d.unixClient()
	for _, c := range []struct{ name, url string }{{"url", u.URL}, {"key", "/v1/sandboxes/" + sb.ID + "/files?path=f"}} {
		b.Run(c.name, func(b *testing.B) {
			timeRequests(b, hc, func() *http.Request {
				req, _ := http.NewRequest("GET", "http://cordon"+c.url, nil)
				return req
			})
		})
	}
}

// BenchmarkUpload: a 1 MiB file written through the daemon as a PUT with
// its length, as a chunked PUT (its length unknown), and as a form's file
// (POST, multipart/form-data, as a browser or E2B's SDK sends one).
func BenchmarkUpload(b *testing.B) {
	d := startDaemon(b)
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.local.Delete(b.Context(), sb.ID)
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	var formBody bytes.Buffer
	mw := multipart.NewWriter(&formBody)
	fw, _ := mw.CreateFormFile("file", "f.bin")
	fw.Write(data)
	mw.Close()
	hc := d.unixClient()
	files := "http://cordon/v1/sandboxes/" + sb.ID + "/files?path=f.bin"
	for _, c := range []struct {
		name, method, ctype string
		body                []byte
		chunked             bool
	}{
		{"put", "PUT", "", data, false},
		{"chunked", "PUT", "", data, true},
		{"form", "POST", mw.FormDataContentType(), formBody.Bytes(), false},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			timeRequests(b, hc, func() *http.Request {
				var body io.Reader = bytes.NewReader(c.body)
				if c.chunked {
					body = struct{ io.Reader }{body}
				}
				req, _ := http.NewRequest(c.method, files, body)
				if c.ctype != "" {
					req.Header.Set("Content-Type", c.ctype)
				}
				return req
			})
		})
	}
}

// timeRequests sends the request next makes, each loop of b, and reports
// the percentiles of their times, answer read; each must answer 200.
func timeRequests(b *testing.B, hc *http.Client, next func() *http.Request) {
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		resp, err := hc.Do(next())
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%d", resp.StatusCode)
		}
		lat = append(lat, time.Since(t0))
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkRename: a file moved back and forth inside a sandbox through
// the API (the daemon's route, the agent's jail, rename(2)).
func BenchmarkRename(b *testing.B) {
	d := startDaemon(b)
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.local.Upload(b.Context(), sb.ID, "a", strings.NewReader("x"), 1); err != nil {
		b.Fatal(err)
	}
	names := [2]string{"a", "b"}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		if _, err := d.local.Rename(b.Context(), sb.ID, names[i%2], names[(i+1)%2]); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		i++
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkExecOutput: 16 MiB of a command's output through the API (the
// agent's stream relayed by the daemon, decoded by the client).
func BenchmarkExecOutput(b *testing.B) {
	d := startDaemon(b)
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	// As text, and (Raw, as cordon exec asks for it) as the exact bytes.
	for _, raw := range []bool{false, true} {
		name := "Text"
		if raw {
			name = "Raw"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				res, err := d.local.Exec(b.Context(), sb.ID, "sh", sclient.ExecOptions{Args: []string{"-c", "yes abcdefghijklmnopqrstuvwxyz0123456789 | head -c 16777216"}, MaxOutputBytes: 32 << 20, Stdout: io.Discard, RawOutput: raw})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
			}
			b.SetBytes(16 << 20)
		})
	}
}

// BenchmarkIdleMemory creates CORDON_BENCH_IDLE idle sandboxes (default
// 100) and reports what each
// costs the host: the fall of MemAvailable per sandbox, and the agents'
// own resident memory (proportional set size).
func BenchmarkIdleMemory(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("CORDON_BENCH_IDLE")); err == nil && v > 0 {
		n = v
	}
	d := startDaemon(b, func(c *server.Config) { c.Limits.MaxSandboxesPerTenant = n })
	for b.Loop() {
		before := memAvailable(b)
		var ids []string
		for range n {
			sb, err := d.local.Create(b.Context(), api.CreateRequest{IdleTimeoutSeconds: -1})
			if err != nil {
				b.Fatalf("after %d sandboxes: %v", len(ids), err)
			}
			ids = append(ids, sb.ID)
		}
		time.Sleep(2 * time.Second) // let start-up garbage be collected
		after := memAvailable(b)
		b.ReportMetric(float64(before-after)/float64(n)/1024, "host-MiB/sandbox")
		b.ReportMetric(agentsPss(b, d.processDir)/float64(n)/1024, "agent-pss-MiB/sandbox")
		for _, id := range ids {
			if err := d.local.Delete(b.Context(), id); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func memAvailable(b *testing.B) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb
		}
	}
	b.Fatal("no MemAvailable")
	return 0
}

// agentsPss sums the PSS (KiB) of every sandbox's agent.
func agentsPss(b *testing.B, dir string) float64 {
	ents, _ := os.ReadDir(dir)
	var total float64
	for _, e := range ents {
		raw, err := os.ReadFile(dir + "/" + e.Name() + "/init")
		if err != nil {
			continue
		}
		pid := strings.Fields(string(raw))[0]
		rollup, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(rollup), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				total += kb
			}
		}
	}
	return total
}

// BenchmarkTerminalEcho: a keystroke typed into a terminal session and its
// echo read back, through the daemon (its unix socket, the agent wire's
// passthrough) to a process-tier sandbox.
func BenchmarkTerminalEcho(b *testing.B) {
	d := startDaemon(b)
	sb, err := d.local.Create(b.Context(), api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.local.Delete(context.Background(), sb.ID)
	lat, err := conformance.TerminalEcho(b.Context(), d.local.Agent(sb.ID), b.N)
	if err != nil {
		b.Fatal(err)
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkTerminalEchoWebSocket: a keystroke and its echo over the
// daemon's terminal WebSocket (TCP, an API key) to a process-tier sandbox.
func BenchmarkTerminalEchoWebSocket(b *testing.B) {
	d := startDaemon(b)
	ctx := context.Background()
	k, err := d.local.CreateKey(ctx, api.KeyRequest{Tenant: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	c, _ := sclient.New("http://"+d.tcp, k.Secret)
	sb, err := c.Create(ctx, api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Delete(context.Background(), sb.ID)
	sess, err := c.Agent(sb.ID).StartSession(ctx, wire.SessionRequest{Command: "cat", TTY: true})
	if err != nil {
		b.Fatal(err)
	}
	ws, _, err := websocket.Dial(ctx, "ws://"+d.tcp+"/v1/sandboxes/"+sb.ID+"/sessions/"+sess.ID+"/terminal",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + k.Secret}}})
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		key := string(rune('a' + i%26))
		i++
		start := time.Now()
		if err := ws.Write(ctx, websocket.MessageBinary, []byte(key)); err != nil {
			b.Fatal(err)
		}
		for got := ""; !strings.Contains(got, key); {
			_, data, err := ws.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			got += string(data)
		}
		lat = append(lat, time.Since(start))
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkTCPThroughDaemon: a byte stream to a port inside a process-tier
// sandbox through the daemon (its unix socket, the agent route's upgrade,
// the agent's tcp-connect), as cordon port-forward carries one: a new
// connection with one request, and one stream's throughput into a sink.
func BenchmarkTCPThroughDaemon(b *testing.B) {
	d := startDaemon(b)
	ctx := context.Background()
	sb, err := d.local.Create(ctx, api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.local.Delete(context.Background(), sb.ID)
	ac := d.local.Agent(sb.ID)
	// Inside: answers each connection with the count of bytes it read, once
	// the client half-closed.
	if _, err := ac.StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7000)); s.listen(64)
def serve(c):
    n, buf = 0, bytearray(1 << 20)
    while True:
        k = c.recv_into(buf)
        if not k: break
        n += k
    c.sendall(str(n).encode()); c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`}}); err != nil {
		b.Fatal(err)
	}
	dial := func() (net.Conn, error) { return ac.DialTCP(ctx, 7000) }
	// The server inside listens once its session has started it.
	for deadline := time.Now().Add(15 * time.Second); conformance.TCPRequest(dial) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the counting server inside never answered")
		}
	}
	b.Run("Request", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := conformance.TCPRequest(dial); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		testutil.ReportPercentiles(b, "", lat)
	})
	b.Run("Stream", func(b *testing.B) {
		const size = 512 << 20
		b.SetBytes(size)
		for b.Loop() {
			if err := conformance.TCPStream(dial, size); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same request made inside the sandbox, straight to the server on
	// its loopback: what the daemon's path adds is the difference.
	b.Run("InsideDirect", func(b *testing.B) {
		n := max(b.N, 50)
		var out strings.Builder
		if _, err := d.local.Exec(ctx, sb.ID, "python3", sclient.ExecOptions{Stdout: &out, Args: []string{"-c", `
import socket, time, statistics
lat = []
for i in range(` + strconv.Itoa(n) + `):
    t = time.perf_counter()
    c = socket.create_connection(("127.0.0.1", 7000)); c.sendall(b"x"); c.shutdown(socket.SHUT_WR)
    assert c.recv(16) == b"1"; c.close()
    lat.append(time.perf_counter() - t)
lat.sort()
print(lat[len(lat)//2] * 1000, lat[len(lat)*99//100] * 1000)
`}}); err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(out.String())
		if len(f) != 2 {
			b.Fatalf("inside: %q", out.String())
		}
		p50, _ := strconv.ParseFloat(f[0], 64)
		p99, _ := strconv.ParseFloat(f[1], 64)
		for b.Loop() {
		}
		b.ReportMetric(p50, "p50-ms")
		b.ReportMetric(p99, "p99-ms")
	})
}

// BenchmarkExposedPort: an HTTP request to a Python server inside a
// process-tier sandbox through its exposed port, a new connection each, at
// its URL on the daemon's origin (Path) and on its own origin (Origin, the
// host routed before the API's routes); each answer's headers are
// confined on the way out.
func BenchmarkExposedPort(b *testing.B) {
	d := startDaemon(b, func(c *server.Config) { c.PortsURL = "http://*.ports.test" })
	ctx := context.Background()
	sb, err := d.local.Create(ctx, api.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.local.Delete(context.Background(), sb.ID)
	if _, err := d.local.Agent(sb.ID).StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Set-Cookie", "s=1; Path=/"); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
`}}); err != nil {
		b.Fatal(err)
	}
	p, err := d.local.ExposePort(ctx, sb.ID, 8000)
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(host, path string) error {
		req, _ := http.NewRequest("GET", "http://"+d.tcp+path, nil)
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(body) != "ok" {
			return fmt.Errorf("%d %q", resp.StatusCode, body)
		}
		return nil
	}
	for deadline := time.Now().Add(15 * time.Second); get(d.tcp, p.URL) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the server inside never answered")
		}
	}
	origin := strings.TrimSuffix(strings.TrimPrefix(p.OriginURL, "http://"), "/")
	for _, c := range []struct{ name, host, path string }{{"Path", d.tcp, p.URL}, {"Origin", origin, "/"}} {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := get(c.host, c.path); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			testutil.ReportPercentiles(b, "", lat)
		})
	}
}

// BenchmarkRuns: a run of 1+1 through POST /v1/runs, end to end, from one
// client and from 8 clients at once, with a warm pool of the runs'
// sandboxes (cordon serve --run-pool). Per-run latency percentiles and
// runs per second. With QUESTPIE_SRC naming a directory holding
// @questpie/sandbox's sandbox-server.ts (and what it imports), the same
// request goes to that server too, run here under Deno.
func BenchmarkRuns(b *testing.B) {
	for _, lang := range []struct{ name, body string }{
		{"python", `{"language":"python","source":"1+1"}`},
		{"javascript", `{"source":"export default () => 1 + 1"}`},
	} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", lang.name, clients), func(b *testing.B) {
				testutil.Requires(b, "deno", "python3")
				d := startDaemon(b, func(c *server.Config) { c.RunPool = 8 })
				time.Sleep(2 * time.Second) // the pool fills
				hc := d.unixClient()
				benchClients(b, clients, func() error {
					return postExpect(hc, "http://cordon/v1/runs", lang.body, `"output":2`)
				})
			})
		}
	}
	src := os.Getenv("QUESTPIE_SRC")
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("questpie/clients=%d", clients), func(b *testing.B) {
			if src == "" {
				b.Skip("QUESTPIE_SRC names no @questpie/sandbox server source")
			}
			deno := testutil.Requires(b, "deno")[0]
			cmd := exec.Command(deno, "run", "--allow-net", "--allow-env", "--allow-run", "--allow-read", filepath.Join(src, "sandbox-server.ts"))
			cmd.Env = append(os.Environ(), "PORT=0")
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			line, _ := bufio.NewReader(out).ReadString('\n')
			var port int
			fmt.Sscanf(strings.TrimSpace(line), "sandbox-server listening on :%d", &port)
			if port == 0 {
				b.Fatalf("the questpie server said %q", line)
			}
			body := `{"source":"export default () => 1 + 1","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128}}`
			benchClients(b, clients, func() error {
				return postExpect(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/run", port), body, `"output":2`)
			})
		})
	}
}

func postExpect(hc *http.Client, url, body, want string) error {
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(got), want) {
		return fmt.Errorf("run: %s", got)
	}
	return nil
}

// benchClients does b.N calls of do from clients goroutines at once and
// reports runs per second and the calls' latency percentiles.
func benchClients(b *testing.B, clients int, do func() error) {
	var mu sync.Mutex
	var lat []time.Duration
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				t := time.Now()
				if err := do(); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(t))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
	testutil.ReportPercentiles(b, "", lat)
}
