package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/mounted"
	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// serveProc is a `cordon serve` process.
type serveProc struct {
	cmd *exec.Cmd
	out *logbuf.Buffer
}

func startServe(t testing.TB, sock, state, processDir string) *serveProc {
	t.Helper()
	return startServeCmd(t, sock, exec.Command(buildCLI(t), "serve", "--listen", "unix://"+sock, "--state-dir", state), processDir)
}

// startServeCmd is startServe with the daemon's command given (wrapped,
// or with flags of its own).
func startServeCmd(t testing.TB, sock string, cmd *exec.Cmd, processDir string) *serveProc {
	t.Helper()
	p := &serveProc{out: logbuf.New(1 << 20)}
	p.cmd = cmd
	p.cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+processDir)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil { // not waited for: a test that stopped early
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("cordon serve did not listen:\n%s", p.out.String())
		}
	}
}

// stop deletes every sandbox the daemon holds (its sandboxes outlive it)
// and then stops it.
func (p *serveProc) stop(t testing.TB, sock string) {
	c, _ := sclient.New("unix://"+sock, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, _ := c.List(ctx, sclient.ListOptions{})
	for _, sb := range list {
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Errorf("delete %s: %v", sb.ID, err)
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
	if t.Failed() {
		t.Logf("daemon said:\n%s", p.out.String())
	}
}

func (p *serveProc) kill9() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// TestServeSurvivesKill9 kills the daemon with SIGKILL in the middle of an
// exec and of an upload, restarts it, and checks that the sandbox lives on
// with its command finished, that the interrupted upload left the previous
// file whole, and that nothing is orphaned once the sandbox is removed.
func TestServeSurvivesKill9(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, err := os.MkdirTemp("", "cordon-serve-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // sandboxes pass through it
		t.Fatal(err)
	}
	processDir := filepath.Join(dir, "process")
	sandboxes := filepath.Join(processDir, "serve")
	t.Cleanup(func() {
		killRecorded(sandboxes)
		os.RemoveAll(dir)
	})
	sock, state := filepath.Join(dir, "cordon.sock"), filepath.Join(dir, "state")
	d := startServe(t, sock, state, processDir)
	c, _ := sclient.New("unix://"+sock, "")
	ctx := t.Context()
	sb, err := c.Create(ctx, api.CreateRequest{Labels: map[string]string{"keep": "yes"}})
	if err != nil {
		d.stop(t, sock)
		t.Fatal(err)
	}
	if err := c.Upload(ctx, sb.ID, "keep.txt", strings.NewReader("old"), 3); err != nil {
		t.Fatal(err)
	}
	// Mid-exec: a command that outlives the daemon.
	started := make(chan string, 1)
	go c.Exec(context.Background(), sb.ID, "sh", sclient.ExecOptions{Args: []string{"-c", "sleep 1; echo done > /workspace/after"}, Started: func(string) { started <- "" }})
	<-started
	// Mid-upload: promise 8 MiB, send 1 MiB.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT /v1/sandboxes/%s/files?path=keep.txt HTTP/1.1\r\nHost: cordon\r\nContent-Length: %d\r\n\r\n", sb.ID, 8<<20)
	if _, err := conn.Write(bytes.Repeat([]byte("n"), 1<<20)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	d.kill9()
	conn.Close()

	d = startServe(t, sock, state, processDir)
	defer d.stop(t, sock)
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.State != api.StateRunning || got.Labels["keep"] != "yes" {
		t.Fatalf("after the restart: %+v %v", got, err)
	}
	read := func(path string) string {
		var b bytes.Buffer
		if _, err := c.Download(ctx, sb.ID, path, 0, 0, &b); err != nil {
			return "error: " + err.Error()
		}
		return b.String()
	}
	if s := read("keep.txt"); s != "old" {
		t.Fatalf("the interrupted upload changed the file: %q", s[:min(len(s), 40)])
	}
	for deadline := time.Now().Add(10 * time.Second); read("after") != "done\n"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command running when the daemon was killed did not finish")
		}
	}
	var out bytes.Buffer
	if _, err := c.Exec(ctx, sb.ID, "sh", sclient.ExecOptions{Args: []string{"-c", "ls -a /workspace"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "cordon-") {
		t.Fatalf("the interrupted upload left a temporary file: %q", out.String())
	}
	ents := sandboxDirs(sandboxes)
	if len(ents) != 1 {
		t.Fatalf("%d sandboxes on the tier, want 1", len(ents))
	}
	pid := initPid(filepath.Join(sandboxes, ents[0]))
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if ents := sandboxDirs(sandboxes); len(ents) != 0 {
		t.Fatalf("after delete, %d sandbox directories remain", len(ents))
	}
	if pid > 0 {
		if err := syscall.Kill(pid, 0); err == nil && !zombie(pid) {
			t.Fatalf("the sandbox's init %d outlived its delete", pid)
		}
	}
}

// TestServeSharedSandboxDir: a daemon removes, at start, every sandbox in
// its sandboxes' directory that its registry does not know. A second
// daemon with a registry of its own but the same directory (one
// CORDON_STATE_DIR, or none: /run/cordon/serve) once destroyed all of the
// first one's sandboxes that way, on every tier. It is refused, saying
// why and what to do, and the first one's sandboxes go on; with a
// directory of its own it serves beside the first.
func TestServeSharedSandboxDir(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, sock, d := serveInTemp(t)
	defer func() { d.stop(t, sock) }() // the daemon running at the end
	host := "--host=unix://" + sock
	ids := map[string]string{}
	for _, tier := range []string{"process", "container"} {
		out, errOut, code := cordon(t, "create", host, "--tier", tier)
		if code != 0 {
			t.Fatalf("create on %s: %d %s", tier, code, errOut)
		}
		ids[tier] = strings.TrimSpace(out)
	}
	second := func(processDir string) *exec.Cmd {
		cmd := exec.Command(buildCLI(t), "serve", "--listen", "unix://"+filepath.Join(dir, "second.sock"), "--state-dir", filepath.Join(dir, "second"))
		cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+processDir)
		return cmd
	}
	cmd := second(filepath.Join(dir, "process"))
	// Were it to serve, it is stopped after a while (and fails the test).
	time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "keeps its sandboxes in "+filepath.Join(dir, "process", "serve")) ||
		!strings.Contains(string(out), "CORDON_STATE_DIR=DIR") {
		t.Fatalf("a second daemon on the first one's sandboxes: exit %d: %s", cmd.ProcessState.ExitCode(), out)
	}
	// The same registry twice is said so.
	cmd = exec.Command(buildCLI(t), "serve", "--listen", "unix://"+filepath.Join(dir, "again.sock"), "--state-dir", filepath.Join(dir, "state"))
	cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+filepath.Join(dir, "process"))
	time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "of this registry ("+filepath.Join(dir, "state")+") is running already") {
		t.Fatalf("the first daemon's registry again: exit %d: %s", cmd.ProcessState.ExitCode(), out)
	}
	for tier, id := range ids {
		if out, errOut, code := cordon(t, "exec", host, id, "--", "echo", "alive"); code != 0 || out != "alive\n" {
			t.Errorf("the first daemon's %s sandbox after a second daemon tried: %d %q %s", tier, code, out, errOut)
		}
	}
	// With a directory of its own, it serves beside the first.
	p := startServeCmd(t, filepath.Join(dir, "second.sock"), second(filepath.Join(dir, "process2")), filepath.Join(dir, "process2"))
	defer killRecorded(filepath.Join(dir, "process2", "serve"))
	if out, errOut, code := cordon(t, "run", "--host=unix://"+filepath.Join(dir, "second.sock"), "--", "echo", "beside"); code != 0 || out != "beside\n" {
		t.Errorf("a second daemon with its own directory: %d %q %s", code, out, errOut)
	}
	p.stop(t, filepath.Join(dir, "second.sock"))
	for tier, id := range ids {
		if out, errOut, code := cordon(t, "exec", host, id, "--", "echo", "alive"); code != 0 || out != "alive\n" {
			t.Errorf("the first daemon's %s sandbox beside a second daemon: %d %q %s", tier, code, out, errOut)
		}
	}
	// The first stopped, its sandboxes stay for its next start: the
	// directory is still its registry's, and another's is refused, told
	// how to let them go.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	cmd = second(filepath.Join(dir, "process"))
	time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	out, _ = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "registry is "+filepath.Join(dir, "state")) ||
		!strings.Contains(string(out), "remove "+filepath.Join(dir, "process", "serve", ".serve.lock")) {
		t.Fatalf("another daemon after the first stopped: exit %d: %s", cmd.ProcessState.ExitCode(), out)
	}
	d = startServe(t, sock, filepath.Join(dir, "state"), filepath.Join(dir, "process"))
	for tier, id := range ids {
		if out, errOut, code := cordon(t, "exec", host, id, "--", "echo", "alive"); code != 0 || out != "alive\n" {
			t.Errorf("the first daemon's %s sandbox after its restart: %d %q %s", tier, code, out, errOut)
		}
	}
	// A registry that is gone can take nothing back: the next daemon on
	// the directory takes it over, and removes what it held.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	d = startServeCmd(t, filepath.Join(dir, "second.sock"), second(filepath.Join(dir, "process")), filepath.Join(dir, "process"))
	sock = filepath.Join(dir, "second.sock")
	if left := sandboxDirs(filepath.Join(dir, "process", "serve")); len(left) != 0 {
		t.Errorf("the gone registry's sandboxes after another daemon took the directory over: %v", left)
	}
}

