//go:build linux

package process_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/testnet"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
)

// fakeDNS answers from a table; a name with two answers gives the first,
// then the second (a rebinding name).
type fakeDNS struct {
	mu    sync.Mutex
	table map[string][]string
	asked map[string]int
}

func (f *fakeDNS) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answers, ok := f.table[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(f.asked[host], len(answers)-1)
	f.asked[host]++
	return []netip.Addr{netip.MustParseAddr(answers[i])}, nil
}

func selfSigned(t *testing.T, names ...string) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// egressWorld is a test network with servers on documentation addresses,
// a proxy dialing into it, and a provider using that proxy.
type egressWorld struct {
	dns   *fakeDNS
	audit *logbuf.Buffer
	p     *sandbox.Provider
}

func newEgressWorld(t *testing.T) *egressWorld {
	n := testnet.New(t, "203.0.113.10", "203.0.113.11", "10.20.30.40")
	serve := func(addr, body string, tlsCert *tls.Certificate) {
		ln := n.Listen(t, addr)
		if tlsCert != nil {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*tlsCert}})
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s host=%s", body, r.Host)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	cert := selfSigned(t, "api.test")
	serve("203.0.113.10:80", "hello", nil)
	serve("203.0.113.10:8080", "other-port", nil)
	serve("203.0.113.10:443", "tls-ok", &cert)
	serve("203.0.113.11:80", "second", nil)
	serve("10.20.30.40:80", "private", nil)
	w := &egressWorld{
		dns: &fakeDNS{asked: map[string]int{}, table: map[string][]string{
			"api.test": {"203.0.113.10"}, "other.test": {"203.0.113.11"}, "a.example.com": {"203.0.113.10"},
			"example.com": {"203.0.113.10"}, "evilexample.com": {"203.0.113.10"}, "meta.test": {"169.254.169.254"},
			"private.test": {"10.20.30.40"}, "mapped.test": {"::ffff:127.0.0.1"}, "rebind.test": {"203.0.113.11", "10.20.30.40"},
		}},
		audit: logbuf.New(8 << 20),
	}
	proxy := egress.New(egress.Config{NetNS: n.Path, Resolver: w.dns, Audit: w.audit})
	w.p = sandbox.NewProvider([]sandbox.Backend{backend(t)}, sandbox.WithEgressProxy(proxy))
	return w
}

func (w *egressWorld) create(t *testing.T, policy *egress.Policy) *sandbox.Sandbox {
	sb, err := w.p.Create(t.Context(), sandbox.Spec{Egress: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent said:\n%s", sb.Diagnostics())
		}
		sb.Destroy(context.Background())
	})
	return sb
}

