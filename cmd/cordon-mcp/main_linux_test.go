package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/mounted"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var mcpBuild sync.Once

// binaries builds cordon and cordon-mcp side by side, as setup.sh lays
// them out, and returns cordon's path.
func binaries(t testing.TB) string {
	cordon := testutil.BuildCordon(t)
	mcpBuild.Do(func() {
		cmd := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(cordon), "cordon-mcp"), "./cmd/cordon-mcp")
		cmd.Dir = testutil.RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build cordon-mcp: %v\n%s", err, out)
		}
	})
	return cordon
}

// outputToEnd reads a background program's stdout with
// read_process_output, piece by piece from where each read ends, until
// the program has ended and nothing more comes.
func (c caller) outputToEnd(sandbox, process string) string {
	c.t.Helper()
	var got string
	var next int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var more struct {
			Stdout string
			Next   int64
			Done   bool
		}
		c.must("read_process_output", map[string]any{"sandbox": sandbox, "process": process, "offset": next}, &more)
		got, next = got+more.Stdout, more.Next
		if more.Done {
			return got
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the program said %q", got)
		}
	}
}

type caller struct {
	t  *testing.T
	cs *mcp.ClientSession
}

// call calls a tool and decodes its structured result into out; it fails
// the test on a protocol error and returns the tool's own error flag and
// text.
func (c caller) call(name string, args map[string]any, out any) (bool, string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 2*time.Minute)
	defer cancel()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	var text strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s: %v: %s", name, err, b)
		}
	}
	return res.IsError, text.String()
}

func (c caller) must(name string, args map[string]any, out any) {
	c.t.Helper()
	if isErr, text := c.call(name, args, out); isErr {
		c.t.Fatalf("%s: %s", name, text)
	}
}

