package main_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"golang.org/x/sys/unix"
)

// buildCLI builds cordon beside cordon-agent, as scripts/setup.sh lays them
// out (without cgo).
func buildCLI(t testing.TB) string { return testutil.BuildCordon(t) }

func cordon(t *testing.T, args ...string) (stdout, stderr string, code int) {
	return runBin(buildCLI(t), args...)
}

// runBin runs bin with args and returns what it printed and its exit status.
func runBin(bin string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run()
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func TestRun(t *testing.T) {
	testutil.RequiresRoot(t) // the default tier maps users, which needs root here
	cases := []struct {
		name   string
		args   []string
		stdout string
		code   int
		stderr string
	}{
		{"Output", []string{"--", "sh", "-c", "echo out; echo err >&2"}, "out\n", 0, "err\n"},
		{"ExitCode", []string{"--", "sh", "-c", "exit 3"}, "", 3, ""},
		{"Signal", []string{"--", "sh", "-c", "kill -KILL $$"}, "", 137, "SIGKILL"},
		{"Timeout", []string{"--timeout", "300ms", "--", "sleep", "30"}, "", 124, "timed out"},
		{"Env", []string{"--env", "A=1", "--", "sh", "-c", "echo $A"}, "1\n", 0, ""},
		{"MaxOutput", []string{"--max-output", "1k", "--", "sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a"}, strings.Repeat("a", 1024), 0, "stdout was cut at --max-output"},
		{"NoSuchProgram", []string{"--", "/no/such/program"}, "", 127, "ENOENT"},
		{"UnknownTier", []string{"--tier", "nope", "--", "true"}, "", 125, "unknown sandbox tier"},
		{"Passthrough", []string{"--tier", "passthrough", "--", "true"}, "", 0, ""},
		{"Container", []string{"--tier", "container", "--", "sh", "-c", "id -u; cat /proc/1/comm"}, "1000\ncordon-agent\n", 0, ""},
		{"GVisor", []string{"--tier", "gvisor", "--", "sh", "-c", "id -u; uname -r"}, "1000\n4.19.0-gvisor\n", 0, ""}, // gVisor names its own kernel
		{"GVisorRefusesMemory", []string{"--tier", "gvisor", "--memory", "64m", "--", "true"}, "", 125, "cannot enforce a memory limit"},
		{"ContainerOOM", []string{"--tier", "container", "--memory", "64m", "--", "python3", "-c", "a = bytearray(512 << 20)"}, "", 137, "out of memory"},
		{"OOM", []string{"--memory", "64m", "--", "python3", "-c", "a = bytearray(512 << 20)"}, "", 137, "out of memory"},
		// A child killed for memory, which the command outlives, is said too.
		{"ChildOOM", []string{"--memory", "128m", "--", "sh", "-c", "python3 -c 'b = []\nwhile True: b.append(bytearray(16 << 20))'; echo after"}, "after\n", 0, "1 of the command's processes killed: the sandbox ran out of memory (--memory 128m)"},
		{"ContainerChildOOM", []string{"--tier", "container", "--memory", "128m", "--", "sh", "-c", "python3 -c 'b = []\nwhile True: b.append(bytearray(16 << 20))'; echo after"}, "after\n", 0, "1 of the command's processes killed: the sandbox ran out of memory (--memory 128m)"},
		{"User", []string{"--user", "4242", "--", "id", "-u"}, "4242\n", 0, ""},
		{"BadMemory", []string{"--memory", "lots", "--", "true"}, "", 2, "not a size"},
		{"Mount", []string{"--mount", "uploads=/usr/share/common-licenses", "--", "sh", "-c", "test -r /mnt/user-data/uploads/GPL-3 && echo ok"}, "ok\n", 0, ""},
		{"BadMount", []string{"--mount", "secrets=/etc", "--", "true"}, "", 2, "not a layout directory"},
		// Both are refused before any name is resolved: no traffic leaves.
		{"EgressDenied", []string{"--", "curl", "-sS", "http://example.invalid/"}, "cordon egress refused example.invalid:80: the sandbox's egress policy is deny-all. The sandbox's egress policy must allow it (for example: cordon run --allow example.invalid:80).\n", 0, "cordon: egress refused example.invalid:80: the sandbox's egress policy is deny-all; allow it with --allow example.invalid:80\n"},
		{"EgressAllowFlag", []string{"--allow", "a.test:8080", "--", "curl", "-sS", "http://a.test:9090/"}, "cordon egress refused a.test:9090: no rule allows this host and port. The sandbox's egress policy must allow it (for example: cordon run --allow a.test:9090).\n", 0, ""},
		{"EgressBadRule", []string{"--allow", "*", "--", "true"}, "", 2, "bare *"},
		{"EgressAllowAllAlone", []string{"--allow-all-egress", "--allow", "a.test", "--", "true"}, "", 2, "goes alone"},
		{"PassthroughRefusesEgress", []string{"--tier", "passthrough", "--allow", "a.test", "--", "true"}, "", 125, "egress policy"},
		{"PassthroughRefusesLimits", []string{"--tier", "passthrough", "--pids", "10", "--", "true"}, "", 125, "cannot enforce"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := cordon(t, append([]string{"run"}, c.args...)...)
			if out != c.stdout || code != c.code || !strings.Contains(errOut, c.stderr) {
				t.Fatalf("stdout %q exit %d stderr %q; want %q, %d, stderr containing %q", out, code, errOut, c.stdout, c.code, c.stderr)
			}
		})
	}
}