func TestEgress(t *testing.T) {
	testutil.Requires(t, "curl")
	w := newEgressWorld(t)
	sb := w.create(t, &egress.Policy{Mode: egress.Static, Rules: []egress.Rule{
		{Host: "api.test"}, {Host: "*.example.com"}, {Host: "meta.test", Ports: []int{80}}, {Host: "private.test", Ports: []int{80}},
		{Host: "mapped.test", Ports: []int{80}}, {Host: "rebind.test", Ports: []int{80}},
	}})
	curl := func(args string) (string, int) {
		out, errOut, res := sh(t, sb, "curl -sS -m 10 "+args)
		return out + errOut, res.ExitCode
	}
	t.Run("AllowedHTTP", func(t *testing.T) {
		if out, code := curl("http://api.test/"); code != 0 || out != "hello host=api.test" {
			t.Fatalf("%q %d", out, code)
		}
	})
	t.Run("AllowedCONNECT", func(t *testing.T) {
		if out, code := curl("-k https://api.test/"); code != 0 || out != "tls-ok host=api.test" {
			t.Fatalf("%q %d", out, code)
		}
	})
	t.Run("Wildcard", func(t *testing.T) {
		if out, code := curl("http://a.example.com/"); code != 0 || !strings.HasPrefix(out, "hello") {
			t.Fatalf("a.example.com: %q %d", out, code)
		}
		for _, h := range []string{"example.com", "evilexample.com"} {
			if out, _ := curl("http://" + h + "/"); !strings.Contains(out, "refused "+h+":80") {
				t.Errorf("%s: %q", h, out)
			}
		}
	})
	t.Run("Refused", func(t *testing.T) {
		for url, why := range map[string]string{
			"http://other.test/":            "no rule allows",
			"http://api.test:8080/":         "no rule allows",
			"http://meta.test/":             "cloud metadata",
			"http://private.test/":          "private",
			"http://mapped.test/":           "loopback address 127.0.0.1", // a resolver's mapped answer is judged as what it maps
			"http://203.0.113.10/":          "no rule names this address",
			"http://3405803786/":            "no rule names this address",
			"http://0xcb00710a/":            "no rule names this address",
			"http://0313.0.0161.012/":       "no rule names this address",
			"http://[::ffff:203.0.113.10]/": "no rule names this address",
			"http://nosuch.test/":           "no rule allows",
		} {
			out, code := curl("-w ' status=%{http_code}' " + url)
			if code != 0 || !strings.Contains(out, "status=403") || !strings.Contains(out, why) {
				t.Errorf("%s: %q (exit %d), want 403 naming %q", url, out, code, why)
			}
		}
		if out, _ := curl("-k https://other.test/"); !strings.Contains(out, "403") {
			t.Errorf("CONNECT to a denied host: %q", out)
		}
	})
	t.Run("Rebinding", func(t *testing.T) {
		if out, _ := curl("http://rebind.test/"); !strings.HasPrefix(out, "second") {
			t.Fatalf("first resolution: %q", out)
		}
		if out, _ := curl("http://rebind.test/"); !strings.Contains(out, "private") || strings.HasPrefix(out, "private") {
			t.Fatalf("a name that rebinds to a private address must be refused: %q", out)
		}
	})
	t.Run("HostHeaderMismatch", func(t *testing.T) {
		if out, _ := curl("-H 'Host: other.test' http://api.test/"); !strings.Contains(out, "does not match") {
			t.Fatalf("%q", out)
		}
	})
	t.Run("SNIFronting", func(t *testing.T) {
		out := adversarial.Py(t, sb, `
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n")
head = s.recv(4096)
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
try:
    t = ctx.wrap_socket(s, server_hostname="evil.test"); t.sendall(b"GET / HTTP/1.0\r\n\r\n"); print("fronted", t.recv(100))
except (ssl.SSLError, OSError) as e:
    print("refused")
`)
		if strings.TrimSpace(out) != "refused" {
			t.Fatalf("SNI fronting: %q", out)
		}
	})
	t.Run("HandedOver", func(t *testing.T) {
		// While a tunnel is open, the agent holds no connection of it: the
		// bridge handed the one it accepted to the proxy.
		r, wr := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := sb.Exec(t.Context(), "python3", sandbox.ExecOptions{Args: []string{"-c", `
import os, socket, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n")
head = s.recv(4096)
print(os.readlink("/proc/self/ns/net"), head.split(b"\r\n")[0].decode(), flush=True)
while not os.path.exists("/tmp/checked"): time.sleep(0.01)
s.sendall(b"GET / HTTP/1.0\r\nHost: api.test\r\n\r\n")
print(s.recv(4096).split(b"\r\n\r\n")[-1].decode(), flush=True)
`}, Stdout: wr, Timeout: time.Minute})
			wr.CloseWithError(err)
			done <- err
		}()
		line, err := bufio.NewReader(r).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "HTTP/1.1" {
			t.Fatalf("the tunnel did not open: %q", line)
		}
		// The agent lets its copy go once the proxy has it, which may come
		// just after the proxy answered; a connection the bridge carries
		// stays for as long as the tunnel is open.
		held := agentConnections(t, f[0])
		for deadline := time.Now().Add(2 * time.Second); held != 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			held = agentConnections(t, f[0])
		}
		sh(t, sb, "touch /tmp/checked")
		rest, _ := io.ReadAll(r)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if string(rest) != "hello host=api.test\n" {
			t.Fatalf("through the tunnel: %q", rest)
		}
		if held != 0 {
			t.Fatalf("the agent holds %d established connections while the tunnel is open: the bridge carried it rather than hand it over", held)
		}
	})
	t.Run("HandOverJunk", func(t *testing.T) {
		// The workload can reach the proxy's socket itself: what it hands
		// over that is not a connected TCP socket is refused.
		out := adversarial.Py(t, sb, `
import array, os, socket
for name, fds in (("file", [os.open("/etc/hostname", os.O_RDONLY)]), ("none", []), ("listening", [socket.create_server(("127.0.0.1", 0)).fileno()])):
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/cordon/egress.sock")
    s.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])
    print(name, s.recv(4096).split(b"\r\n")[0].decode())
`)
		if want := "file HTTP/1.1 400 Bad Request\nnone HTTP/1.1 400 Bad Request\nlistening HTTP/1.1 400 Bad Request\n"; out != want {
			t.Fatalf("junk handed over: %q, want %q", out, want)
		}
		if out, code := curl("http://api.test/"); code != 0 || out != "hello host=api.test" {
			t.Fatalf("after the junk: %q %d", out, code)
		}
	})
	t.Run("NoRouteAroundTheProxy", func(t *testing.T) {
		out, _, _ := sh(t, sb, "env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY curl -sS -m 3 http://203.0.113.10/ 2>&1; echo; python3 -c \"import socket\ntry:\n  socket.create_connection(('203.0.113.10', 80), 3)\nexcept OSError as e: print(e.errno)\"")
		if !strings.Contains(out, "Couldn't connect") && !strings.Contains(out, "unreachable") || !strings.Contains(out, "101") {
			t.Fatalf("%q", out)
		}
	})
	t.Run("Audit", func(t *testing.T) {
		var allowed, refused int
		for _, line := range strings.Split(strings.TrimSpace(w.audit.String()), "\n") {
			var r egress.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			if r.Sandbox != sb.ID() || r.Host == "" || r.Time.IsZero() {
				t.Errorf("incomplete audit record %+v", r)
			}
			switch r.Decision {
			case "allowed":
				allowed++
				if r.Addr == "" || r.Rule == "" || r.BytesDown == 0 {
					t.Errorf("allowed record without address, rule or bytes: %+v", r)
				}
			case "refused":
				refused++
				if r.Reason == "" {
					t.Errorf("refused record without reason: %+v", r)
				}
			}
		}
		if allowed < 3 || refused < 10 {
			t.Fatalf("%d allowed and %d refused records", allowed, refused)
		}
	})
}