// sandboxDirs lists the process tier's sandbox directories in dir.
func sandboxDirs(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "sb-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func initPid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "init"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
	return pid
}

func zombie(pid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return strings.Contains(string(b), ") Z ")
}

// killRecorded ends what a test that failed badly left: every recorded
// init (its cgroups are the next sweep's).
func killRecorded(dir string) {
	for _, name := range sandboxDirs(dir) {
		if pid := initPid(filepath.Join(dir, name)); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	killVMMs(filepath.Join(dir, "microvm"))
}

// killVMMs kills the VMMs recorded under a microvm tier's state
// directory (they outlive their daemon), as a reboot would, and waits for
// them to go; it returns how many it killed.
func killVMMs(dir string) int {
	recs, _ := filepath.Glob(filepath.Join(dir, "vm-*", "vmm.pid"))
	killed := 0
	for _, r := range recs {
		b, _ := os.ReadFile(r)
		pid, start, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		n, err := strconv.Atoi(pid)
		if err != nil || !procid.Alive(n, start) {
			continue
		}
		_ = syscall.Kill(n, syscall.SIGKILL)
		for deadline := time.Now().Add(10 * time.Second); procid.Alive(n, start) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		}
		killed++
	}
	return killed
}

// serveInTemp starts a daemon whose socket and state are in a new
// temporary directory, removed (with whatever sandboxes it left) when the
// test ends, with cordon serve's flags and any extra ones. It returns the
// directory and the socket's path.
func serveInTemp(t testing.TB, extra ...string) (string, string, *serveProc) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cordon-serve-")
	if err != nil {
		t.Fatal(err)
	}
	// Sandboxes run as unprivileged mapped users: their state must be
	// reachable by anyone.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	processDir := filepath.Join(dir, "process")
	t.Cleanup(func() {
		killRecorded(filepath.Join(processDir, "serve"))
		if err := mounted.Remove(dir); err != nil {
			t.Errorf("removing the daemon's directory: %v", err)
		}
	})
	sock := filepath.Join(dir, "cordon.sock")
	cmd := exec.Command(buildCLI(t), append([]string{"serve", "--listen", "unix://" + sock, "--state-dir", filepath.Join(dir, "state")}, extra...)...)
	return dir, sock, startServeCmd(t, sock, cmd, processDir)
}

