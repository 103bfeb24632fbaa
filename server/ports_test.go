package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestExposedPort: a detached python http.server in a process-tier sandbox
// (no network interface) is reached with a plain HTTP client at the port's
// URL on the daemon's TCP listener, with no API key; a wrong or missing
// token, a revoked port, or another tenant asking is refused.
func TestExposedPort(t *testing.T) {
	d := startDaemon(t)
	alice, _ := d.tenant(t, "alice")
	bob, _ := d.tenant(t, "bob")
	ctx := t.Context()
	sb := create(t, alice, api.CreateRequest{})
	sh(t, alice, sb.ID, "mkdir -p site && echo hello-port > site/index.html")
	ac := alice.Agent(sb.ID)
	if _, err := ac.StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-m", "http.server", "8000", "--bind", "127.0.0.1"}, Cwd: "site"}); err != nil {
		t.Fatal(err)
	}
	p, err := alice.ExposePort(ctx, sb.ID, 8000)
	if err != nil || p.Port != 8000 || !strings.HasPrefix(p.URL, "/v1/ports/") {
		t.Fatalf("expose: %+v %v", p, err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + d.tcp + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var status int
	var body string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if status, body = get(p.URL + "index.html"); status == 200 && body == "hello-port\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the port's URL: %d %q", status, body)
		}
	}
	// Another tenant neither sees nor exposes alice's ports.
	if _, err := bob.Ports(ctx, sb.ID); err == nil {
		t.Error("bob listed alice's ports")
	}
	if _, err := bob.ExposePort(ctx, sb.ID, 8000); err == nil {
		t.Error("bob exposed alice's port")
	}
	// A wrong token, or none, is a missing page.
	if st, _ := get("/v1/ports/pt_" + strings.Repeat("0", 48) + "/index.html"); st != 404 {
		t.Errorf("a wrong token: %d", st)
	}
	if st, _ := get("/v1/ports//index.html"); st == 200 {
		t.Errorf("no token: %d", st)
	}
	// Exposing again answers the same URL; out of range is refused.
	if again, err := alice.ExposePort(ctx, sb.ID, 8000); err != nil || again.URL != p.URL {
		t.Errorf("exposed again: %+v %v", again, err)
	}
	if _, err := alice.ExposePort(ctx, sb.ID, 70000); err == nil {
		t.Error("port 70000 was exposed")
	}
	// A port nobody listens on answers 502 through its URL.
	q, err := alice.ExposePort(ctx, sb.ID, 8001)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := get(q.URL); st != http.StatusBadGateway {
		t.Errorf("a port nobody listens on: %d", st)
	}
	// An upgraded connection (what a WebSocket is) passes through the
	// port's URL: a server inside that switches protocols and then echoes
	// what it reads, upper-cased.
	if _, err := ac.StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8002)); s.listen(4)
while True:
    c, _ = s.accept(); head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    if b"upgrade: echo" in head.lower():
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        while True:
            b = c.recv(4096)
            if not b: break
            c.sendall(b.upper())
    c.close()
