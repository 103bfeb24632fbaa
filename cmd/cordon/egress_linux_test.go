package main_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testnet"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestRunEgressHostsFile: a name allowed with --allow that the host
// resolves from its hosts file (which Go's resolver answers in the
// IPv4-mapped form) is reached through the real resolver; an HTTPS
// refusal, whose reason a CONNECT client never shows, is said on cordon's
// stderr as it happens; and an allowed name that does not resolve is
// refused without suggesting --allow. cordon runs in a test network
// namespace, with a hosts file of its own in a private mount namespace.
// On each tier: the process, container and docker tiers hand each
// connection to the proxy (wire.EgressPass), gVisor's bridge carries the
// bytes.
func TestRunEgressHostsFile(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "unshare")
	testutil.Requires(t, "nsenter")
	n := testnet.New(t, "203.0.113.7")
	ln := n.Listen(t, "203.0.113.7:8080")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(bytes.Repeat([]byte("0123456789abcdef"), 4<<20)) // 64 MiB
			return
		}
		io.WriteString(w, "hello from "+r.Host+"\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n203.0.113.7 allowed.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tier, runtime string }{{"process", ""}, {"container", "crun"}, {"gvisor", "/usr/local/lib/cordon/runsc"}, {"docker", ""}} {
		t.Run(c.tier, func(t *testing.T) {
			if c.runtime != "" {
				testutil.Requires(t, c.runtime)
			}
			env := os.Environ()
			if c.tier == "docker" {
				env = append(env, dockerEnv(t)...)
			}
			run := func(args ...string) (string, string, int) {
				t.Helper()
				script := `mount --bind "$1" /etc/hosts && shift && exec nsenter --net="$1" -- "$2" run "${@:3}"`
				cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "bash", "-c", script, "cordon-test", hosts, n.Path, buildCLI(t), "--tier", c.tier}, args...)...)
				cmd.Env = env
				var o, e bytes.Buffer
				cmd.Stdout, cmd.Stderr = &o, &e
				_ = cmd.Run()
				return o.String(), e.String(), cmd.ProcessState.ExitCode()
			}
			out, errOut, code := run("--allow", "allowed.test:8080", "--", "curl", "-sS", "http://allowed.test:8080/")
			if code != 0 || out != "hello from allowed.test:8080\n" {
				t.Fatalf("allowed name from the hosts file: exit %d, %q, %s", code, out, errOut)
			}
			// A tunnel, and 64 MiB down it, whole.
			out, errOut, code = run("--allow", "allowed.test:8080", "--", "sh", "-c", "curl -sS -p http://allowed.test:8080/big | sha256sum")
			if want := fmt.Sprintf("%x  -\n", sha256.Sum256(bytes.Repeat([]byte("0123456789abcdef"), 4<<20))); code != 0 || out != want {
				t.Fatalf("64 MiB through a CONNECT tunnel: exit %d, %q (want %q), %s", code, out, want, errOut)
			}
			out, errOut, code = run("--allow", "allowed.test:8080", "--", "curl", "-sS", "https://other.test/")
			if code == 0 || !strings.Contains(errOut, "cordon: egress refused other.test:443: no rule allows this host and port; allow it with --allow other.test:443\n") {
				t.Fatalf("refused HTTPS: exit %d, %q, %s", code, out, errOut)
			}
			out, errOut, _ = run("--allow", "missing.test:8080", "--", "curl", "-sS", "http://missing.test:8080/")
			if !strings.Contains(errOut, "cordon: egress refused missing.test:8080: the name does not resolve\n") || strings.Contains(out+errOut, "--allow") {
				t.Fatalf("an allowed name that does not resolve: %q, %s", out, errOut)
			}
			// Node.js's fetch and http take the proxy from the environment
			// only when NODE_USE_ENV_PROXY is set, which commands are given
			// (otherwise they had no route at all). Its binary is the host's,
			// which the process tier's root holds.
			if c.tier == "process" {
				node := testutil.Requires(t, nodeWithEnvProxy)[0]
				script := `fetch("http://allowed.test:8080/").then(r => r.text()).then(t => {
  process.stdout.write("fetch: " + t);
  require("http").get("http://allowed.test:8080/", r => { r.setEncoding("utf8"); r.on("data", d => process.stdout.write("http: " + d)); }).on("error", e => console.log("http:", e.code));
}, e => console.log("fetch:", e.cause ? e.cause.code : e.message))`
				want := "fetch: hello from allowed.test:8080\nhttp: hello from allowed.test:8080\n"
				if out, errOut, code := run("--allow", "allowed.test:8080", "--", node, "-e", script); code != 0 || out != want {
					t.Errorf("node through the proxy: exit %d, %q, %s", code, out, errOut)
				}
			}
		})
	}
}

// nodeWithEnvProxy is a Node.js new enough to take its proxy from the
// environment (scripts/setup.sh installs it; Debian's is older).
const nodeWithEnvProxy = "/usr/local/lib/cordon/node-24.22.3/node"

// TestRunEgressNamesEscaped: a workload that asks the proxy for host
// names made to act on a terminal (a C1 control, which some terminals take
// as an escape sequence; a bidirectional override, which reorders what is
// shown; a Host header carrying one) gets its refusals, and cordon's
// stderr says them with those characters escaped, each on its line.
func TestRunEgressNamesEscaped(t *testing.T) {
	testutil.RequiresRoot(t)
	script := `
import socket
def ask(head):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(head)
    print(s.recv(100).split(b"\r\n")[0].decode())
ask(b"CONNECT \xc2\x9b2Jx.test:443 HTTP/1.1\r\nHost: x\r\n\r\n")
ask(b"CONNECT \xe2\x80\xaetset.live:443 HTTP/1.1\r\nHost: x\r\n\r\n")
ask(b"GET http://a.test/ HTTP/1.1\r\nHost: \xe2\x80\xaeb.test\r\n\r\n")
`
	out, errOut, code := cordon(t, "run", "--allow", "a.test", "--", "python3", "-c", script)
	if code != 0 || out != strings.Repeat("HTTP/1.1 403 Forbidden\n", 3) {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
	if strings.ContainsAny(errOut, "\u009b\u202e") {
		t.Fatalf("raw characters reached cordon's stderr: %q", errOut)
	}
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `\u009b2Jx.test`) || !strings.Contains(lines[1], `\u202etset.live`) || !strings.Contains(lines[2], `\u202eb.test`) {
		t.Fatalf("refusals on stderr: %q", errOut)
	}
}

// TestRunEgressBroadRule: an address rule reaches a special address only by
// naming it. With --allow 0.0.0.0/0:PORT (any address, as a firewall rule
// says it), a sandbox asked the proxy for the host's own loopback and got
// the service listening there; it now gets 403, and cordon says why. The
// positive control names the address and reaches the same service.
func TestRunEgressBroadRule(t *testing.T) {
	testutil.RequiresRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host loopback") })}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	get := func(rule string) (string, string) {
		out, errOut, _ := cordon(t, "run", "--allow", fmt.Sprintf("%s:%d", rule, port), "--", "curl", "-s", "--noproxy", "", "-x", "http://127.0.0.1:3128", "-o", "/dev/null", "-w", "%{http_code}", url)
		return out, errOut
	}
	if out, errOut := get("0.0.0.0/0"); out != "403" || !strings.Contains(errOut, "127.0.0.1") {
		t.Errorf("--allow 0.0.0.0/0 to the host's loopback: %q %s", out, errOut)
	}
	if out, errOut := get("127.0.0.1"); out != "200" {
		t.Errorf("--allow 127.0.0.1, the positive control: %q %s", out, errOut)
	}
}