func TestEgressDefaultsAndLiveChange(t *testing.T) {
	testutil.Requires(t, "curl")
	w := newEgressWorld(t)
	t.Run("DefaultDenyAll", func(t *testing.T) {
		sb := w.create(t, nil)
		out, _, _ := sh(t, sb, "curl -sS -m 10 http://api.test/")
		if !strings.Contains(out, "deny-all") {
			t.Fatalf("%q", out)
		}
	})
	t.Run("EmptyAllowlist", func(t *testing.T) {
		sb := w.create(t, &egress.Policy{Mode: egress.Static})
		if out, _, _ := sh(t, sb, "curl -sS -m 10 -w ' %{http_code}' http://api.test/"); !strings.HasSuffix(out, " 403") {
			t.Fatalf("%q", out)
		}
	})
	t.Run("AllowAllKeepsPrivateOut", func(t *testing.T) {
		sb := w.create(t, &egress.Policy{Mode: egress.AllowAll})
		if out, _, _ := sh(t, sb, "curl -sS -m 10 http://other.test/; echo; curl -sS -m 10 http://private.test/"); !strings.HasPrefix(out, "second") || !strings.Contains(out, "private address") {
			t.Fatalf("%q", out)
		}
	})
	t.Run("LiveChange", func(t *testing.T) {
		sb := w.create(t, &egress.Policy{Mode: egress.Static, Rules: []egress.Rule{{Host: "api.test"}}})
		// Hold a tunnel open, then take the host away.
		var out strings.Builder
		done := make(chan error, 1)
		go func() {
			_, err := sb.Exec(context.Background(), "python3", sandbox.ExecOptions{Stdout: &out, Timeout: time.Minute, Args: []string{"-c", `
import socket, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n")
print(s.recv(100).split(b"\r\n")[0].decode(), flush=True)
open("/tmp/tunnel-open", "w").close()
s.settimeout(20)
print("closed" if s.recv(100) == b"" else "data", flush=True)
`}})
			done <- err
		}()
		for i := 0; i < 200; i++ {
			if b, err := sb.ReadFile(t.Context(), "/tmp/tunnel-open"); err == nil && b != nil {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		if err := sb.SetNetworkPolicy(t.Context(), egress.Policy{Mode: egress.DenyAll}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := out.String(); got != "HTTP/1.1 200 Connection established\nclosed\n" {
			t.Fatalf("tunnel after the change: %q", got)
		}
		if o, _, _ := sh(t, sb, "curl -sS -m 10 http://api.test/"); !strings.Contains(o, "deny-all") {
			t.Fatalf("new connection after the change: %q", o)
		}
		if !strings.Contains(w.audit.String(), `"decision":"closed"`) {
			t.Fatal("no audit line for the closed tunnel")
		}
	})
	t.Run("PassthroughRefusesPolicies", func(t *testing.T) {
		_ = process.Name
	})
}

// agentConnections counts the established TCP connections held by the
// cordon-agent whose network namespace is netns ("net:[N]").
func agentConnections(t *testing.T, netns string) int {
	t.Helper()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if ns, _ := os.Readlink("/proc/" + p.Name() + "/ns/net"); ns != netns {
			continue
		}
		if comm, _ := os.ReadFile("/proc/" + p.Name() + "/comm"); strings.TrimSpace(string(comm)) != "cordon-agent" {
			continue
		}
		established := map[string]bool{}
		for _, table := range []string{"tcp", "tcp6"} {
			b, _ := os.ReadFile("/proc/" + p.Name() + "/net/" + table)
			for _, row := range strings.Split(string(b), "\n")[1:] {
				if f := strings.Fields(row); len(f) > 9 && f[3] == "01" {
					established["socket:["+f[9]+"]"] = true
				}
			}
		}
		fds, err := os.ReadDir("/proc/" + p.Name() + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); established[l] {
				n++
			}
		}
		return n
	}
	t.Fatalf("no cordon-agent in %s", netns)
	return 0
}