// TestDaemonVerbs drives a daemon with the CLI's verbs, as a user would.
func TestDaemonVerbs(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	run := func(args ...string) (string, string, int) {
		return cordon(t, append(args[:1:1], append([]string{host}, args[1:]...)...)...)
	}
	events := exec.Command(buildCLI(t), "events", host)
	evOut := logbuf.New(1 << 20)
	events.Stdout = evOut
	if err := events.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = events.Process.Kill(); _ = events.Wait() }()
	time.Sleep(200 * time.Millisecond)

	id, errOut, code := run("create", "--label", "job=7", "--env", "WHO=verbs", "--memory", "256m")
	id = strings.TrimSpace(id)
	if code != 0 || !strings.HasPrefix(id, "sbx_") {
		t.Fatalf("create: %d %q %s", code, id, errOut)
	}
	if out, _, code := run("ls", "--label", "job=7"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "job=7") {
		t.Fatalf("ls: %d %s", code, out)
	}
	if out, _, _ := run("ls", "-q", "--label", "job=8"); out != "" {
		t.Fatalf("ls of another label: %q", out)
	}
	// A sandbox that is not there, through the daemon's agent routes too,
	// is said as the daemon says it.
	for _, args := range [][]string{{"shell", "sbx_0000000000000000", "--", "true"}, {"sessions", "sbx_0000000000000000"}, {"exec", "sbx_0000000000000000", "--", "true"}} {
		if _, errOut, code := run(args...); code != 125 || !strings.Contains(errOut, "not_found (404): no sandbox") || strings.Contains(errOut, "agent answered") {
			t.Errorf("%s of no sandbox: %d %q", args[0], code, errOut)
		}
	}
	cases := []struct {
		args   []string
		stdout string
		code   int
		stderr string
	}{
		{[]string{"sh", "-c", "echo $WHO; id -u"}, "verbs\n1000\n", 0, ""},
		{[]string{"sh", "-c", "exit 4"}, "", 4, ""},
		{[]string{"sh", "-c", "kill -TERM $$"}, "", 143, "SIGTERM"},
		{[]string{"--timeout", "300ms", "sleep", "10"}, "", 124, "timed out"},
		{[]string{"/no/such/program"}, "", 127, "ENOENT"},
	}
	for _, c := range cases {
		args := append([]string{"exec"}, c.args...)
		// Flags go before the id; the command after it.
		if c.args[0] == "--timeout" {
			args = []string{"exec", c.args[0], c.args[1], id, "--", c.args[2], c.args[3]}
		} else {
			args = append([]string{"exec", id, "--"}, c.args...)
		}
		out, errOut, code := run(args...)
		if out != c.stdout || code != c.code || !strings.Contains(errOut, c.stderr) {
			t.Errorf("exec %v: %q %d %q", c.args, out, code, errOut)
		}
	}
	checkBinaryStreams(t, "exec", host, "-i", id, "--")
	checkBrokenPipe(t, "exec", host, id, "--")
	if out, _, _ := run("exec", id, "--", "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"); strings.Contains(out, "sleep 300") {
		t.Errorf("the command is still running after exec's stdout closed: %q", out)
	}
	// run through the daemon: a sandbox of its own for the command, with
	// cordon run's exit statuses, deleted after.
	before, _, _ := run("ls", "-q")
	// (The writable space is half the memory limit by default.)
	if out, errOut, code := run("run", "--env", "WHO=run", "--memory", "128m", "--", "sh", "-c", "echo $WHO; id -u; df -k --output=size /tmp | tail -1 | tr -d ' '; exit 3"); out != "run\n1000\n65536\n" || code != 3 {
		t.Errorf("run: %q %d %q", out, code, errOut)
	}
	if _, errOut, code := run("run", "--timeout", "300ms", "--", "sleep", "10"); code != 124 || !strings.Contains(errOut, "timed out") {
		t.Errorf("run past its timeout: %d %q", code, errOut)
	}
	if _, errOut, code := run("run", "--require-landlock", "--", "true"); code != 2 || !strings.Contains(errOut, "without a daemon") {
		t.Errorf("run --require-landlock through a daemon: %d %q", code, errOut)
	}
	if after, _, _ := run("ls", "-q"); after != before {
		t.Errorf("run left sandboxes behind: %q, before %q", after, before)
	}
	// cp both ways, through a file and through standard streams.
	local := filepath.Join(dir, "in.bin")
	data := bytes.Repeat([]byte("cordon\x00\xff"), 200_000)
	if err := os.WriteFile(local, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run("cp", local, id+":sub/in.bin"); code != 0 {
		t.Fatalf("cp in: %d %s", code, errOut)
	}
	back := filepath.Join(dir, "back.bin")
	if _, errOut, code := run("cp", id+":sub/in.bin", back); code != 0 {
		t.Fatalf("cp out: %d %s", code, errOut)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("the file came back different")
	}
	if out, _, code := run("cp", id+":sub/in.bin", "-"); code != 0 || out != string(data) {
		t.Fatalf("cp to stdout: %d (%d bytes)", code, len(out))
	}
	if _, errOut, code := run("cp", id+":no/such", back); code != 125 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("cp of a missing file: %d %s", code, errOut)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("a failed download changed the local file")
	}
	if _, errOut, code := run("rm", id); code != 0 {
		t.Fatalf("rm: %d %s", code, errOut)
	}
	if _, errOut, code := run("rm", id); code != 0 {
		t.Fatalf("second rm: %d %s", code, errOut)
	}
	if _, _, code := run("exec", id, "--", "true"); code != 125 {
		t.Fatalf("exec after rm: %d", code)
	}
	// The stream ends with the sandbox's destroyed event.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(evOut.String(), "destroyed ") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"created", "ready", "exec.started", "exec.finished", "destroyed"} {
		if !strings.Contains(evOut.String(), want+" ") {
			t.Errorf("events lack %s:\n%s", want, evOut.String())
		}
	}
}

