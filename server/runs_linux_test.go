package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/testnet"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/runs"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// postRun sends a run request to the daemon over TCP as a tenant and
// returns the status and body.
func postRun(t *testing.T, d *daemon, key, body string, hdr ...string) (int, []byte) {
	t.Helper()
	st, b, _ := d.send(t, http.MethodPost, "/v1/runs", strings.NewReader(body), append([]string{"Authorization", "Bearer " + key}, hdr...)...)
	return st, b
}

func runResult(t *testing.T, d *daemon, key, body string) runs.Result {
	t.Helper()
	status, b := postRun(t, d, key, body)
	if status != http.StatusOK {
		t.Fatalf("run: %d %s", status, b)
	}
	var r runs.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return r
}

func requireRuntimes(t *testing.T) {
	testutil.Requires(t, "deno")
	testutil.Requires(t, "python3")
}

// TestRunsLanguages: each language runs end to end through the daemon's
// REST API as a tenant, and its sandbox is gone afterwards.
func TestRunsLanguages(t *testing.T) {
	requireRuntimes(t)
	d := startDaemon(t)
	c, key := d.tenant(t, "runner")
	for _, tc := range []struct {
		name, body, output, stdout string
		logs                       []string
	}{
		{"javascript", `{"source":"export default (x) => { console.log('hi', x); return {sum: 1 + x} }","input":1}`, `{"sum":2}`, "", []string{"log: hi 1"}},
		{"typescript", `{"language":"typescript","source":"export default (x: {n: number}): number => x.n * 2","input":{"n":21}}`, `42`, "", nil},
		{"python", `{"language":"python","source":"import sys\nprint('out', INPUT)\ndata = sys.stdin.read()\n[1 + 1, data]","input":"in","stdin":"from stdin"}`, `[2,"from stdin"]`, "out in\n", nil},
		{"shell", `{"language":"shell","source":"cat; echo; cat in.txt","stdin":"piped","files":[{"path":"in.txt","content":"placed"}]}`, ``, "piped\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runResult(t, d, key, tc.body)
			if !r.OK || string(r.Output) != tc.output || !strings.HasPrefix(r.Stdout, tc.stdout) || r.Reason != "" {
				t.Fatalf("got %+v (output %s), want output %s, stdout %q", r, r.Output, tc.output, tc.stdout)
			}
			if tc.logs != nil && strings.Join(r.Logs, "|") != strings.Join(tc.logs, "|") {
				t.Errorf("logs %q, want %q", r.Logs, tc.logs)
			}
			if r.Sandbox == "" {
				t.Fatal("no sandbox named")
			}
			// It goes once the answer is out.
			deadline := time.Now().Add(20 * time.Second)
			for {
				sb, err := c.Get(t.Context(), r.Sandbox)
				if err != nil || sb.State == api.StateDestroyed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the run's sandbox %s is still there", r.Sandbox)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	// The shell run placed a file in its workspace and read it back.
	r := runResult(t, d, key, `{"language":"shell","source":"cat in.txt","files":[{"path":"in.txt","content":"cGxhY2Vk","encoding":"base64"}]}`)
	if r.Stdout != "placed" {
		t.Errorf("file placed as base64 read back %q", r.Stdout)
	}
	// Below directories it makes, and in another writable directory.
	r = runResult(t, d, key, `{"language":"shell","source":"cat sub/deep/x /tmp/y ./z","files":[{"path":"sub/deep/x","content":"a"},{"path":"/tmp/y","content":"b"},{"path":"./sub/../z","content":"c"}]}`)
	if r.Stdout != "abc" {
		t.Errorf("files placed below directories read back %q (%s)", r.Stdout, r.Stderr)
	}
}

// TestRunsEndings: each way a run ends without a result of its own has
// its reason, and the host holds every deadline.
func TestRunsEndings(t *testing.T) {
	requireRuntimes(t)
	d := startDaemon(t)
	_, key := d.tenant(t, "runner")
	for _, tc := range []struct{ name, body, reason string }{
		{"js timeout", `{"source":"export default () => { for(;;){} }","capabilities":{"net":[],"import":[],"timeoutMs":300}}`, runs.ReasonTimeout},
		{"python timeout", `{"language":"python","source":"while True: pass","capabilities":{"net":[],"import":[],"timeoutMs":300}}`, runs.ReasonTimeout},
		{"shell stops its own clock", `{"language":"shell","source":"kill -STOP $$","capabilities":{"net":[],"import":[],"timeoutMs":300}}`, runs.ReasonTimeout},
		{"js memory", `{"source":"export default () => { const a = []; for(;;) a.push(new Array(1e6).fill(1)) }","capabilities":{"net":[],"import":[],"memoryMb":32,"timeoutMs":20000}}`, runs.ReasonMemory},
		{"python memory", `{"language":"python","source":"x = bytearray(1 << 30)","capabilities":{"net":[],"import":[],"memoryMb":32,"timeoutMs":20000}}`, runs.ReasonMemory},
		{"stderr cap", `{"language":"shell","source":"yes err >&2"}`, runs.ReasonOutput},
		{"js throws", `{"source":"export default () => { throw new Error('boom') }"}`, runs.ReasonError},
		{"no default export", `{"source":"export const x = 1"}`, runs.ReasonError},
		{"python raises", `{"language":"python","source":"raise ValueError('boom')"}`, runs.ReasonError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runResult(t, d, key, tc.body)
			if r.OK || r.Reason != tc.reason {
				t.Fatalf("got ok=%v reason %q error %q (stderr %q), want reason %q", r.OK, r.Reason, r.Error, lastBytes(r.Stderr), tc.reason)
			}
			if tc.reason == runs.ReasonTimeout && (!r.TimedOut || r.Ms > 20_000) {
				t.Errorf("timedOut %v after %d ms", r.TimedOut, r.Ms)
			}
			if tc.reason == runs.ReasonOutput && (!r.StderrTruncated || len(r.Stderr) > runs.MaxStderrBytes) {
				t.Errorf("stderr of %d bytes, truncated %v", len(r.Stderr), r.StderrTruncated)
			}
		})
	}
}

func lastBytes(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

// TestRunsRefusals: a caller's mistakes are 4xx naming the field and its
// range, and a host that is or resolves (through the host's own resolver
// and hosts file) to an address outside the internet is refused before a
// sandbox is taken.
func TestRunsRefusals(t *testing.T) {
	requireRuntimes(t)
	d := startDaemon(t)
	c, key := d.tenant(t, "runner")
	for _, tc := range []struct {
		body   string
		status int
		code   string
		field  string
	}{
		{`{"source":""}`, 400, api.CodeInvalid, "source"},
		{`{"source":"x","language":"ruby"}`, 400, api.CodeInvalid, "language"},
		{`{"source":"x","capabilities":{"net":[],"import":[],"timeoutMs":30001}}`, 400, api.CodeInvalid, "capabilities.timeoutMs"},
		{`{"source":"x","capabilities":{"net":[],"import":[],"memoryMb":15}}`, 400, api.CodeInvalid, "capabilities.memoryMb"},
		{`{"source":"x","capabilities":{"net":["*.example.com"],"import":[]}}`, 400, api.CodeInvalid, "capabilities.net"},
		{`{"source":"x","extra":1}`, 400, api.CodeInvalid, ""},
		{`{"source":"x","capabilities":{"net":["localhost"],"import":[]}}`, 403, "egress_refused", "capabilities"},
		{`{"source":"x","capabilities":{"net":["ip6-localhost:443"],"import":[]}}`, 403, "egress_refused", "capabilities"},
		{`{"source":"x","capabilities":{"net":["10.1.2.3"],"import":[]}}`, 403, "egress_refused", "capabilities"},
		{`{"source":"x","capabilities":{"net":[],"import":["169.254.169.254:80"]}}`, 403, "egress_refused", "capabilities"},
		{`{"source":"x","capabilities":{"net":["name.invalid"],"import":[]}}`, 403, "egress_refused", "capabilities"},
		{`{"source":"x","bindings":{"url":"http://127.0.0.1:1/rpc","token":"t"}}`, 403, "bindings_refused", "bindings.url"},
		{`{"source":"` + strings.Repeat("x", runs.MaxRequestBodyBytes) + `"}`, 413, api.CodeTooLarge, ""},
		// A file goes in the workspace (or a writable directory), as a
		// file: a caller's path that leaves it, names a directory, or
		// crosses another file of the run is the caller's mistake, told
		// before any sandbox is taken.
		{`{"source":"x","files":[{"path":"../../etc/cron.d/x","content":"a"}]}`, 400, api.CodeInvalid, "files[0].path"},
		{`{"source":"x","files":[{"path":"a/../../x","content":"a"}]}`, 400, api.CodeInvalid, "files[0].path"},
		{`{"source":"x","files":[{"path":"/etc/x","content":"a"}]}`, 400, api.CodeInvalid, "files[0].path"},
		{`{"source":"x","files":[{"path":"/workspacex/y","content":"a"}]}`, 400, api.CodeInvalid, "files[0].path"},
		{`{"source":"x","files":[{"path":".","content":"a"}]}`, 400, api.CodeInvalid, "files[0].path"},
		{`{"source":"x","files":[{"path":"/tmp","content":"a"}]}`, 400, api.CodeInvalid, "files[0].path"},
		{`{"source":"x","files":[{"path":"dir/","content":"a"}]}`, 400, api.CodeInvalid, "files[0].path"},
		{`{"source":"x","files":[{"path":"a","content":"a"},{"path":"a/b","content":"b"}]}`, 400, api.CodeInvalid, "files[1].path"},
		{`{"source":"x","files":[{"path":"a/b/c","content":"a"},{"path":"/workspace/a/b","content":"b"}]}`, 400, api.CodeInvalid, "files[1].path"},
	} {
		status, b := postRun(t, d, key, tc.body)
		var e struct{ Error, Message, Field string }
		_ = json.Unmarshal(b, &e)
		if status != tc.status || e.Error != tc.code || e.Field != tc.field {
			t.Errorf("%.80s: got %d %s", tc.body, status, b)
		}
	}
	// None of them took a sandbox (the list holds every sandbox the
	// tenant had, destroyed ones too).
	if l, err := c.List(t.Context(), sclientAll()); err != nil || len(l) != 0 {
		t.Errorf("sandboxes after refusals: %v %v", l, err)
	}
}

// TestRunsAttacks: what a run's code may reach is exactly what its
// capabilities say, on the sandbox's egress boundary.
func TestRunsAttacks(t *testing.T) {
	requireRuntimes(t)
	d := startDaemon(t)
	_, key := d.tenant(t, "runner")
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") }))
	defer host.Close()
	for _, tc := range []struct{ name, body, want string }{
		// Deno without --allow-net refuses the fetch itself.
		{"js without net", `{"source":"export default async () => (await fetch('` + host.URL + `')).text()"}`, "NotCapable"},
		// Deno allowed one host is not allowed another.
		{"js other host", `{"source":"export default async () => (await fetch('` + host.URL + `')).text()","capabilities":{"net":["203.0.113.7:80"],"import":[]}}`, "NotCapable"},
		// Python has no runtime flags: the sandbox's egress proxy refuses.
		{"python other host", `{"language":"python","source":"import urllib.request\nurllib.request.urlopen('http://198.51.100.9/', timeout=5).read()","capabilities":{"net":["203.0.113.7:80"],"import":[]}}`, "403"},
		{"python loopback", `{"language":"python","source":"import urllib.request\nurllib.request.urlopen('` + host.URL + `', timeout=5).read()"}`, "URLError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runResult(t, d, key, tc.body)
			if r.OK || !strings.Contains(r.Error+r.Stderr, tc.want) {
				t.Fatalf("got ok=%v error %q stderr %q, want a refusal with %q", r.OK, r.Error, lastBytes(r.Stderr), tc.want)
			}
		})
	}
}

// TestRunsStream: with NDJSON the output comes as it is printed, then the
// result.
func TestRunsStream(t *testing.T) {
	requireRuntimes(t)
	d := startDaemon(t)
	_, key := d.tenant(t, "runner")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+d.tcp+"/v1/runs",
		strings.NewReader(`{"language":"python","source":"import time\nprint('one', flush=True)\ntime.sleep(0.3)\nprint('two')\n3"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	var last runs.Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		last = runs.Event{}
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatal(err)
		}
		types = append(types, last.Type+":"+strings.TrimSpace(last.Data))
	}
	if got := strings.Join(types, ","); got != "stdout:one,stdout:two,result:" || last.Result == nil || string(last.Result.Output) != "3" {
		t.Fatalf("events %s, result %+v", got, last.Result)
	}
}

// TestRunsCancelled: a caller that goes away ends its run and its
// sandbox.
func TestRunsCancelled(t *testing.T) {
	requireRuntimes(t)
	d := startDaemon(t)
	c, key := d.tenant(t, "runner")
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.tcp+"/v1/runs",
		strings.NewReader(`{"language":"shell","source":"echo started; sleep 60","capabilities":{"net":[],"import":[],"timeoutMs":30000}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.Contains(line, "started") {
		t.Fatalf("first event %q", line)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := c.List(t.Context(), sclientAll())
		if err == nil && live(l) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled run's sandbox is still there: %+v %v", l, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRunsBindings: a run's binding calls reach the configured broker, and
// only it, with the run's token; the brokered fetch reaches exactly the
// run's net hosts, screened at every hop.
func TestRunsBindings(t *testing.T) {
	requireRuntimes(t)
	var calls atomic.Int32
	var gotToken, gotBody atomic.Value
	broker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		gotToken.Store(r.Header.Get(runs.BindingsTokenHeader))
		b, _ := io.ReadAll(r.Body)
		gotBody.Store(string(b))
		if strings.Contains(string(b), "secret") {
			fmt.Fprint(w, `{"ok":false,"error":{"code":"forbidden","message":"tenant 42 may not read secret (policy p-7)"}}`)
			return
		}
		fmt.Fprint(w, `{"ok":true,"value":[{"id":1}]}`)
	}))
	defer broker.Close()
	brokerURL := broker.URL + "/sandbox/rpc?channel=canonical"

	// A network of documentation addresses where the fetch's target lives;
	// the run's fetch is made from there.
	n := testnet.New(t, "203.0.113.7", "203.0.113.8")
	sink := atomic.Int32{}
	for _, addr := range []string{"203.0.113.7:80", "203.0.113.8:80"} {
		ln := n.Listen(t, addr)
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Host == "203.0.113.8" || strings.HasPrefix(r.Host, "203.0.113.8:"):
				sink.Add(1)
				fmt.Fprint(w, "should not be reached")
			case r.URL.Path == "/hop":
				http.Redirect(w, r, "http://203.0.113.8/", http.StatusFound)
			case r.URL.Path == "/loop":
				http.Redirect(w, r, "http://127.0.0.1:1/", http.StatusFound)
			default:
				if r.Header.Get(runs.BindingsTokenHeader) != "" {
					sink.Add(100)
				}
				fmt.Fprintf(w, "hello %s", r.Header.Get("X-Ask"))
			}
		}))
	}
	proxy := egress.New(egress.Config{NetNS: n.Path})
	d := startDaemon(t, func(c *server.Config) {
		c.Runs = runs.NewRunner(runs.Config{BrokerURL: brokerURL, Egress: proxy})
	})
	_, key := d.tenant(t, "runner")
	bind := `"bindings":{"url":"` + brokerURL + `","token":"tok-123"}`
	caps := `"capabilities":{"net":["203.0.113.7:80"],"import":[],"timeoutMs":20000,"memoryMb":128}`

	r := runResult(t, d, key, `{"source":"export default async () => questpie.collections.posts.find({where: {a: 1}})",`+bind+`}`)
	if !r.OK || string(r.Output) != `[{"id":1}]` || gotToken.Load() != "tok-123" || !strings.Contains(gotBody.Load().(string), `"method":"collections.posts.find"`) {
		t.Fatalf("broker call: %+v (output %s), token %v, body %v", r, r.Output, gotToken.Load(), gotBody.Load())
	}
	// A refusal from the broker ends the run, and the broker's own words
	// stay with the host.
	r = runResult(t, d, key, `{"source":"export default async () => { await questpie.files.read({path: 'secret'}); return 'went on' }",`+bind+`}`)
	if r.OK || r.Reason != runs.ReasonBindings || r.Error != "sandbox binding operation forbidden" {
		t.Fatalf("broker refusal: %+v", r)
	}
	// The fetch: allowed host, with the guest's header; never the token.
	r = runResult(t, d, key, `{"source":"export default async () => (await fetch('http://203.0.113.7/', {headers: {'X-Ask': 'there'}})).text()",`+bind+`,`+caps+`}`)
	if !r.OK || string(r.Output) != `"hello there"` {
		t.Fatalf("brokered fetch: %+v (output %s)", r, r.Output)
	}
	for _, tc := range []struct{ name, url string }{
		{"another host", "http://203.0.113.8/"},
		{"a redirect to another host", "http://203.0.113.7/hop"},
		{"a redirect to loopback", "http://203.0.113.7/loop"},
		{"loopback", broker.URL + "/"},
		{"metadata", "http://169.254.169.254/latest/meta-data/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			r := runResult(t, d, key, `{"source":"export default async () => { try { await fetch('`+tc.url+`'); return 'fetched' } catch (e) { return String(e) } }",`+bind+`,`+caps+`}`)
			if !r.OK || !strings.Contains(string(r.Output), "cordon egress refused") {
				t.Fatalf("fetch of %s: %+v (output %s)", tc.url, r, r.Output)
			}
			if calls.Load() != before {
				t.Error("the fetch reached the broker")
			}
		})
	}
	if sink.Load() != 0 {
		t.Errorf("a refused host was reached, or the token was sent to a fetch target (%d)", sink.Load())
	}
	// With bindings, the guest has no network of its own even to its net
	// hosts: Deno runs with none.
	r = runResult(t, d, key, `{"source":"export default async () => { try { await Deno.connect({hostname: '203.0.113.7', port: 80}); return 'connected' } catch (e) { return e.name } }",`+bind+`,`+caps+`}`)
	if !r.OK || string(r.Output) != `"NotCapable"` {
		t.Fatalf("direct connect with bindings: %+v (output %s)", r, r.Output)
	}
	// Too many calls end the run.
	r = runResult(t, d, key, `{"source":"export default async () => { for (let i = 0; i < 300; i++) await questpie.collections.posts.find({}) }",`+bind+`}`)
	if r.OK || r.Reason != runs.ReasonOutput {
		t.Fatalf("%d calls: %+v", runs.MaxRPCCount+44, r)
	}
}