// TestRunWholeOutput: cordon run passes on all of a command's output, past
// the 100 MiB per stream that the agent keeps to by default.
func TestRunWholeOutput(t *testing.T) {
	const n = 101 << 20
	cmd, out, e := startPiped(t, "run", "--", "head", "-c", strconv.Itoa(n), "/dev/zero")
	got, _ := io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil || got != n || e.Len() > 0 {
		t.Fatalf("%d bytes of %d: %v %s", got, n, err, e.String())
	}
}

func TestRunStdin(t *testing.T) {
	cmd := exec.Command(buildCLI(t), "run", "-i", "--", "tr", "a-z", "A-Z")
	cmd.Stdin = strings.NewReader("shout")
	out, err := cmd.Output()
	if err != nil || string(out) != "SHOUT" {
		t.Fatalf("%q %v", out, err)
	}
	checkBinaryStreams(t, "run", "-i", "--")
}

// checkBinaryStreams runs cordon with args, then a command that copies its
// standard input to stdout or stderr, on input that is not UTF-8 (every
// byte value, then the 4 MiB -i takes at most), and checks that the bytes
// came back as they went in.
func checkBinaryStreams(t *testing.T, args ...string) {
	t.Helper()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, in := range [][]byte{all, bytes.Repeat(all, 4<<20/len(all))} {
		for _, script := range []string{"cat", "cat >&2"} {
			cmd := exec.Command(buildCLI(t), append(args, "sh", "-c", script)...)
			cmd.Stdin = bytes.NewReader(in)
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			got := o.Bytes()
			if script != "cat" {
				got = e.Bytes()
			}
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("%s, %d bytes: %d came back, equal %v, %v", script, len(in), len(got), bytes.Equal(got, in), err)
			}
		}
	}
}

// TestRunInterrupt: Ctrl-C (or SIGTERM, or the terminal hanging up) stops
// the command through the wire, waits for the stop, tears the sandbox down
// and exits 128 + the signal.
func TestRunInterrupt(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(buildCLI(t), "run", "--tier", "passthrough", "--workspace", dir, "--", "sh", "-c", "trap '' INT TERM HUP; echo $$ > pid; sleep 300")
			var e bytes.Buffer
			cmd.Stderr = &e
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pid string
			for i := 0; i < 200 && pid == ""; i++ {
				time.Sleep(25 * time.Millisecond)
				b, _ := os.ReadFile(filepath.Join(dir, "pid"))
				pid = strings.TrimSpace(string(b))
			}
			if pid == "" {
				t.Fatal("command never started")
			}
			_ = cmd.Process.Signal(sig)
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
				t.Fatalf("exit %d, want %d; stderr %s", code, 128+int(sig), e.String())
			}
			if b, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
				t.Fatalf("command %s still running after cordon run exited", pid)
			}
		})
	}
}