// TestDaemonContainerTier: a fresh `cordon serve` serves the container tier
// (its sweep at start once left the tier's state directory private, where
// a container's root cannot reach its bundle), and a create gets a
// deliberately long ceiling for its commands' timeouts while a command
// that names none still gets the default held to a short one.
func TestDaemonContainerTier(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "crun")
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	id, errOut, code := cordon(t, "create", host, "--tier", "container", "--max-timeout", "2h")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create --tier container: %d %s", code, errOut)
	}
	if out, errOut, code := cordon(t, "exec", host, "--timeout", "1h", id, "--", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("exec --timeout 1h: %d %q %s", code, out, errOut)
	}
	short, errOut, code := cordon(t, "create", host, "--max-timeout", "1s")
	if code != 0 {
		t.Fatalf("create --max-timeout 1s: %d %s", code, errOut)
	}
	if _, errOut, code := cordon(t, "exec", host, strings.TrimSpace(short), "--", "sleep", "3"); code != 124 || !strings.Contains(errOut, "timed out") {
		t.Fatalf("a command with no timeout in a 1s sandbox: %d %s", code, errOut)
	}
	if _, errOut, code := cordon(t, "create", host, "--max-timeout", "48h"); code == 0 || !strings.Contains(errOut, "maxTimeoutMs") {
		t.Fatalf("a ceiling above the daemon's: %d %s", code, errOut)
	}
	for _, i := range []string{id, strings.TrimSpace(short)} {
		if _, errOut, code := cordon(t, "rm", host, i); code != 0 {
			t.Fatalf("rm: %s", errOut)
		}
	}
}