func live(l []api.Sandbox) int {
	n := 0
	for _, s := range l {
		if s.State != api.StateDestroyed {
			n++
		}
	}
	return n
}

func sclientAll() sclient.ListOptions { return sclient.ListOptions{} }

// TestRunsQuestpieCompatible drives POST /run of `cordon run-server` with
// requests shaped exactly as @questpie/sandbox's server receives them:
// its headers, its mode field, and a workload admission sealed as a
// questpie host seals it (WebCrypto HMAC in node).
func TestRunsQuestpieCompatible(t *testing.T) {
	requireRuntimes(t)
	testutil.Requires(t, "node")
	d := startDaemon(t)
	const (
		hostSecret     = "questpie-sandbox-host-service-key-32-bytes-minimum"
		workloadSecret = "questpie-sandbox-workload-admission-secret-32-bytes"
		instance       = "sandbox_instance_test"
	)
	runToken := "run-server-token-0123456789abcdef01234567"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(runToken), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.BuildCordon(t), "run-server", "--host", "unix://"+d.sock, "--listen", "127.0.0.1:0", "--token-file", tokenFile)
	cmd.Env = append(cmd.Environ(), "SANDBOX_HOST_ADMISSION_SECRET="+hostSecret, "SANDBOX_WORKLOAD_ADMISSION_SECRET="+workloadSecret,
		"SANDBOX_WORKLOAD_ADMISSION_KEY_ID=sandbox-workload-v1", "SANDBOX_INSTANCE_ID="+instance)
	out, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	var url string
	audits := make(chan string, 64)
	if lines.Scan() {
		var port int
		fmt.Sscanf(lines.Text(), "cordon run-server listening on :%d", &port)
		url = fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	if url == "" {
		t.Fatalf("run-server did not start: %s", stderr.String())
	}
	go func() {
		for lines.Scan() {
			audits <- lines.Text()
		}
	}()
	post := func(body string, hdr map[string]string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, url+"/run", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	// Its /v1/runs takes the server's token, and nothing else.
	for _, auth := range []string{"", "Bearer wrong-token", "Bearer " + runToken} {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/runs", strings.NewReader(`{"language":"shell","source":"echo via run-server"}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var r runs.Result
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		want := http.StatusUnauthorized
		if auth == "Bearer "+runToken {
			want = http.StatusOK
		}
		if resp.StatusCode != want || (want == http.StatusOK && r.Stdout != "via run-server\n") {
			t.Errorf("/v1/runs with %q: %d %+v", auth, resp.StatusCode, r)
		}
	}
	host := map[string]string{"x-questpie-sandbox-host-admission": hostSecret}
	hostRun := `{"mode":"host","source":"export default async (input: {n: number}) => { console.log('got', input.n); return input.n + 1 }","input":{"n":41},"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128},"secrets":{}}`
	status, m := post(hostRun, host)
	if status != 200 || m["ok"] != true || m["output"] != float64(42) || fmt.Sprint(m["logs"]) != "[log: got 41]" {
		t.Fatalf("host run: %d %v", status, m)
	}
	for k := range m {
		if k != "ok" && k != "output" && k != "logs" && k != "ms" {
			t.Errorf("the answer has key %q the questpie result does not", k)
		}
	}
	// The seed's refusals, word for word.
	for _, tc := range []struct {
		body   string
		hdr    map[string]string
		status int
		err    string
	}{
		{"{ this is : not json ]", nil, 400, "invalid JSON body"},
		{`{"mode":"host","capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128}}`, host, 400, "invalid sandbox request"},
		{`{"mode":"host","source":"export default async () => 1","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":"5000","memoryMb":128}}`, host, 400, "invalid sandbox request"},
		{`{"mode":"host","source":"export default async () => 1","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128},"unexpected":true}`, host, 400, "invalid sandbox request"},
		{`{"source":"export default async () => 1","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128}}`, nil, 403, runs.DenialMessage},
		{`{"mode":"host","source":"export default async () => 1","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128}}`, nil, 403, runs.DenialMessage},
		{`{"mode":"unknown","source":"export default async () => 1","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128}}`, host, 403, runs.DenialMessage},
		{`{"mode":"host","source":"export default async () => 1","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128},"bindings":{"url":"http://127.0.0.1:9/rpc","token":"t"}}`, host, 200, "bindings rejected: this server has no broker URL configured (bindings fail closed)"},
		{`{"mode":"host","source":"export default async () => 1","input":null,"capabilities":{"net":["localhost:443"],"import":[],"timeoutMs":5000,"memoryMb":128}}`, host, 200, `egress blocked: host "localhost:443": a loopback or mDNS name`},
		{`{"mode":"host","source":"export default () => { for(;;){} }","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":200,"memoryMb":128}}`, host, 200, "wall-time exceeded (200ms)"},
	} {
		status, m := post(tc.body, tc.hdr)
		if status != tc.status || m["ok"] != false || m["error"] != tc.err {
			t.Errorf("%.60s: got %d %v, want %d %q", tc.body, status, m, tc.status, tc.err)
		}
	}
	// A workload admission, sealed in node as the questpie host seals it.
	seal := func(body, instanceID string, ttl time.Duration) string {
		script := `
const [secret, keyId, instance, ttl, body] = process.argv.slice(1);
const enc = new TextEncoder();
const b64 = (u) => Buffer.from(u).toString("base64").replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
const digest = Buffer.from(await crypto.subtle.digest("SHA-256", enc.encode(body))).toString("hex");
const payload = { kind: "sandbox_workload_admission", version: 1, admissionId: crypto.randomUUID(), supervisorInstanceId: instance,
	expiresAt: new Date(Date.now() + Number(ttl)).toISOString(), requestSha256: digest };
const signed = "qpsw1." + b64(enc.encode(keyId)) + "." + b64(enc.encode(JSON.stringify(payload)));
const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
console.log(signed + "." + b64(new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(signed)))));`
		out, err := exec.Command("node", "--input-type=module", "-e", script, workloadSecret, "sandbox-workload-v1", instanceID, fmt.Sprint(ttl.Milliseconds()), body).Output()
		if err != nil {
			t.Fatalf("node: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	workload := `{"mode":"workload","source":"export default async () => 42","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128},"secrets":{}}`
	adm := seal(workload, instance, 4*time.Second)
	status, m = post(workload, map[string]string{"x-questpie-workload-admission": adm})
	if status != 200 || m["ok"] != true || m["output"] != float64(42) {
		t.Fatalf("admitted workload: %d %v", status, m)
	}
	wantAudit(t, audits, `"decision":"allowed","event":"questpie.sandbox.workload_admission","reason":"authorized","supervisorInstanceId":"sandbox_instance_test"`)
	for _, tc := range []struct{ name, body, adm, reason string }{
		{"replayed", workload, adm, "replay"},
		{"widened", strings.Replace(workload, `"net":[]`, `"net":["attacker.example:443"]`, 1), seal(workload, instance, 4*time.Second), "body_mismatch"},
		{"forged", workload, "forged", "invalid"},
		{"expired", workload, seal(workload, instance, -time.Millisecond), "expired"},
		{"too long", workload, seal(workload, instance, time.Minute), "expired"},
		{"another instance", workload, seal(workload, "sandbox_instance_other", 4*time.Second), "wrong_instance"},
		{"missing", workload, "", "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.adm != "" {
				hdr["x-questpie-workload-admission"] = tc.adm
			}
			status, m := post(tc.body, hdr)
			if status != 403 || m["error"] != runs.DenialMessage {
				t.Fatalf("got %d %v", status, m)
			}
			wantAudit(t, audits, `"decision":"denied","event":"questpie.sandbox.workload_admission","reason":"`+tc.reason+`"`)
		})
	}
	// A workload's failure does not tell it the host's details.
	bad := `{"mode":"workload","source":"this is not valid TypeScript }","input":null,"capabilities":{"net":[],"import":[],"timeoutMs":5000,"memoryMb":128},"secrets":{}}`
	status, m = post(bad, map[string]string{"x-questpie-workload-admission": seal(bad, instance, 4*time.Second)})
	if status != 200 || m["ok"] != false || m["error"] != "sandbox execution failed" {
		t.Fatalf("failed workload: %d %v", status, m)
	}
}

func wantAudit(t *testing.T, audits <-chan string, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-audits:
			if strings.Contains(line, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no audit line with %s", want)
		}
	}
}

// TestRunsOtherTiers: runs on the container tier work as on the process
// tier; a tier that cannot hold a run's memory limit refuses with the
// reason (422), never runs it unbounded.
func TestRunsOtherTiers(t *testing.T) {
	requireRuntimes(t)
	testutil.Requires(t, "crun")
	d := startDaemon(t)
	dir := filepath.Join(d.processDir, "oci")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	d.container = oci.New(oci.Config{Runtime: "crun", AgentPath: testutil.BuildAgent(t), StateDir: dir, Detached: true})
	d.stop(t, true)
	d.start(t, func(c *server.Config) { c.Runs = runs.NewRunner(runs.Config{Tier: "container"}) })
	_, key := d.tenant(t, "runner")
	for _, body := range []string{`{"source":"export default () => 1 + 1"}`, `{"language":"python","source":"1+1"}`} {
		r := runResult(t, d, key, body)
		if !r.OK || string(r.Output) != "2" {
			t.Errorf("%s on the container tier: %+v", body, r)
		}
	}
	r := runResult(t, d, key, `{"language":"shell","source":"cat /proc/1/comm"}`)
	if r.Stdout != "cordon-agent\n" {
		t.Errorf("not in a container: %q", r.Stdout)
	}
	d.stop(t, true)
	d.start(t, func(c *server.Config) { c.Runs = runs.NewRunner(runs.Config{Tier: "passthrough-none"}) })
	_, key = d.tenant(t, "runner2")
	if status, b := postRun(t, d, key, `{"source":"export default () => 1"}`); status != http.StatusBadRequest && status != http.StatusUnprocessableEntity && status != http.StatusNotFound {
		t.Errorf("a run on a tier the daemon has not: %d %s", status, b)
	}
}

// TestRunsDirectNet: without bindings, a run reaches exactly its net hosts
// itself, through the sandbox's egress proxy (here dialing from a test
// network of documentation addresses).
func TestRunsDirectNet(t *testing.T) {
	requireRuntimes(t)
	n := testnet.New(t, "203.0.113.7", "203.0.113.8")
	for _, addr := range []string{"203.0.113.7:80", "203.0.113.8:80"} {
		ln := n.Listen(t, addr)
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", r.Host) }))
	}
	d := startDaemonIn(t, n)
	_, key := d.tenant(t, "runner")
	caps := `"capabilities":{"net":["203.0.113.7:80"],"import":[],"timeoutMs":20000}`
	for _, tc := range []struct{ name, body, want string }{
		{"js allowed", `{"source":"export default async () => (await fetch('http://203.0.113.7/')).text()",` + caps + `}`, `"hello from 203.0.113.7"`},
		{"python allowed", `{"language":"python","source":"import urllib.request\nurllib.request.urlopen('http://203.0.113.7/', timeout=10).read().decode()",` + caps + `}`, `"hello from 203.0.113.7"`},
		{"python other host", `{"language":"python","source":"import urllib.request\ntry:\n  urllib.request.urlopen('http://203.0.113.8/', timeout=10).read()\n  r = 'reached'\nexcept Exception as e:\n  r = str(e)\nr",` + caps + `}`, `"HTTP Error 403: Forbidden"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runResult(t, d, key, tc.body)
			if !r.OK || string(r.Output) != tc.want {
				t.Fatalf("got %+v (output %s), want output %s", r, r.Output, tc.want)
			}
		})
	}
}