// TestRunBrokenPipe: once the reader of cordon's output goes away (as in
// cordon run -- yes | head -1), the command is stopped through the wire and
// cordon exits 141, as SIGPIPE would end a local command; it does not die
// of SIGPIPE itself, which skipped the sandbox's confirmed teardown.
func TestRunBrokenPipe(t *testing.T) {
	checkBrokenPipe(t, "run", "--")
}

// startPiped starts cordon with args, its stdout a pipe to read and its
// stderr kept.
func startPiped(t *testing.T, args ...string) (*exec.Cmd, io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(buildCLI(t), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var e bytes.Buffer
	cmd.Stderr = &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out, &e
}

// checkBrokenPipe runs cordon with args, then a command that writes a line,
// then another a second later, then sleeps; it closes cordon's stdout after
// the first line and wants cordon to stop the command and exit 141.
func checkBrokenPipe(t *testing.T, args ...string) {
	t.Helper()
	cmd, out, e := startPiped(t, append(args, "sh", "-c", "echo hi; sleep 1; echo more; exec sleep 300")...)
	line := make([]byte, 3)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "hi\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	out.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("cordon still running 30 s after its stdout closed; stderr %s", e.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 141 {
		t.Fatalf("exit %d (%v), want 141; stderr %s", code, cmd.ProcessState, e.String())
	}
}

func TestVersion(t *testing.T) {
	out, _, code := cordon(t, "version")
	if code != 0 || !strings.Contains(out, "protocol 2") {
		t.Fatalf("%q %d", out, code)
	}
}

// TestRunUnprivileged: an ordinary user gets a sandbox (no limits: those
// need cgroups it cannot create, and are refused rather than ignored).
func TestRunUnprivileged(t *testing.T) {
	testutil.RequiresRoot(t) // to become the ordinary user
	bin := buildCLI(t)
	var env []string
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/tmp"}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	out, errOut, code := run("run", "--", "sh", "-c", "grep CapEff /proc/self/status; echo hi > /workspace/a && cat /workspace/a")
	if code != 0 || out != "CapEff:\t0000000000000000\nhi\n" {
		t.Fatalf("unprivileged run: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if _, errOut, code := run("run", "--memory", "64m", "--", "true"); code != 125 || !strings.Contains(errOut, "cannot enforce") {
		t.Fatalf("unprivileged --memory: exit %d stderr %q, want a refusal", code, errOut)
	}
	// The user's runtime directory holds the state when there is one;
	// one that another user could change is refused, with the reason.
	dirFor := func(uid int, mode os.FileMode) string {
		d := filepath.Join(t.TempDir(), "xdg")
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Dir(d), filepath.Dir(filepath.Dir(d))} { // the user passes through
			if err := os.Chmod(p, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
		return d
	}
	xdg := dirFor(1000, 0o700)
	env = []string{"XDG_RUNTIME_DIR=" + xdg}
	if out, errOut, code := run("run", "--", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("with XDG_RUNTIME_DIR: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Join(xdg, "cordon")); len(ents) == 0 {
		t.Errorf("nothing of the sandbox's state went to %s/cordon", xdg)
	}
	env = []string{"XDG_RUNTIME_DIR=" + dirFor(1001, 0o777)}
	if _, errOut, code := run("run", "--", "true"); code != 125 || !strings.Contains(errOut, "belongs to uid 1001") {
		t.Fatalf("with another user's XDG_RUNTIME_DIR: exit %d stderr %q, want a refusal", code, errOut)
	}
}

func TestRunEgressProfile(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"name":"docs","hosts":[{"host":"docs.test","ports":[443]}]}`), 0o644)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"name":"bad","hosts":[{"host":"user:pw@docs.test"}]}`), 0o644)
	// Port 80 is not in the profile: refused before any name is resolved.
	out, _, code := cordon(t, "run", "--egress-profile", good, "--", "curl", "-sS", "http://docs.test/")
	if code != 0 || !strings.Contains(out, "refused docs.test:80: no rule allows") {
		t.Fatalf("profile: %q %d", out, code)
	}
	if _, errOut, code := cordon(t, "run", "--egress-profile", bad, "--", "true"); code != 2 || !strings.Contains(errOut, "credentials") {
		t.Fatalf("bad profile: %q %d", errOut, code)
	}
}