// TestDaemonAdminVerbs: what the REST API offers has a verb too, driven as
// a user would: -o json of ls, create and exec; pause and resume; a
// sandbox's network policy; API keys and warm pools.
func TestDaemonAdminVerbs(t *testing.T) {
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	run := onDaemon(t, host)
	out, errOut, code := run("create", "-o", "json", "--label", "k=v")
	var sb api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || !strings.HasPrefix(sb.ID, "sbx_") || sb.Labels["k"] != "v" {
		t.Fatalf("create -o json: %d %q %s", code, out, errOut)
	}
	var list []api.Sandbox
	if out, _, code := run("ls", "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("ls -o json: %d %q", code, out)
	}
	var res struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	if out, _, code := run("exec", "-o", "json", sb.ID, "--", "sh", "-c", "echo out; echo err >&2; exit 3"); code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("exec -o json: %d %q", code, out)
	}
	// A new TTL and idle timeout, counted from now.
	var upd api.Sandbox
	if out, errOut, code := run("update", "-o", "json", "--ttl", "2h", "--idle", "-1s", sb.ID); code != 0 || json.Unmarshal([]byte(out), &upd) != nil || upd.ExpiresAt == nil || time.Until(*upd.ExpiresAt) < 119*time.Minute || upd.IdleTimeout != 0 {
		t.Fatalf("update: %d %q %s", code, out, errOut)
	}
	// Part of a second is a second, not 0 (the daemon's default, here none).
	var brief api.Sandbox
	if out, errOut, code := run("create", "-o", "json", "--ttl", "500ms"); code != 0 || json.Unmarshal([]byte(out), &brief) != nil || brief.ExpiresAt == nil || time.Until(*brief.ExpiresAt) > 2*time.Second {
		t.Fatalf("create --ttl 500ms: %d %q %s", code, out, errOut)
	}
	if _, errOut, code := run("update", sb.ID); code != 2 || !strings.Contains(errOut, "usage: cordon update") {
		t.Errorf("update with nothing to change: %d %s", code, errOut)
	}
	if _, errOut, code := run("update", "--ttl", "1000000h", sb.ID); code == 0 || !strings.Contains(errOut, "ttlSeconds 3600000000: want 0") {
		t.Errorf("update past the range: %d %s", code, errOut)
	}
	if _, errOut, code := run("pause", sb.ID); code != 0 {
		t.Fatalf("pause: %s", errOut)
	}
	if out, _, _ := run("ls"); !strings.Contains(out, "paused") {
		t.Fatalf("after pause: %s", out)
	}
	if _, errOut, code := run("resume", sb.ID); code != 0 {
		t.Fatalf("resume: %s", errOut)
	}
	if _, errOut, code := run("policy", "--allow", "a.test:8080", sb.ID); code != 0 {
		t.Fatalf("policy: %s", errOut)
	}
	if out, _, _ := run("exec", sb.ID, "--", "sh", "-c", "curl -sS http://b.test:8080/"); !strings.Contains(out, "b.test:8080: no rule allows this host and port") {
		t.Fatalf("under the new policy: %q", out)
	}
	out, errOut, code = run("key", "create", "--tenant", "team", "--name", "ci")
	if f := strings.Fields(out); code != 0 || len(f) != 2 {
		t.Fatalf("key create: %d %q %s", code, out, errOut)
	}
	kid := strings.Fields(out)[0]
	if out, _, code := run("key", "ls"); code != 0 || !strings.Contains(out, kid) || !strings.Contains(out, "team") {
		t.Fatalf("key ls: %d %s", code, out)
	}
	if _, errOut, code := run("key", "rm", kid); code != 0 {
		t.Fatalf("key rm: %s", errOut)
	}
	if _, errOut, code := run("pool", "put", "warm", "--size", "1", "--memory", "256m"); code != 0 {
		t.Fatalf("pool put: %s", errOut)
	}
	if out, _, code := run("pool", "ls"); code != 0 || !strings.Contains(out, "warm") {
		t.Fatalf("pool ls: %d %s", code, out)
	}
	if _, errOut, code := run("pool", "rm", "warm"); code != 0 {
		t.Fatalf("pool rm: %s", errOut)
	}
	if _, errOut, code := run("rm", sb.ID); code != 0 {
		t.Fatalf("rm: %s", errOut)
	}
}