// TestMCPStdio: a real MCP client session (the SDK's) with `cordon mcp` on
// stdio and its private daemon: every tool, the file resource, the
// refusals, a command that times out, and no sandbox left when it ends.
func TestMCPStdio(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "python3", "deno")
	cordon := binaries(t)
	cs := connect(t, exec.Command(cordon, "mcp"))
	defer cs.Close()
	c := caller{t, cs}

	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"create_sandbox", "run_command", "run_code", "read_file", "write_file", "list_files", "start_process", "read_process_output", "write_process_input", "stop_process", "expose_port", "sandbox_usage", "list_sandboxes", "destroy_sandbox"} {
		if !slices.Contains(names, want) {
			t.Errorf("no tool %s in %v", want, names)
		}
	}

	var sb struct{ ID, Tier string }
	c.must("create_sandbox", map[string]any{}, &sb)
	var out struct {
		ExitCode       int
		Stdout, Stderr string
		TimedOut       bool
	}
	c.must("run_command", map[string]any{"sandbox": sb.ID, "command": "echo hi; echo err >&2; id -u; exit 3"}, &out)
	if out.ExitCode != 3 || out.Stdout != "hi\n1000\n" || out.Stderr != "err\n" {
		t.Errorf("run_command: %+v", out)
	}
	c.must("write_file", map[string]any{"sandbox": sb.ID, "path": "notes/a.txt", "content": "written\n"}, nil)
	var file struct{ Content, Encoding string }
	c.must("read_file", map[string]any{"sandbox": sb.ID, "path": "notes/a.txt"}, &file)
	if file.Content != "written\n" || file.Encoding != "utf-8" {
		t.Errorf("read_file: %+v", file)
	}
	c.must("write_file", map[string]any{"sandbox": sb.ID, "path": "bin.dat", "content": "AP8B", "encoding": "base64"}, nil)
	c.must("read_file", map[string]any{"sandbox": sb.ID, "path": "bin.dat"}, &file)
	if file.Content != "AP8B" || file.Encoding != "base64" {
		t.Errorf("read_file of bytes: %+v", file)
	}
	// A file longer than one read, whose read ends inside a character:
	// each read is text, the next one starting on the character.
	c.must("run_command", map[string]any{"sandbox": sb.ID, "command": `python3 -c "open('long.txt', 'w').write('a' * 1048575 + 'é…')"`}, nil)
	var page struct {
		Content, Encoding string
		More              bool
		Next              int64
	}
	c.must("read_file", map[string]any{"sandbox": sb.ID, "path": "long.txt"}, &page)
	if page.Encoding != "utf-8" || page.Content != strings.Repeat("a", 1048575) || !page.More || page.Next != 1048575 {
		t.Errorf("read_file's first page: %s, %d bytes, more %v, next %d", page.Encoding, len(page.Content), page.More, page.Next)
	}
	from := page.Next
	page.More = false // left out when false
	c.must("read_file", map[string]any{"sandbox": sb.ID, "path": "long.txt", "offset": from}, &page)
	if page.Encoding != "utf-8" || page.Content != "é…" || page.More || page.Next != 1048580 {
		t.Errorf("read_file's second page: %s, %d bytes, more %v, next %d", page.Encoding, len(page.Content), page.More, page.Next)
	}
	// A program's output read while a character of it is half written
	// is read whole once the rest comes.
	var split struct{ Process string }
	c.must("start_process", map[string]any{"sandbox": sb.ID, "command": `printf 'x\303'; sleep 1; printf '\251y\n'`}, &split)
	got := c.outputToEnd(sb.ID, split.Process)
	if got != "xéy\n" {
		t.Errorf("read_process_output, read piece by piece: %q", got)
	}
	// So is one whose program ended at once, leaving a child to finish
	// the character and the output.
	c.must("start_process", map[string]any{"sandbox": sb.ID, "command": `printf 'x\303'; (sleep 1; printf '\251y\n') &`}, &split)
	if got := c.outputToEnd(sb.ID, split.Process); got != "xéy\n" {
		t.Errorf("read_process_output of a program that left a child writing: %q", got)
	}

	// A program given a timeout is ended at it, and says so.
	var slow struct{ Process string }
	c.must("start_process", map[string]any{"sandbox": sb.ID, "command": "echo begun; sleep 60", "timeoutMs": 500}, &slow)
	if got := c.outputToEnd(sb.ID, slow.Process); got != "begun\n" {
		t.Errorf("a program with a timeout said %q", got)
	}
	var ended struct {
		Running  bool
		TimedOut bool
	}
	c.must("read_process_output", map[string]any{"sandbox": sb.ID, "process": slow.Process}, &ended)
	if ended.Running || !ended.TimedOut {
		t.Errorf("a program past its timeout: %+v", ended)
	}

	// An interpreter fed line by line through its standard input.
	var repl struct{ Process string }
	c.must("start_process", map[string]any{"sandbox": sb.ID, "command": "python3 -u -i 2>&1", "stdin": true}, &repl)
	c.must("write_process_input", map[string]any{"sandbox": sb.ID, "process": repl.Process, "input": "x = 6 * 7\n"}, nil)
	c.must("write_process_input", map[string]any{"sandbox": sb.ID, "process": repl.Process, "input": "print('answer', x)\n", "end": true}, nil)
	said := c.outputToEnd(sb.ID, repl.Process)
	if !strings.Contains(said, "answer 42") {
		t.Errorf("the interpreter fed through write_process_input said %q", said)
	}
	var quiet struct{ Process string }
	c.must("start_process", map[string]any{"sandbox": sb.ID, "command": "sleep 30"}, &quiet)
	if isErr, text := c.call("write_process_input", map[string]any{"sandbox": sb.ID, "process": quiet.Process, "input": "x"}, nil); !isErr || !strings.Contains(text, "no standard input") {
		t.Errorf("input to a program started without stdin: %v %s", isErr, text)
	}

	var list struct{ Entries []struct{ Name, Type string } }
	c.must("list_files", map[string]any{"sandbox": sb.ID, "path": "notes"}, &list)
	if len(list.Entries) != 1 || list.Entries[0].Name != "a.txt" {
		t.Errorf("list_files: %+v", list)
	}
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "cordon://sandboxes/" + sb.ID + "/files/notes/a.txt"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "written\n" {
		t.Errorf("resource: %+v %v", res, err)
	}
	if _, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "cordon://sandboxes/" + sb.ID + "/files/no/such"}); err == nil {
		t.Error("a missing file read as a resource")
	}

	// A background program serving a port, reached through its URL.
	var proc struct{ Process string }
	c.must("start_process", map[string]any{"sandbox": sb.ID, "command": "echo serving; exec python3 -u -m http.server 8000 --bind 127.0.0.1"}, &proc)
	var po struct {
		Stdout, Stderr string
		Next           int64
		Running        bool
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(po.Stdout, "serving") || !strings.Contains(po.Stderr+po.Stdout, "Serving HTTP") {
		var more struct {
			Stdout, Stderr string
			Next           int64
			Running        bool
		}
		c.must("read_process_output", map[string]any{"sandbox": sb.ID, "process": proc.Process, "offset": po.Next}, &more)
		po.Stdout += more.Stdout
		po.Stderr += more.Stderr
		po.Next, po.Running = more.Next, more.Running
		if time.Now().After(deadline) {
			t.Fatalf("the program said %q %q", po.Stdout, po.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !po.Running {
		t.Error("the server is not running")
	}
	var port struct{ URL string }
	c.must("expose_port", map[string]any{"sandbox": sb.ID, "port": 8000}, &port)
	resp, err := http.Get(port.URL + "notes/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "written\n" {
		t.Errorf("GET %s: %d %q", port.URL, resp.StatusCode, body)
	}
	var stopped struct{ State string }
	c.must("stop_process", map[string]any{"sandbox": sb.ID, "process": proc.Process}, &stopped)
	if stopped.State == "running" {
		t.Errorf("stop_process: %+v", stopped)
	}

	// A command that runs past its timeout is ended and said to be.
	start := time.Now()
	isErr, text := c.call("run_command", map[string]any{"sandbox": sb.ID, "command": "echo before; sleep 30", "timeoutMs": 300}, &out)
	if !isErr || !out.TimedOut || out.Stdout != "before\n" || !strings.Contains(text, "timed out") || time.Since(start) > 20*time.Second {
		t.Errorf("timed-out command: error %v %q, %+v after %v", isErr, text, out, time.Since(start))
	}
	// Refusals are tool errors that say what is wrong.
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_command", map[string]any{"sandbox": "sbx_nope", "command": "true"}, "not_found"},
		{"run_command", map[string]any{"sandbox": sb.ID, "command": "true", "timeoutMs": 700000}, "timeoutMs 700000"},
		{"create_sandbox", map[string]any{"tier": "nope"}, "nope"},
		{"create_sandbox", map[string]any{"allow": []string{"*"}}, "invalid"},
		{"read_file", map[string]any{"sandbox": sb.ID, "path": "/no/such"}, "no such"},
		{"read_file", map[string]any{"sandbox": sb.ID, "path": "/dev/zero"}, "/dev/zero is a device, FIFO or socket, not a regular file"},
		{"read_file", map[string]any{"sandbox": sb.ID, "path": "/tmp"}, "/tmp is a directory (list_files lists it)"},
		{"run_code", map[string]any{"language": "ruby", "source": "1"}, "language"},
		{"run_code", map[string]any{"language": "python", "source": "while True: pass", "timeoutMs": 200}, "timeout"},
		{"run_command", map[string]any{"command": "true"}, "sandbox"},
	} {
		if isErr, text := c.call(tc.tool, tc.args, nil); !isErr || !strings.Contains(strings.ToLower(text), strings.ToLower(tc.want)) {
			t.Errorf("%s %v: error %v %q, want one with %q", tc.tool, tc.args, isErr, text, tc.want)
		}
	}
	var code struct {
		OK     bool
		Output json.RawMessage
	}
	c.must("run_code", map[string]any{"language": "python", "source": "sum(INPUT)", "input": []int{1, 2, 3}}, &code)
	if !code.OK || string(code.Output) != "6" {
		t.Errorf("run_code: %+v (%s)", code, code.Output)
	}

	var usage struct {
		CPUSeconds     float64
		MemoryBytes    *int64
		DiskTotalBytes int64
		Tasks          int64
	}
	c.must("sandbox_usage", map[string]any{"sandbox": sb.ID}, &usage)
	if usage.DiskTotalBytes <= 0 || usage.MemoryBytes == nil || *usage.MemoryBytes <= 0 || usage.CPUSeconds < 0 {
		t.Errorf("sandbox_usage: %+v", usage)
	}

	// Closing the session ends cordon mcp, its daemon and every sandbox.
	var listed struct{ Sandboxes []struct{ ID string } }
	c.must("list_sandboxes", map[string]any{}, &listed)
	if len(listed.Sandboxes) != 1 || listed.Sandboxes[0].ID != sb.ID {
		t.Errorf("list_sandboxes: %+v", listed)
	}
	pids := processesWith(t, "cordon-mcp-")
	if len(pids) == 0 {
		t.Fatal("no private daemon seen")
	}
	cs.Close()
	deadline = time.Now().Add(60 * time.Second)
	for len(processesWith(t, "cordon-mcp-")) > 0 || len(processesWith(t, sb.ID)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("left running: %v %v", processesWith(t, "cordon-mcp-"), processesWith(t, sb.ID))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesWith lists the processes whose command line or environment
// holds s.
func processesWith(t *testing.T, s string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(b), s) {
			out = append(out, e.Name()+":"+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// TestMCPStreamableHTTP: the same tools over streamable HTTP against a
// daemon the caller names (--host).
func TestMCPStreamableHTTP(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "deno")
	cordon := binaries(t)
	dir := testutil.StateDir(t)
	sock := filepath.Join(dir, "cordon.sock")
	serve := exec.Command(cordon, "serve", "--ephemeral", "--listen", "unix://"+sock, "--state-dir", filepath.Join(dir, "state"), "--max-ttl", "30m")
	serve.Env = append(os.Environ(), "CORDON_STATE_DIR="+filepath.Join(dir, "sandboxes"))
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Signal(os.Interrupt); serve.Wait() })
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i > 300 {
			t.Fatal("the daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	token := "mcp-test-token-0123456789abcdef0123456789"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cordon, "mcp", "--host", "unix://"+sock, "--listen", "127.0.0.1:0").CombinedOutput(); err == nil || !strings.Contains(string(out), "--token-file") {
		t.Fatalf("--listen without a token: %v %s", err, out)
	}
	m := exec.Command(cordon, "mcp", "--host", "unix://"+sock, "--listen", "127.0.0.1:0", "--token-file", tokenFile)
	stdout, _ := m.StdoutPipe()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Process.Signal(os.Interrupt); m.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	var endpoint string
	fmt.Sscanf(line, "cordon mcp listening on %s", &endpoint)
	if endpoint == "" {
		t.Fatalf("cordon mcp said %q", line)
	}
	// Without the token, nothing.
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", resp.StatusCode)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "cordon-test", Version: "1"}, nil)
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	c := caller{t, cs}
	// The daemon allows 30 minutes, less than cordon mcp's default TTL:
	// a sandbox the model gives none gets the daemon's maximum.
	var sb struct{ ID string }
	c.must("create_sandbox", map[string]any{}, &sb)
	var listed struct {
		Sandboxes []struct {
			ID        string
			ExpiresAt *time.Time
		}
	}
	c.must("list_sandboxes", map[string]any{}, &listed)
	if len(listed.Sandboxes) != 1 || listed.Sandboxes[0].ExpiresAt == nil || time.Until(*listed.Sandboxes[0].ExpiresAt) > 30*time.Minute {
		t.Errorf("under a daemon's --max-ttl 30m: %+v", listed)
	}
	if isErr, text := c.call("create_sandbox", map[string]any{"ttlSeconds": 3600}, nil); !isErr || !strings.Contains(text, "ttlSeconds 3600: want 0 (the daemon's default) to 1800") {
		t.Errorf("a TTL past the daemon's maximum, asked for: %v %s", isErr, text)
	}
	var out struct {
		ExitCode int
		Stdout   string
	}
	c.must("run_command", map[string]any{"sandbox": sb.ID, "command": "echo over http"}, &out)
	if out.Stdout != "over http\n" {
		t.Errorf("run_command: %+v", out)
	}
	var code struct {
		OK     bool
		Output json.RawMessage
	}
	c.must("run_code", map[string]any{"source": "export default (x) => x.map((n) => n * 2)", "input": []int{1, 2}}, &code)
	if string(code.Output) != "[2,4]" {
		t.Errorf("run_code: %s", code.Output)
	}
	isErr, text := c.call("run_command", map[string]any{"sandbox": sb.ID, "command": "sleep 30", "timeoutMs": 200}, nil)
	if !isErr || !strings.Contains(text, "timed out") {
		t.Errorf("timed-out command: %v %q", isErr, text)
	}
	c.must("destroy_sandbox", map[string]any{"sandbox": sb.ID}, nil)
	if isErr, text := c.call("run_command", map[string]any{"sandbox": sb.ID, "command": "true"}, nil); !isErr || !strings.Contains(text, "destroyed") && !strings.Contains(text, "not_found") {
		t.Errorf("a command in a destroyed sandbox: %v %q", isErr, text)
	}
}

// bearer adds a bearer token to each request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// TestMCPKilled: an MCP host that kills `cordon mcp` outright, its whole
// process group with SIGKILL (the private daemon included, which then
// cannot destroy anything), leaves no sandbox running: the private
// daemon's sandboxes die with it, as a cordon run's do (the docker tier's
// container stops). The next `cordon mcp` takes over the directory left
// behind, and once it ends nothing of either is left: no directory, no
// mount (runsc binds a network namespace into its state), no container.
func TestMCPKilled(t *testing.T) {
	testutil.RequiresRoot(t)
	cordon := binaries(t)
	tiers := []string{"process"}
	for tier, runtime := range map[string]string{"container": "crun", "gvisor": "/usr/local/lib/cordon/runsc"} {
		if _, err := exec.LookPath(runtime); err == nil {
			tiers = append(tiers, tier)
		} else if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing", runtime)
		}
	}
	// The docker tier's containers are the engine's children, not cordon
	// mcp's: they stop by their lifeline, and go by their owner's label.
	// (Without an engine, the other tiers are still tried: under CI a
	// missing one fails.)
	engine := testutil.StartDockerd()
	defer engine.Stop()
	env := []string{}
	switch {
	case engine.Err == nil:
		engine.ImportRoot(t, testutil.DebianTools(t), testutil.EngineImage)
		tiers = append(tiers, "docker")
		env = append(env, "DOCKER_HOST="+engine.Host, "CORDON_DOCKER_IMAGE="+testutil.EngineImage)
	case os.Getenv("CI") == "true":
		t.Fatalf("no Docker engine: %v", engine.Err)
	default:
		t.Logf("the docker tier is not tried: no Docker engine: %v", engine.Err)
	}
	containers := func(all bool) string {
		if engine.Err != nil {
			return ""
		}
		args := []string{"ps", "-q", "--filter", "label=dev.cordon.tier=docker"}
		if all {
			args = append(args, "-a")
		}
		return engine.Docker(t, args...)
	}
	// A short one: the container tier's sockets live far below it.
	tmp, err := os.MkdirTemp("", "m")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o711) // (the sandboxes' users pass through it)
	t.Cleanup(func() { mounted.Remove(tmp) })
	cmd := exec.Command(cordon, "mcp")
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cs := connect(t, cmd)
	defer cs.Close()
	c := caller{t, cs}
	for _, tier := range tiers {
		var sb struct{ ID, Tier string }
		c.must("create_sandbox", map[string]any{"tier": tier}, &sb)
		var out struct{ Stdout string }
		c.must("run_command", map[string]any{"sandbox": sb.ID, "command": "sleep 1000 & echo started"}, &out)
		if out.Stdout != "started\n" {
			t.Fatalf("%s: %q", tier, out.Stdout)
		}
	}
	// Every process below cordon mcp, the sandboxes' included (in
	// sessions of their own, outside the group the host kills).
	below := descendants(cmd.Process.Pid)
	if len(below) < 3 {
		t.Fatalf("processes below cordon mcp: %v", below)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range below {
		for alive(pid) {
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				t.Fatalf("process %d (%q) outlived cordon mcp killed by 30 s", pid, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for containers(false) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the docker tier's container outlived cordon mcp killed by 30 s: %s", containers(false))
		}
		time.Sleep(50 * time.Millisecond)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "cordon-mcp-*"))
	if len(left) != 1 {
		t.Fatalf("private daemons' directories: %v", left)
	}
	if engine.Err == nil && containers(true) == "" {
		t.Fatal("the docker tier's stopped container is gone before anything swept it")
	}

	next := exec.Command(cordon, "mcp")
	next.Env = cmd.Env
	cs2 := connect(t, next)
	var sb struct{ ID, Tier string }
	caller{t, cs2}.must("create_sandbox", map[string]any{}, &sb)
	if now, _ := filepath.Glob(filepath.Join(tmp, "cordon-mcp-*")); !slices.Equal(now, left) {
		t.Fatalf("the next cordon mcp's directory: %v, the one left: %v", now, left)
	}
	cs2.Close()
	for deadline := time.Now().Add(time.Minute); alive(next.Process.Pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("cordon mcp did not end within a minute of its input's end")
		}
	}
	if now, _ := filepath.Glob(filepath.Join(tmp, "cordon-mcp-*")); len(now) != 0 {
		t.Errorf("left after cordon mcp ended: %v", now)
	}
	if ids := containers(true); ids != "" {
		t.Errorf("the killed daemon's docker containers are left: %s", ids)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), tmp+"/") {
		t.Errorf("mounted below %s after cordon mcp ended:\n%s", tmp, mounts)
	}
}

// connect is an MCP client session (the SDK's) with cmd on its stdio.
func connect(t *testing.T, cmd *exec.Cmd) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "cordon-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// descendants lists the processes below pid, by their parents in /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command's name, which ends at the last ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for child, pp := range parent {
			if pp == p {
				out = append(out, child)
				walk(child)
			}
		}
	}
	walk(pid)
	return out
}