// TestRunUserFlag: --user shows no sentinel default in the help, refuses a
// negative uid rather than taking it as not given, and maps 0 to root.
func TestRunUserFlag(t *testing.T) {
	help, _, _ := cordon(t, "run", "--help")
	if !strings.Contains(help, "-user UID") || strings.Contains(help, "(default -1)") {
		t.Errorf("--user in the help:\n%s", help)
	}
	if _, stderr, code := cordon(t, "run", "--user", "-1", "--", "true"); code != 2 || !strings.Contains(stderr, "want a uid") {
		t.Errorf("--user -1: exit %d, %s", code, stderr)
	}
	testutil.RequiresRoot(t)
	if out, stderr, code := cordon(t, "run", "--user", "0", "--", "id", "-u"); code != 0 || strings.TrimSpace(out) != "0" {
		t.Errorf("--user 0: %q exit %d, %s", out, code, stderr)
	}
}

// TestDefaultSocketOwner: without XDG_RUNTIME_DIR an ordinary user's
// default daemon socket is under the temp directory, where another user may
// have made it first; the verbs refuse one that is not theirs rather than
// send it their commands.
func TestDefaultSocketOwner(t *testing.T) {
	testutil.RequiresRoot(t) // to be two ordinary users
	bin := buildCLI(t)
	tmp := t.TempDir()
	if err := os.Chmod(filepath.Dir(tmp), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(tmp, "cordon-1000.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The other user's "daemon" takes anything.
	var asked atomic.Bool
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Store(true)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"sandboxes":[]}`)
	}))
	if err := os.Chown(sock, 1001, 1001); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "ls")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "TMPDIR=" + tmp}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "belongs to uid 1001") || asked.Load() {
		t.Fatalf("cordon ls with another user's socket: exit %d (asked it: %v): %s", cmd.ProcessState.ExitCode(), asked.Load(), out)
	}
}

// TestRunSetIDPlant: through `cordon run --mount`, on each tier that binds
// layout directories, a sandbox cannot leave a set-id program in a host
// directory (the host checks every file afterwards), a root-owned
// read-write directory is refused with the way out, and --mount-owner
// writes it as the user named.
func TestRunSetIDPlant(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, tier := range []string{"process", "container"} {
		t.Run(tier, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chown(dir, 1234, 1234); err != nil {
				t.Fatal(err)
			}
			script := `cd /mnt/user-data/outputs && cp /usr/bin/id x && chmod 0755 x && echo control
chmod 4755 x; chmod 2755 x; mkdir d; chmod 2775 d; install -m 6755 /usr/bin/id y
python3 -c 'import os; os.open("z", os.O_CREAT|os.O_WRONLY, 0o4755)' 2>/dev/null; true`
			out, stderr, code := cordon(t, "run", "--tier", tier, "--mount", "outputs="+dir, "--", "sh", "-c", script)
			if code != 0 || out != "control\n" || !strings.Contains(stderr, "Operation not permitted") {
				t.Fatalf("exit %d, stdout %q, stderr %s", code, out, stderr)
			}
			checkNoSetID(t, dir)

			root := t.TempDir()
			_, stderr, code = cordon(t, "run", "--tier", tier, "--mount", "outputs="+root, "--", "true")
			if code != 125 || !strings.Contains(stderr, "--mount-owner") {
				t.Fatalf("a root-owned outputs directory: exit %d, %s", code, stderr)
			}
			if err := os.Chmod(root, 0o1777); err != nil {
				t.Fatal(err)
			}
			out, stderr, code = cordon(t, "run", "--tier", tier, "--mount", "outputs="+root, "--mount-owner", "4321:4321", "--",
				"sh", "-c", "echo hi > /mnt/user-data/outputs/f && chmod 4755 /mnt/user-data/outputs/f; stat -c %U /mnt/user-data/outputs/f")
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(root, "f"), &st); err != nil || st.Uid != 4321 || code != 0 || out != "sandbox\n" {
				t.Fatalf("--mount-owner: owner %d (%v), exit %d, %q %s", st.Uid, err, code, out, stderr)
			}
			checkNoSetID(t, root)
		})
	}
}

// checkNoSetID fails t for every set-id file or directory under dir.
func checkNoSetID(t *testing.T, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("the host finds %s %v", p, fi.Mode())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCLIUsage: help goes to standard output with status 0, for cordon and
// each verb; a mistyped flag is one line naming --help (status 2), not the
// whole usage; sizes take the units people type, durations a bare number
// of seconds too; and the refusals say
// what to do: no daemon at an address, a cache collection with no bound,
// a host workspace on a tier without one.
func TestCLIUsage(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"ls", "--help"}, {"rm", "--help"}, {"events", "--help"}, {"create", "--help"}, {"exec", "--help"}, {"cp", "--help"}, {"serve", "--help"}, {"image", "--help"}, {"pool", "--help"}, {"key", "--help"}, {"template", "--help"}, {"snapshot", "--help"}} {
		out, errOut, code := cordon(t, args...)
		if code != 0 || !strings.HasPrefix(out, "usage: cordon") || errOut != "" || strings.Contains(out, "Usage of") {
			t.Errorf("%v: %d %q %q", args, code, out, errOut)
		}
	}
	if _, errOut, code := cordon(t, "ls", "--bogus"); code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "--help") {
		t.Errorf("a mistyped flag: %d %q", code, errOut)
	}
	for _, verb := range []string{"pool", "key", "template", "image"} {
		if _, errOut, code := cordon(t, verb, "bogus"); code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, `no subcommand "bogus"; there are`) {
			t.Errorf("a mistyped subcommand of %s: %d %q", verb, code, errOut)
		}
	}
	if _, errOut, code := cordon(t, "image", "gc"); code != 2 || !strings.Contains(errOut, "--max SIZE is required") {
		t.Errorf("image gc without --max: %d %q", code, errOut)
	}
	// Every verb on the daemon says so, those acting on many sandboxes
	// each once, without saying "cordon:" twice.
	for _, verb := range [][]string{{"ls"}, {"rm", "sbx_0000000000000000"}, {"update", "--ttl", "1h", "sbx_0000000000000000"}, {"pause", "sbx_0000000000000000"}, {"stats", "sbx_0000000000000000"}} {
		_, errOut, code := cordon(t, append([]string{verb[0], "--host", "unix://" + filepath.Join(t.TempDir(), "none.sock")}, verb[1:]...)...)
		if code != 125 || !strings.Contains(errOut, "no cordon daemon answers at") || !strings.Contains(errOut, "cordon serve") || strings.Count(errOut, "cordon:") != 1 {
			t.Errorf("%s with no daemon: %d %q", verb[0], code, errOut)
		}
	}
	// A local file that is not there is not a daemon that is not there.
	if _, errOut, code := cordon(t, "cp", "--host", "unix://"+filepath.Join(t.TempDir(), "none.sock"), filepath.Join(t.TempDir(), "missing"), "sbx_0000000000000000:x"); code != 125 || strings.Contains(errOut, "daemon") || !strings.Contains(errOut, "no such file") {
		t.Errorf("cp of a missing local file: %d %q", code, errOut)
	}
	// A URL or a name no resolver takes, where an egress rule goes, is
	// refused, not accepted to admit nothing.
	for rule, says := range map[string]string{"http://a.test/x": "here a.test:80", "a..test": "is no host name"} {
		if _, errOut, code := cordon(t, "run", "--allow", rule, "--", "true"); code != 2 || !strings.Contains(errOut, says) {
			t.Errorf("--allow %s: %d %q", rule, code, errOut)
		}
	}
	// An output format cordon does not write is refused, not ignored.
	if _, errOut, code := cordon(t, "ls", "-o", "yaml"); code != 2 || !strings.Contains(errOut, "the output format is json") {
		t.Errorf("ls -o yaml: %d %q", code, errOut)
	}
	for _, size := range []string{"1GB", "1g", "1GiB", "1.5G", "512m", "512MB"} {
		if _, errOut, code := cordon(t, "run", "--tier", "passthrough", "--memory", size, "--", "true"); code != 125 || !strings.Contains(errOut, "cannot enforce a memory limit") {
			t.Errorf("--memory %s: %d %q", size, code, errOut)
		}
	}
	// 0 is no limit, for --memory as for --pids (the passthrough tier
	// refuses any memory limit); a bare number of seconds is a duration;
	// the help names what a size or duration flag takes.
	if out, errOut, code := cordon(t, "run", "--tier", "passthrough", "--memory", "0", "--disk", "0", "--pids", "0", "--max-output", "0", "--", "echo", "none"); code != 0 || out != "none\n" {
		t.Errorf("--memory 0: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := cordon(t, "run", "--tier", "passthrough", "--timeout", "1", "--", "sleep", "30"); code != 124 {
		t.Errorf("--timeout 1 (seconds): %d %q", code, errOut)
	}
	if _, errOut, code := cordon(t, "run", "--timeout", "5x", "--", "true"); code != 2 || !strings.Contains(errOut, "not a duration like 30s") {
		t.Errorf("--timeout 5x: %d %q", code, errOut)
	}
	if out, _, _ := cordon(t, "run", "--help"); !strings.Contains(out, "-timeout duration\n") || !strings.Contains(out, "-memory size\n") || !strings.Contains(out, "-max-output size\n") {
		t.Errorf("run --help names no duration or size: %q", out)
	}
	// A bad size is a usage error (2), said with the flag's name, before
	// any sandbox.
	for flag, args := range map[string][]string{"memory": {"run", "--memory", "5x", "--", "true"}, "disk": {"run", "--disk", "-1", "--", "true"},
		"max-output": {"exec", "--max-output", "10q", "x", "true"}, "max": {"image", "gc", "--max", "1q"}} {
		if _, errOut, code := cordon(t, args...); code != 2 || !strings.Contains(errOut, "flag -"+flag+":") || !strings.Contains(errOut, "not a size") {
			t.Errorf("%v: %d %q", args, code, errOut)
		}
	}
	if out, _, _ := cordon(t, "serve", "--help"); !strings.Contains(out, "-disk-size size\n") || !strings.Contains(out, "(default 4g)") {
		t.Errorf("serve --help names no size: %q", out)
	}
	if _, errOut, code := cordon(t, "run", "--tier", "container", "--workspace", t.TempDir(), "--", "true"); code != 125 || !strings.Contains(errOut, "--mount outputs=DIR") {
		t.Errorf("--workspace on the container tier: %d %q", code, errOut)
	}
}

// TestRunEndsWithItsCommand: cordon run returns when the command's leader
// exits, with its status, even when it left a background child holding its
// output; the child is stopped and cordon says so. (It once waited for the
// child, here for 100 s.)
func TestRunEndsWithItsCommand(t *testing.T) {
	testutil.RequiresRoot(t)
	start := time.Now()
	out, errOut, code := cordon(t, "run", "--", "sh", "-c", "sleep 100 & echo started; exit 3")
	if code != 3 || out != "started\n" || !strings.Contains(errOut, "what it left running was stopped") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("cordon run took %v", took)
	}
	// Positive control: a command that leaves nothing says nothing of it.
	if _, errOut, code := cordon(t, "run", "--", "sh", "-c", "exit 2"); code != 2 || strings.Contains(errOut, "left running") {
		t.Fatalf("a plain command: exit %d, stderr %q", code, errOut)
	}
}

// TestRunStreamsStdin: cordon run -i passes input as it arrives (the command
// answers the first line before the second is typed) and ends it at
// cordon's end of input; input larger than any request body arrives whole.
func TestRunStreamsStdin(t *testing.T) {
	testutil.RequiresRoot(t)
	cmd := exec.Command(buildCLI(t), "run", "-i", "--", "sh", "-c", "while read l; do echo got-$l; done; echo eof")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testutil.SyncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "one\n")
	for deadline := time.Now().Add(15 * time.Second); out.String() != "got-one\n" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if out.String() != "got-one\n" {
		t.Fatalf("after the first line: %q", out.String())
	}
	io.WriteString(stdin, "two\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil || out.String() != "got-one\ngot-two\neof\n" {
		t.Fatalf("%v: %q", err, out.String())
	}
	// 40 MiB of every byte value, checked by its digest inside.
	data := make([]byte, 40<<20)
	for i := range data {
		data[i] = byte(i*131 + i>>9)
	}
	sum := sha256.Sum256(data)
	big := exec.Command(buildCLI(t), "run", "-i", "--", "sha256sum")
	big.Stdin = bytes.NewReader(data)
	got, err := big.Output()
	if err != nil || !strings.HasPrefix(string(got), hex.EncodeToString(sum[:])) {
		t.Fatalf("40 MiB through stdin: %v %q", err, got)
	}
}

// TestRunStdinConstantMemory: input larger than the memory cordon may use
// passes through cordon run -i whole: cordon streams it rather than
// holding it. (cordon's own peak, read from /proc while it runs: a
// wait's rusage would count the sandbox's processes too.)
func TestRunStdinConstantMemory(t *testing.T) {
	testutil.RequiresRoot(t)
	const size = 128 << 20
	cmd := exec.Command(buildCLI(t), "run", "-i", "--", "wc", "-c")
	cmd.Stdin = io.LimitReader(zeros{}, size)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peakKiB int64
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-time.After(20 * time.Millisecond):
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					if kib, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64); err == nil {
						peakKiB = max(peakKiB, kib)
					}
				}
			}
		}
	}
	if strings.TrimSpace(out.String()) != strconv.Itoa(size) {
		t.Fatalf("wc counted %q", out.String())
	}
	t.Logf("cordon's peak resident memory: %d KiB", peakKiB)
	if peakKiB == 0 || peakKiB > 96<<10 {
		t.Fatalf("cordon run -i peaked at %d KiB for %d MiB of input", peakKiB, size>>20)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestRunInterruptedStart: Ctrl-C while the sandbox is still starting
// (gVisor's start is long enough to catch) ends cordon run with 130, as
// for a command, without calling it a failure of the sandbox, and leaves
// nothing of the sandbox behind.
func TestRunInterruptedStart(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "/usr/local/lib/cordon/runsc")
	state := testutil.StateDir(t)
	cmd := exec.Command(buildCLI(t), "run", "--tier", "gvisor", "--", "true")
	cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+state)
	var e bytes.Buffer
	cmd.Stderr = &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The sandbox's directory appears as its start begins.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(state, "gvisor", "cordon-*")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sandbox started: %s", e.String())
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || strings.Contains(e.String(), "failed") {
		t.Fatalf("exit %d, want 130; stderr %s", code, e.String())
	}
	if m, _ := filepath.Glob(filepath.Join(state, "gvisor", "cordon-*")); len(m) > 0 {
		t.Fatalf("left behind: %v", m)
	}
}

// TestRunMountThroughLink: cordon run takes a --mount directory named
// through a symbolic link by its real path (the tiers refuse a path with a
// link on its way, host.ExactDir).
func TestRunMountThroughLink(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(real, "f"), []byte("through the link\n"), 0o644)
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := cordon(t, "run", "--mount", "uploads="+filepath.Join(dir, "link"), "--", "cat", "/mnt/user-data/uploads/f"); code != 0 || out != "through the link\n" {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
}