// onDaemon runs the CLI's verbs against the daemon at host, which is named
// after the verb (after key's and pool's own).
func onDaemon(t *testing.T, host string) func(args ...string) (string, string, int) {
	return func(args ...string) (string, string, int) {
		t.Helper()
		n := 1
		if args[0] == "key" || args[0] == "pool" {
			n = 2
		}
		return cordon(t, append(args[:n:n], append([]string{host}, args[n:]...)...)...)
	}
}

// unixHTTP is an HTTP client of the daemon listening on socket sock.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// daemonSandbox starts a daemon in a temporary directory and creates a
// sandbox on it with the create flags given: host is the --host flag
// naming the daemon, run runs a cordon verb with it. Both go at the end of
// the test.
func daemonSandbox(t *testing.T, create ...string) (id, host string, run func(args ...string) (string, string, int)) {
	t.Helper()
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t)
	t.Cleanup(func() { d.stop(t, sock) })
	host = "--host=unix://" + sock
	run = func(args ...string) (string, string, int) {
		return cordon(t, append(args[:1:1], append([]string{host}, args[1:]...)...)...)
	}
	out, errOut, code := run(append([]string{"create"}, create...)...)
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	id = strings.TrimSpace(out)
	t.Cleanup(func() { run("rm", id) })
	return id, host, run
}