// alive: pid runs and is not a zombie (which nobody may reap here).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestMCPOperatorBounds: the model is not the operator. By default it can
// let a sandbox reach no host and run no image of its choosing (a prompt
// it read could ask it to send what it holds anywhere, or spell it in an
// image's name for the host to fetch); each attempt is a tool error that
// says how the operator allows more. With cordon mcp --allow, the model
// may allow those hosts (or narrower) and nothing else, and the sandbox's
// egress is what it asked for.
func TestMCPOperatorBounds(t *testing.T) {
	testutil.RequiresRoot(t)
	cordon := binaries(t)
	strict := connect(t, exec.Command(cordon, "mcp"))
	defer strict.Close()
	c := caller{t, strict}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"create_sandbox", map[string]any{"allow": []string{"api.example.test:443"}}, "cordon mcp --allow"},
		{"create_sandbox", map[string]any{"image": "registry.example.test/spelled-secret:1"}, "cordon mcp --image"},
		{"run_code", map[string]any{"language": "shell", "source": "true", "net": []string{"api.example.test"}}, "cordon mcp --allow"},
	} {
		if isErr, text := c.call(tc.tool, tc.args, nil); !isErr || !strings.Contains(text, tc.want) {
			t.Errorf("%s %v: error %v %q, want one naming %q", tc.tool, tc.args, isErr, text, tc.want)
		}
	}
	tools, err := strict.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name == "create_sandbox" && !strings.Contains(tl.Description, "reach no host") {
			t.Errorf("create_sandbox's description does not say so: %q", tl.Description)
		}
	}
	var sb struct{ ID string }
	c.must("create_sandbox", map[string]any{}, &sb)

	bounded := connect(t, exec.Command(cordon, "mcp", "--allow", "api.example.test:443", "--allow", "*.cdn.example.test"))
	defer bounded.Close()
	b := caller{t, bounded}
	if isErr, text := b.call("create_sandbox", map[string]any{"allow": []string{"other.example.test"}}, nil); !isErr || !strings.Contains(text, "api.example.test:443, *.cdn.example.test") {
		t.Errorf("a host beyond the operator's: error %v %q", isErr, text)
	}
	b.must("create_sandbox", map[string]any{"allow": []string{"api.example.test:443", "img.cdn.example.test"}}, &sb)
	var out struct{ Stdout string }
	b.must("run_command", map[string]any{"sandbox": sb.ID, "command": "curl -s http://api.example.test:443/; echo; curl -s http://other.example.test/"}, &out)
	if !strings.Contains(out.Stdout, "api.example.test:443: the name does not resolve") || !strings.Contains(out.Stdout, "other.example.test:80: no rule allows") {
		t.Errorf("the sandbox's egress: %q", out.Stdout)
	}
	if b, err := exec.Command(cordon, "mcp", "--allow-any-host", "--allow", "api.example.test").CombinedOutput(); !strings.Contains(string(b), "goes alone") || err == nil {
		t.Errorf("--allow-any-host with --allow: %v %s", err, b)
	}
}