`}}); err != nil {
		t.Fatal(err)
	}
	up, err := alice.ExposePort(ctx, sb.ID, 8002)
	if err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	var br *bufio.Reader
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if conn, err = net.Dial("tcp", d.tcp); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", up.URL)
		br = bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no upgrade through the port's URL: %v %+v", err, resp)
		}
	}
	defer conn.Close()
	io.WriteString(conn, "upgraded\n")
	if line, err := br.ReadString('\n'); err != nil || line != "UPGRADED\n" {
		t.Fatalf("through the upgraded connection: %q %v", line, err)
	}
	// Revoked, the URL is gone.
	if err := alice.RevokePort(ctx, sb.ID, 8000); err != nil {
		t.Fatal(err)
	}
	if st, _ := get(p.URL + "index.html"); st != 404 {
		t.Errorf("a revoked port: %d", st)
	}
}

// TestExposedPortOrigins: with a ports URL, a port's URL is its own host
// below the URL's domain, where every path (an API route's included) is
// the program's, and a host below the domain that names no port is 404;
// a browser's navigation to the path URL is sent there, path and query
// kept. What the program answers cannot reach past its port: no cookie
// for the whole domain, on the daemon's origin none for another path, no
// service worker scope above its own, no clearing of the browser's data,
// and there its pages run sandboxed.
func TestExposedPortOrigins(t *testing.T) {
	d := startDaemon(t, func(c *server.Config) { c.PortsURL = "http://*.Ports.test:8080" })
	alice, _ := d.tenant(t, "alice")
	ctx := t.Context()
	sb := create(t, alice, api.CreateRequest{})
	if _, err := alice.Agent(sb.ID).StartSession(ctx, wire.SessionRequest{Command: "python3", Args: []string{"-c", `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Service-Worker-Allowed", "/")
        self.send_header("Clear-Site-Data", '"*"')
        self.send_header("Set-Cookie", "a=1; Domain=ports.test; Path=/; HttpOnly")
        self.send_header("Set-Cookie", "b=2;path=/app;domain=.ports.test")
        self.send_header("Set-Cookie", "c=3")
        self.end_headers()
        self.wfile.write(("%s %s%s" % (self.path, self.headers.get("Host"), " " + self.headers["Authorization"] if self.headers.get("Authorization") else "")).encode())
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
`}}); err != nil {
		t.Fatal(err)
	}
	p, err := alice.ExposePort(ctx, sb.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	label := strings.Replace(p.Token, "_", "-", 1)
	if p.OriginURL != "http://"+label+".ports.test:8080/" || p.URL != "/v1/ports/"+p.Token+"/" {
		t.Fatalf("the port's URLs: %+v", p)
	}
	get := func(host, path string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+d.tcp+path, nil)
		req.Host = host
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	body := func(resp *http.Response) string {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// On its own host, an API route's path is the program's.
	var resp *http.Response
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp = get(label+".PORTS.test:8080", "/v1/sandboxes/a%2Fb?x=1", "Authorization", "Bearer app-token"); resp.StatusCode == 200 {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("through the port's host: %d", resp.StatusCode)
		}
	}
	h := resp.Header
	if got := body(resp); got != "/v1/sandboxes/a%2Fb?x=1 "+label+".PORTS.test:8080 Bearer app-token" {
		t.Errorf("the program saw %q", got)
	}
	if h.Get("Service-Worker-Allowed") != "" || h.Get("Clear-Site-Data") != "" || h.Get("Content-Security-Policy") != "" {
		t.Errorf("on its own host: %v", h)
	}
	if got := h.Values("Set-Cookie"); strings.Join(got, "|") != "a=1; Path=/; HttpOnly|b=2;path=/app|c=3" {
		t.Errorf("cookies on its own host: %q", got)
	}
	// Below the domain, a port's host that names no port is a missing
	// page, not the API.
	for _, host := range []string{"pt-" + strings.Repeat("0", 48) + ".ports.test", label + ".x.ports.test", "pt-.ports.test"} {
		if resp := get(host, "/v1/sandboxes"); resp.StatusCode != 404 || !strings.Contains(body(resp), "no such port") {
			t.Errorf("host %s: %d", host, resp.StatusCode)
		}
	}
	// The domain itself, other names below it (the API may share the
	// domain) and other hosts serve the API as before.
	for _, host := range []string{"ports.test:8080", "api.ports.test", "x." + label + ".ports.test", "other.test"} {
		if resp := get(host, "/healthz"); resp.StatusCode != 200 {
			t.Errorf("the API at %s: %d", host, resp.StatusCode)
		}
	}
	// On the daemon's origin, the path URL: cookies held to the port's
	// path, the page sandboxed.
	resp = get(d.tcp, p.URL+"x?y=1", "Authorization", "Bearer cordon_api_key")
	if got := body(resp); got != "/x?y=1 "+d.tcp {
		t.Errorf("through the path URL the program saw %q", got)
	}
	h = resp.Header
	if h.Get("Service-Worker-Allowed") != "" || h.Get("Clear-Site-Data") != "" || !strings.HasPrefix(h.Get("Content-Security-Policy"), "sandbox ") {
		t.Errorf("on the daemon's origin: %v", h)
	}
	prefix := strings.TrimSuffix(p.URL, "/")
	if got := h.Values("Set-Cookie"); strings.Join(got, "|") != "a=1; Path="+prefix+"/; HttpOnly|b=2; Path="+prefix+"/app|c=3" {
		t.Errorf("cookies on the daemon's origin: %q", got)
	}
	// A browser's navigation there goes to the port's own host.
	resp = get(d.tcp, p.URL+"a%2Fb/c?q=1", "Sec-Fetch-Mode", "navigate")
	body(resp)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusTemporaryRedirect || loc != p.OriginURL+"a%2Fb/c?q=1" {
		t.Errorf("a navigation to the path URL: %d %q", resp.StatusCode, loc)
	}
	// Revoked, its host is a missing page.
	if err := alice.RevokePort(ctx, sb.ID, 8000); err != nil {
		t.Fatal(err)
	}
	if resp := get(label+".ports.test", "/"); resp.StatusCode != 404 {
		t.Errorf("a revoked port's host: %d", resp.StatusCode)
	}
}