// TestDaemonTextPrintable: what a tenant names (labels, a template's
// start program) reaches another's terminal through the CLI's listings,
// so the daemon refuses labels with characters that act on a terminal,
// saying why, and the CLI shows what such text it does hold escaped.
func TestDaemonTextPrintable(t *testing.T) {
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	for _, label := range []string{"note=\x1b[2J\x1b]0;title\a", "note=a\nforged", "a b=c", "note=\u202eevil"} {
		if _, errOut, code := cordon(t, "create", host, "--label", label); code == 0 || !strings.Contains(errOut, "printable characters") {
			t.Errorf("--label %q: exit %d, %s", label, code, errOut)
		}
	}
	out, errOut, code := cordon(t, "create", host, "--label", "team=ünïcode, spaces & all")
	if code != 0 {
		t.Fatalf("a printable label: exit %d, %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if out, _, _ := cordon(t, "ls", host); !strings.Contains(out, id) || !strings.Contains(out, "team=ünïcode, spaces & all") {
		t.Errorf("cordon ls: %q", out)
	}
	// A start program may span lines; its listing does not.
	if _, errOut, code := cordon(t, "template", "save", host, "--start", "echo one\necho \x1b[2Jtwo", "multi"); code != 0 {
		t.Fatalf("template save: exit %d, %s", code, errOut)
	}
	out, _, _ = cordon(t, "templates", host)
	if strings.ContainsAny(out, "\x1b") || !strings.Contains(out, `"echo one\necho \x1b[2Jtwo"`) {
		t.Errorf("cordon templates: %q", out)
	}
}

// TestDaemonLayoutLinkSwapped: a layout directory the daemon admitted (by
// its real path, under --host-path) is taken by exactly that path at
// every start. A sandbox that shares the directory's parent read-write
// puts a symbolic link in its place, to a root-only directory of the
// host, while a persistent sandbox that reads it is stopped: the start is
// refused, saying why, and the root-only file is never read (before, the
// start mounted the link's target with its owner mapped to the sandbox
// user, and the sandbox read the file).
func TestDaemonLayoutLinkSwapped(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, err := os.MkdirTemp("", "cordon-swap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mounted.Remove(dir) })
	os.Chmod(dir, 0o711)
	hosts, shared, secret := filepath.Join(dir, "hosts"), filepath.Join(dir, "hosts", "t1"), filepath.Join(dir, "secret")
	uploads := filepath.Join(shared, "d")
	for _, d := range []string{hosts, shared, uploads, secret} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{shared, uploads} {
		os.Chown(d, 1000, 1000)
	}
	os.Chmod(secret, 0o700)
	os.WriteFile(filepath.Join(uploads, "f"), []byte("shared\n"), 0o644)
	if err := os.WriteFile(filepath.Join(secret, "s"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cordon.sock")
	d := startServeCmd(t, sock, exec.Command(buildCLI(t), "serve", "--listen", "unix://"+sock, "--state-dir", filepath.Join(dir, "state"), "--host-path", hosts), filepath.Join(dir, "process"))
	defer d.stop(t, sock)
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	reader, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true, Layout: api.Layout{Uploads: uploads}}})
	if err != nil {
		t.Fatal(err)
	}
	host := "--host=unix://" + sock
	if out, errOut, code := cordon(t, "exec", host, reader.ID, "--", "cat", "/mnt/user-data/uploads/f"); code != 0 || out != "shared\n" {
		t.Fatalf("exec: exit %d, %q, %s", code, out, errOut)
	}
	if _, errOut, code := cordon(t, "stop", host, reader.ID); code != 0 {
		t.Fatalf("stop: exit %d, %s", code, errOut)
	}
	// The attacker: a sandbox writing the directory that holds the other's.
	writer, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Layout: api.Layout{Outputs: shared}}})
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := cordon(t, "exec", host, writer.ID, "--", "sh", "-c", "cd /mnt/user-data/outputs && mv d d.was && ln -s "+secret+" d && echo planted"); code != 0 || out != "planted\n" {
		t.Fatalf("plant: exit %d, %q, %s", code, out, errOut)
	}
	_, errOut, code := cordon(t, "start", host, reader.ID)
	if code == 0 || !strings.Contains(errOut, "symbolic link") {
		t.Errorf("start after the swap: exit %d, %s", code, errOut)
	}
	if out, _, _ := cordon(t, "exec", host, reader.ID, "--", "cat", "/mnt/user-data/uploads/s"); strings.Contains(out, "root only") {
		t.Fatalf("the sandbox read the root-only file: %q", out)
	}
}

// TestServeWarnsOfClearText: cordon serve says at start that a TCP
// listener without TLS beyond loopback takes API keys in clear text, and
// says nothing of the kind for one on loopback.
func TestServeWarnsOfClearText(t *testing.T) {
	testutil.RequiresRoot(t)
	key := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	for addr, warns := range map[string]bool{"tcp://0.0.0.0:0": true, "tcp://127.0.0.1:0": false} {
		_, sock, d := serveInTemp(t, "--listen", addr, "--admin-key-file", key)
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(d.out.String(), "listening addr="+strings.TrimSuffix(addr, "0")) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if got := strings.Contains(d.out.String(), "API keys in clear text"); got != warns {
			t.Errorf("%s: warned %v, want %v:\n%s", addr, got, warns, d.out.String())
		}
		d.stop(t, sock)
	}
}
