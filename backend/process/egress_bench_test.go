//go:build linux

package process_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/testnet"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// bridgeClient is the workload of BenchmarkEgressBridge, run inside the
// sandbox (through the bridge the proxy variables name) and in the test
// network's namespace on the host (direct), so both paths have the same
// client. It prints the p50 and p99 of a new connection to its first
// answered byte, and the MB/s of one connection carrying 1 GiB up, then of
// one carrying 1 GiB down.
const bridgeClient = `
import json, os, socket, sys, time
target, n = sys.argv[1], int(sys.argv[2])
proxy = os.environ.get("HTTP_PROXY", "")
def dial():
    if not proxy:
        h, p = target.rsplit(":", 1)
        return socket.create_connection((h, int(p)))
    h, p = proxy.split("//")[1].rsplit(":", 1)
    s = socket.create_connection((h, int(p)))
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""  # nothing follows the head until the client writes
    while not head.endswith(b"\r\n\r\n"):
        b = s.recv(4096)
        if not b: raise SystemExit("proxy closed: %r" % head)
        head += b
    if not head.startswith(b"HTTP/1.1 200"): raise SystemExit("CONNECT: %r" % head)
    return s
lat = []
for _ in range(n):
    t0 = time.perf_counter()
    s = dial(); s.sendall(b"p")
    if s.recv(1) != b"!": raise SystemExit("no answer")
    lat.append(time.perf_counter() - t0)
    s.close()
lat.sort()
total, chunk = 1 << 30, memoryview(bytearray(1 << 20))
s = dial(); s.sendall(b"s")
t0 = time.perf_counter()
for _ in range(total // len(chunk)): s.sendall(chunk)
s.shutdown(socket.SHUT_WR)
got = int(s.recv(64))
up = total / (time.perf_counter() - t0) / 1e6
if got != total: raise SystemExit("upstream got %d of %d" % (got, total))
s = dial(); s.sendall(b"g")
t0, got = time.perf_counter(), 0
while True:
    k = s.recv_into(chunk)
    if not k: break
    got += k
down = total / (time.perf_counter() - t0) / 1e6
if got != total: raise SystemExit("got %d of %d from upstream" % (got, total))
print(json.dumps({"p50": lat[n // 2] * 1e3, "p99": lat[n * 99 // 100] * 1e3, "up": up, "down": down}))
`

// BenchmarkEgressBridge measures egress as a sandboxed program meets it: a
// CONNECT through the in-sandbox bridge and the host's proxy to a server
// on the host's loopback (allowed by its address, which a rule must name),
// against the same client connecting directly from the host. It reports
// each path's new-connection p50 and p99 (ms) and one connection's
// throughput each way (MB/s); "added" is the bridge's p50 over direct.
func BenchmarkEgressBridge(b *testing.B) {
	testutil.RequiresRoot(b)
	testutil.Requires(b, "python3")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	testnet.Upstream(b, ln)
	p := sandbox.NewProvider([]sandbox.Backend{benchBackend(b, false)}, sandbox.WithEgressProxy(egress.New(egress.Config{})))
	spec := sandbox.Spec{Egress: &egress.Policy{Mode: egress.Static, Rules: []egress.Rule{{Host: "127.0.0.1", Ports: []int{port}}}}}
	sb, err := p.Create(b.Context(), spec)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(b.Context())
	type figures struct{ P50, P99, Up, Down float64 }
	parse := func(out []byte) (f figures) {
		if err := json.Unmarshal(out, &f); err != nil {
			b.Fatalf("client said %q: %v", out, err)
		}
		return f
	}
	const conns = "300"
	var bridge, direct []figures
	for b.Loop() {
		var o, e bytes.Buffer
		res, err := sb.Exec(b.Context(), "python3", sandbox.ExecOptions{Args: []string{"-c", bridgeClient, addr, conns}, Stdout: &o, Stderr: &e, Timeout: 5 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("in the sandbox: %v %+v: %s", err, res, e.String())
		}
		bridge = append(bridge, parse(o.Bytes()))
		host := exec.Command("python3", "-c", bridgeClient, addr, conns)
		host.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := host.Output()
		if err != nil {
			b.Fatalf("direct: %v", err)
		}
		direct = append(direct, parse(out))
	}
	mean := func(fs []figures) (f figures) {
		for _, x := range fs {
			f.P50 += x.P50 / float64(len(fs))
			f.P99 += x.P99 / float64(len(fs))
			f.Up += x.Up / float64(len(fs))
			f.Down += x.Down / float64(len(fs))
		}
		return f
	}
	br, di := mean(bridge), mean(direct)
	b.ReportMetric(br.P50, "bridge-p50-ms")
	b.ReportMetric(br.P99, "bridge-p99-ms")
	b.ReportMetric(br.Up, "bridge-up-MB/s")
	b.ReportMetric(br.Down, "bridge-down-MB/s")
	b.ReportMetric(di.P50, "direct-p50-ms")
	b.ReportMetric(di.Up, "direct-up-MB/s")
	b.ReportMetric(di.Down, "direct-down-MB/s")
	b.ReportMetric(br.P50-di.P50, "added-ms")
}
