//go:build linux

package process_test

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

func backend(t *testing.T) *process.Backend {
	testutil.RequiresRoot(t)
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: stateDir(t)})
	if err := b.Probe(t.Context()); err != nil {
		testutil.Missing(t, "process tier unavailable: %v", err)
	}
	return b
}

// stateDir is the test's own, the same each time it asks, so posture
// checks can look in it.
func stateDir(t *testing.T) string { return testutil.StateDir(t) }

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.PassingTCP(conformance.FromBackend(backend(t), sandbox.Spec{})))
}

func create(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	return createOn(t, backend(t), spec)
}

// createOn creates a sandbox on b, destroyed when the test ends.
func createOn(t *testing.T, b *process.Backend, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	return sandboxtest.Create(t, b, spec)
}

// sh runs script inside and returns stdout, stderr and the result.
func sh(t *testing.T, sb *sandbox.Sandbox, script string) (string, string, *sandbox.Result) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", script}, Stdout: &out, Stderr: &errb, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), errb.String(), res
}

func TestRefusals(t *testing.T) {
	p := sandbox.NewProvider([]sandbox.Backend{backend(t)})
	if _, err := p.Create(t.Context(), sandbox.Spec{Workspace: t.TempDir()}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("host workspace: %v", err)
	}
}

func TestRootFS(t *testing.T) {
	bb := testutil.Requires(t, "busybox")[0]
	root := t.TempDir()
	// .scratch and .cordon-scratch: names an image may hold, which cordon
	// must not need for itself.
	for _, d := range []string{"bin", "etc", ".scratch", ".cordon-scratch"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755)
	for _, applet := range []string{"sh", "cat", "ls", "touch", "id"} {
		os.Symlink("busybox", filepath.Join(root, "bin", applet))
	}
	os.WriteFile(filepath.Join(root, "etc", "marker"), []byte("from the rootfs\n"), 0o644)
	// The sandbox's init reads the root as an unprivileged mapped user.
	os.Chmod(root, 0o755)
	os.Chmod(filepath.Dir(root), 0o755)
	sb := create(t, sandbox.Spec{RootFS: root})
	out, errOut, res := sh(t, sb, "cat /etc/marker; ls /bin | wc -l; touch /etc/x; test -e /usr/bin/python3 || echo no-host-usr")
	if !strings.HasPrefix(out, "from the rootfs\n") || !strings.Contains(out, "no-host-usr") || !strings.Contains(errOut, "Read-only") || res.ExitCode != 0 {
		t.Fatalf("stdout %q stderr %q res %+v", out, errOut, res)
	}
}

// TestLayout: the layout directories, as on every tier (see
// adversarial.Layout).
func TestLayout(t *testing.T) { adversarial.Layout(t, create) }

// TestPrestart: sandboxes from the pool of waiting inits behave like any
// other, each with its own token and workspace, and Close ends the pool.
func TestPrestart(t *testing.T) {
	testutil.RequiresRoot(t)
	// A state directory of its own: what is in it is this pool's.
	dir := testutil.StateDir(t)
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: dir, Prestart: 2})
	defer b.Close()
	p := sandbox.NewProvider([]sandbox.Backend{b})
	var tokens []string
	// A slot's init record is the last thing written before it joins the
	// pool.
	slots := func() int {
		n := 0
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "init")); err == nil && strings.HasPrefix(e.Name(), "sb-") {
				n++
			}
		}
		return n
	}
	for i := 0; i < 4; i++ {
		var before map[string]bool
		if i > 0 {
			// Creates have paused: the pool refills to its two inits.
			for deadline := time.Now().Add(20 * time.Second); slots() < 2; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the pool did not refill before sandbox %d", i)
				}
			}
			time.Sleep(200 * time.Millisecond)
			before = map[string]bool{}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				before[e.Name()] = true
			}
		}
		// Layout trees travel with the configuration, so a sandbox with
		// layout directories is taken from the pool too.
		outputs := t.TempDir()
		os.Chown(outputs, 1234, 1234) // written as root's, it would be refused
		sb, err := p.Create(t.Context(), sandbox.Spec{Limits: sandbox.Limits{Pids: 64}, Layout: sandbox.Layout{Outputs: outputs}})
		if err != nil {
			t.Fatal(err)
		}
		// After the first, each sandbox is an init that waited in the pool:
		// its directory was there before its create.
		if i > 0 {
			a, err := sb.Persist()
			var st struct{ Dir string }
			if err == nil {
				err = json.Unmarshal(a.State, &st)
			}
			if err != nil || !before[filepath.Base(st.Dir)] {
				t.Errorf("sandbox %d (%s, %v) was started cold, not taken from the pool", i, st.Dir, err)
			}
		}
		if _, _, res := sh(t, sb, "echo hi > /mnt/user-data/outputs/f"); res.ExitCode != 0 {
			t.Fatalf("sandbox %d: writing to its outputs failed", i)
		}
		if b, err := os.ReadFile(filepath.Join(outputs, "f")); err != nil || string(b) != "hi\n" {
			t.Fatalf("sandbox %d: outputs on the host: %q %v", i, b, err)
		}
		out, _, res := sh(t, sb, "ls /workspace | wc -l; touch /workspace/mine; id -u")
		if out != "0\n1000\n" || res.ExitCode != 0 {
			t.Fatalf("sandbox %d: %q", i, out)
		}
		tokens = append(tokens, sb.Client().Endpoint().Token)
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, tok := range tokens {
		if seen[tok] {
			t.Fatal("two sandboxes shared a token")
		}
		seen[tok] = true
	}
	b.Close()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "init")); err == nil {
			f := strings.Fields(string(b))
			if _, err := os.Stat("/proc/" + f[0]); err == nil {
				if st, _ := os.ReadFile("/proc/" + f[0] + "/stat"); !strings.Contains(string(st), ") Z ") {
					t.Errorf("pool init %s outlived Close", f[0])
				}
			}
		}
	}
}

func TestPauseResume(t *testing.T) {
	sb := create(t, sandbox.Spec{})
	if !sb.CanPause() {
		testutil.Missing(t, "no cgroup freezer here")
	}
	sandboxtest.PauseResume(t, sb)
}

// TestDiscard: Destroy lets a command still running act on SIGTERM (the
// agent stops it with a grace period); Discard, for a sandbox whose work
// is over (a one-shot run's), kills everything at once. A command that
// leaves a mark on SIGTERM, in a directory of the host's, shows which it
// got.
func TestDiscard(t *testing.T) {
	p := sandbox.NewProvider([]sandbox.Backend{backend(t)})
	for _, discard := range []bool{false, true} {
		outputs := t.TempDir()
		os.Chown(outputs, 1234, 1234) // written as root's, it would be refused
		sb, err := p.Create(t.Context(), sandbox.Spec{Layout: sandbox.Layout{Outputs: outputs}})
		if err != nil {
			t.Fatal(err)
		}
		running := make(chan error, 1)
		go func() {
			_, err := sb.Exec(context.WithoutCancel(t.Context()), "sh", sandbox.ExecOptions{Args: []string{"-c",
				`trap 'echo term > /mnt/user-data/outputs/termed; exit 0' TERM; echo up > /mnt/user-data/outputs/up; while :; do sleep 0.05; done`}})
			running <- err
		}()
		for i := 0; ; i++ {
			if _, err := os.Stat(filepath.Join(outputs, "up")); err == nil {
				break
			}
			if i == 500 {
				t.Fatal("the command did not start")
			}
			time.Sleep(20 * time.Millisecond)
		}
		teardown := sb.Destroy
		if discard {
			teardown = sb.Discard
		}
		if err := teardown(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-running
		_, err = os.Stat(filepath.Join(outputs, "termed"))
		if termed := err == nil; termed == discard {
			t.Errorf("discard %v: the running command acted on SIGTERM: %v", discard, termed)
		}
	}
}

// TestDebianRoot: a Debian minbase root runs on the process tier, read-only.
func TestDebianRoot(t *testing.T) {
	adversarial.DebianRoot(t, create, testutil.DebianMinbase(t))
}

// TestReadyRecord: the agent hands its host, on the readiness pipe, what an
// authenticated healthz would answer and a spare reservation; the host
// admits from it without a request, and the spare runs the first command.
func TestReadyRecord(t *testing.T) { checkReadyRecord(t, backend(t)) }

func checkReadyRecord(t *testing.T, b *process.Backend) {
	token, err := sandbox.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	inst, err := b.Start(t.Context(), sandbox.Launch{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.WithoutCancel(t.Context()))
	rr, ok := inst.(sandbox.ReadyReporter)
	if !ok {
		t.Fatal("the process tier's instance does not report a ready record")
	}
	select {
	case <-rr.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the agent never became ready")
	}
	var rec wire.ReadyRecord
	if err := json.Unmarshal(rr.ReadyRecord(), &rec); err != nil {
		t.Fatalf("ready record %q: %v", rr.ReadyRecord(), err)
	}
	if rec.Spare == nil || !wire.ValidExecutionID(rec.Spare.ExecutionID) {
		t.Fatalf("no spare reservation in %+v", rec)
	}
	c := client.New(inst.Endpoint())
	defer c.Close()
	h, err := c.AdmitRecord(rr.ReadyRecord())
	if err != nil {
		t.Fatal(err)
	}
	live, err := c.Health(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if h.BootID == "" || h.BootID != live.BootID || !slices.Equal(h.Features, live.Features) {
		t.Fatalf("record says %+v, healthz says %+v", h, live)
	}
	// The spare is a live reservation: the command runs on it.
	var out bytes.Buffer
	res, err := c.Exec(t.Context(), "echo", client.ExecOptions{Args: []string{"hi"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("first command: %+v %v %q", res, err, out.String())
	}
	state := settledState(t, c, rec.Spare.ExecutionID)
	if state != "completed" {
		t.Fatalf("the spare reservation is %q after the first command, want it to have run it (completed)", state)
	}
}

// TestCgoAgent: an agent built with cgo, as `go install` builds it where a
// C compiler is present, cannot confine every thread of its own, so the init
// executes it instead of becoming it. It still hands its host the ready
// record (the host would otherwise poll the socket) and holds against the
// adversarial suite.
func TestCgoAgent(t *testing.T) {
	testutil.RequiresRoot(t)
	path := testutil.BuildAgentCgo(t)
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(info.Settings, debug.BuildSetting{Key: "CGO_ENABLED", Value: "1"}) {
		t.Fatalf("the agent at %s is not a cgo build: %v", path, info.Settings)
	}
	b := process.New(process.Config{AgentPath: path, StateDir: stateDir(t)})
	if err := b.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	create := func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return createOn(t, b, spec) }
	t.Run("ready record", func(t *testing.T) { checkReadyRecord(t, b) })
	t.Run("adversarial", func(t *testing.T) { adversarial.Run(t, create) })
	t.Run("limits", func(t *testing.T) { adversarial.Limits(t, b.Capabilities(), create) })
	t.Run("escapees", func(t *testing.T) { adversarial.Escapees(t, create) })
}

// TestTaskCeiling: a sandbox without a pids limit still has a ceiling on
// its processes and threads (baseline.DefaultTasks unless configured) that
// nothing inside can raise, so a fork bomb stops there rather than taking
// every pid of the host; a pids limit replaces it.
func TestTaskCeiling(t *testing.T) {
	const limits = "grep 'Max processes' /proc/self/limits"
	out, _, _ := sh(t, create(t, sandbox.Spec{}), limits)
	if f := strings.Fields(out); len(f) < 4 || f[2] != strconv.Itoa(baseline.DefaultTasks) || f[3] != f[2] {
		t.Fatalf("without a pids limit: %q, want soft and hard %d", out, baseline.DefaultTasks)
	}
	out, _, _ = sh(t, create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 50}}), limits)
	if strings.Contains(out, " "+strconv.Itoa(baseline.DefaultTasks)+" ") {
		t.Fatalf("with a pids limit the ceiling is still set: %q", out)
	}

	const ceiling = 100
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: stateDir(t), Tasks: ceiling})
	sb := createOn(t, b, sandbox.Spec{})
	if out := adversarial.Py(t, sb, "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_NPROC, (1000, 1000))\n    print('raised')\nexcept (ValueError, OSError) as e:\n    print('refused')"); out != "refused\n" {
		t.Fatalf("raising the ceiling from inside: %q", out)
	}
	if n, code := adversarial.CountForks(t, sb); code != "EAGAIN" || n >= ceiling {
		t.Fatalf("forked %d times, then %s; want fewer than %d, then EAGAIN", n, code, ceiling)
	}
	if out, _, _ := sh(t, sb, "echo alive"); out != "alive\n" {
		t.Fatalf("after the forks: %q", out)
	}
	// A real bomb: it stops at the ceiling (the agent, which has no reserve
	// here, may go down with it), and the sandbox is still torn down.
	bomb := createOn(t, b, sandbox.Spec{})
	res, err := bomb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", "(bomb() { bomb | bomb & }; bomb); exec sleep 300"}, Timeout: 2 * time.Second})
	t.Logf("fork bomb: %+v %v", res, err)
	if err := bomb.Destroy(t.Context()); err != nil {
		t.Fatalf("destroy after the bomb: %v", err)
	}
}

// TestScratch: /tmp, /var/tmp, /workspace and /home/sandbox are one tmpfs
// (a sandbox cannot fill four times the memory), each with its mode and
// owner, nosuid and nodev but executable; with a memory limit the tmpfs is
// no larger.
func TestScratch(t *testing.T) {
	dirs := strings.Join([]string{"/tmp", "/var/tmp", baseline.Workspace, baseline.Home}, " ")
	sb := create(t, sandbox.Spec{})
	out, _, _ := sh(t, sb, "stat -c '%n %a %U' "+dirs+"; printf '#!/bin/sh\\necho ran\\n' >/workspace/x; chmod +x /workspace/x; /workspace/x")
	for _, want := range []string{"/tmp 1777 root", "/var/tmp 1777 root", baseline.Workspace + " 755 sandbox", baseline.Home + " 700 sandbox", "ran"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	// 8 MiB written to /tmp are used in every one of them.
	out, _, _ = sh(t, sb, "dd if=/dev/zero of=/tmp/f bs=1M count=8 2>/dev/null; df -k --output=used "+dirs+" | tail -n +2")
	used := strings.Fields(out)
	if len(used) != 4 || len(slices.Compact(slices.Clone(used))) != 1 {
		t.Errorf("usage of the scratch directories: %q", out)
	} else if n, _ := strconv.Atoi(used[0]); n < 8<<10 {
		t.Errorf("usage after writing 8 MiB: %q", out)
	}
	mi, _, _ := sh(t, sb, "cat /proc/self/mountinfo")
	var device string
	for _, d := range strings.Fields(dirs) {
		line := ""
		for _, l := range strings.Split(mi, "\n") {
			if f := strings.Fields(l); len(f) > 5 && f[4] == d {
				line, device = l, f[2]
			}
		}
		if !strings.Contains(line, "nosuid,nodev") || strings.Contains(line, "noexec") || !strings.Contains(line, " - tmpfs ") {
			t.Errorf("%s is mounted %q", d, line)
		}
	}
	// The tmpfs itself, whose root holds all four, is mounted nowhere.
	for _, l := range strings.Split(mi, "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[2] == device && f[3] == "/" {
			t.Errorf("the scratch tmpfs is mounted whole: %q", l)
		}
	}
	limited := create(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 96 << 20}})
	// (The writable space is half the memory limit by default.)
	if out, _, _ := sh(t, limited, "df -k --output=size /tmp | tail -1"); strings.TrimSpace(out) != strconv.Itoa(48<<10) {
		t.Errorf("/tmp of a 96 MiB sandbox holds %s KiB", out)
	}
}

// TestCgroupsJoined: a sandbox's init joins a cgroup of its own in the
// memory controller always (it counts OOM kills), in the pids and cpu
// controllers only for their limits, and in the v1 freezer not at all where
// cgroup2 freezes.
func TestCgroupsJoined(t *testing.T) {
	joined := func(spec sandbox.Spec) map[string]bool {
		sb := create(t, spec)
		a, err := sb.Persist()
		var st struct{ Dir string }
		if err == nil {
			err = json.Unmarshal(a.State, &st)
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(st.Dir, "init"))
		if err != nil {
			t.Fatal(err)
		}
		cg, err := os.ReadFile("/proc/" + strings.Fields(string(b))[0] + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		own := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			f := strings.SplitN(line, ":", 3)
			for _, c := range strings.Split(f[1], ",") {
				own[c] = strings.Contains(f[2], filepath.Base(st.Dir))
			}
		}
		return own
	}
	none := joined(sandbox.Spec{})
	if in, ok := none[""]; ok && len(none) == 1 {
		// cgroup2: one hierarchy, the sandbox's cgroup in it with or
		// without limits.
		if !in || !joined(sandbox.Spec{Limits: sandbox.Limits{Pids: 64, MemoryBytes: 256 << 20}})[""] {
			t.Fatal("a sandbox's init is not in its cgroup2 cgroup")
		}
		return
	}
	if _, ok := none["pids"]; !ok {
		testutil.Missing(t, "needs cgroup v1 controllers")
	}
	limited := joined(sandbox.Spec{Limits: sandbox.Limits{Pids: 64, CPUs: 1}})
	if !none["memory"] || none["pids"] || none["cpu"] || none["freezer"] || !limited["pids"] || !limited["cpu"] {
		t.Errorf("own cgroups without limits %v, with pids and CPU limits %v", none, limited)
	}
}

// TestCommandsPidsApart: under a pids limit on cgroup v1, commands run in a
// pids cgroup of their own below the sandbox's, and of the agent's threads
// only the one commands are forked from is there: the agent then makes no
// spare threads. An agent the init executes (a cgo build) forks from
// another thread: nothing moves, and it keeps its spares. Without a pids
// limit there is no such cgroup.
func TestCommandsPidsApart(t *testing.T) {
	if !pidsApartHere() {
		testutil.Missing(t, "needs a pids controller (cgroup v1's, or cgroup2's)")
	}
	// (v1's pids line, or cgroup2's one.)
	const script = "grep -E ':pids:|^0::' /proc/self/cgroup; grep -hE ':pids:|^0::' /proc/1/task/*/cgroup | sort | uniq -c"
	pids := func(t *testing.T, b *process.Backend, limit int64) (self string, threads map[string]int) {
		out, _, _ := sh(t, createOn(t, b, sandbox.Spec{Limits: sandbox.Limits{Pids: limit}}), script)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		self, threads = lines[0], map[string]int{}
		for _, l := range lines[1:] {
			var n int
			var where string
			fmt.Sscan(l, &n, &where)
			threads[where[strings.LastIndex(where, ":")+1:]] = n
		}
		return self[strings.LastIndex(self, ":")+1:], threads
	}
	if self, threads := pids(t, backend(t), 64); self != "/commands" || threads["/commands"] != 1 || threads["/"] < 2 || threads["/"] >= baseline.ReserveThreads {
		t.Errorf("a command's pids cgroup %q, the agent's threads in each %v: want /commands, and only the first thread there, no spares", self, threads)
	}
	if self, threads := pids(t, backend(t), 0); self != "/" || threads["/commands"] != 0 {
		t.Errorf("without a pids limit: a command's pids cgroup %q, the agent's threads %v", self, threads)
	}
	if os.Getenv(testutil.EnvGuestAgent) != "" {
		t.Log("a guest (the microvm tier's cgroup-v2 test bed) has no toolchain to build a cgo agent: that part runs on the host")
		return
	}
	// (Its command thread may be its first, which is then moved.)
	cgo := process.New(process.Config{AgentPath: testutil.BuildAgentCgo(t), StateDir: stateDir(t)})
	self, threads := pids(t, cgo, 64)
	moved := self == "/commands" && threads["/commands"] == 1
	if !moved && (self != "/" || threads["/commands"] != 0) || threads["/"] < baseline.ReserveThreads {
		t.Errorf("a cgo-built agent: a command's pids cgroup %q, the agent's threads %v: want its command thread alone moved, or nothing, and its 16 spares", self, threads)
	}
}

// TestSocketDir: the agent's socket directory, which is the host's, is
// read-only inside, to the workload's root too: nothing it makes there
// lands on the host's disk. The agent's socket is the host's, so nothing
// inside, root included, can connect to it, and the agent still serves
// (with a cgo-built agent too, which the init executes with the socket).
func TestSocketDir(t *testing.T) {
	root := 0
	script := "touch /run/cordon/f 2>&1; mkdir /run/cordon/d 2>&1; python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/run/cordon/s\")' 2>&1 | tail -1; rm /run/cordon/egress.sock 2>&1; python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"/run/cordon/agent.sock\")' 2>&1 | tail -1"
	check := func(t *testing.T, b *process.Backend) {
		for _, spec := range []sandbox.Spec{{}, {User: &root}} {
			out, _, _ := sh(t, createOn(t, b, spec), script)
			if strings.Count(out, "Read-only file system") != 4 || !strings.Contains(out, "Permission denied") {
				t.Errorf("root inside %v, in the socket directory:\n%s", spec.User != nil, out)
			}
		}
	}
	t.Run("Static", func(t *testing.T) { check(t, backend(t)) })
	t.Run("Cgo", func(t *testing.T) {
		check(t, process.New(process.Config{AgentPath: testutil.BuildAgentCgo(t), StateDir: stateDir(t)}))
	})
}

// TestMaskMounts: each masked file is /dev/null, bound read-only, and each
// masked directory an empty read-only tmpfs (all but the first of each kind
// binds of that first, which must carry its read-only flag).
func TestMaskMounts(t *testing.T) {
	sb := create(t, sandbox.Spec{})
	mi, _, _ := sh(t, sb, "cat /proc/self/mountinfo; ls -A /")
	want := map[string]string{"/etc/shadow": "/null", "/proc/kallsyms": "/null", "/proc/keys": "/null", "/etc/ssh": "/", "/var/log": "/"}
	for _, l := range strings.Split(mi, "\n") {
		f := strings.Fields(l)
		if strings.Contains(l, ".cordon-null") {
			t.Errorf("the mask source is left: %q", l)
		}
		if len(f) < 6 {
			continue
		}
		root, ok := want[f[4]]
		if !ok {
			continue
		}
		delete(want, f[4])
		if f[3] != root || !strings.HasPrefix(f[5], "ro,") {
			t.Errorf("%s is mounted %q", f[4], l)
		}
	}
	if len(want) > 0 {
		t.Errorf("not masked: %v\n%s", want, mi)
	}
}

// settledState is the state /cancel reports for a settled execution.
func settledState(t *testing.T, c *client.Client, id string) string {
	term, err := c.Cancel(t.Context(), id)
	if err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
	return term.State
}

// ownStateDir is a state directory for a test's own backend.
func ownStateDir(t *testing.T) string {
	dir := t.TempDir()
	// The sandbox's mapped users must be able to pass through it.
	os.Chmod(dir, 0o711)
	os.Chmod(filepath.Dir(dir), 0o711)
	return dir
}

// TestNetNamespaceEveryThread: every thread of the agent, static and cgo,
// is in the sandbox's network namespace, none in the host's (read from the
// host, since the workload may not read the agent's).
func TestNetNamespaceEveryThread(t *testing.T) {
	testutil.RequiresRoot(t)
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, agent := range []string{testutil.BuildAgent(t), testutil.BuildAgentCgo(t)} {
		dir := ownStateDir(t)
		b := process.New(process.Config{AgentPath: agent, StateDir: dir})
		t.Cleanup(func() { b.Close() })
		sb := createOn(t, b, sandbox.Spec{})
		inside, _, _ := sh(t, sb, "readlink /proc/self/ns/net")
		var pid string
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if rec, err := os.ReadFile(filepath.Join(dir, e.Name(), "init")); err == nil {
				pid = strings.Fields(string(rec))[0]
			}
		}
		tasks, err := os.ReadDir("/proc/" + pid + "/task")
		if err != nil || len(tasks) < 2 {
			t.Fatalf("the agent's threads: %v %v", tasks, err)
		}
		for _, task := range tasks {
			ns, err := os.Readlink("/proc/" + pid + "/task/" + task.Name() + "/ns/net")
			if err != nil || ns+"\n" != inside || ns == host {
				t.Errorf("%s: thread %s is in %q (%v); the sandbox's command in %q, this host in %q", filepath.Base(agent), task.Name(), ns, err, inside, host)
			}
		}
	}
}

// pidsApartHere reports whether this host holds a sandbox's commands'
// pids apart from its agent's: it has cgroup v1's pids controller, or
// cgroup2's.
func pidsApartHere() bool {
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		return true
	}
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	return err == nil && strings.Contains(" "+string(b)+" ", " pids ")
}

// TestSpareThreads: the agent keeps its spare threads (the reserve against
// an exhausted pids limit) only in a sandbox that has a pids limit, and
// only where its commands' pids are not held apart from its own.
func TestSpareThreads(t *testing.T) {
	threads := func(spec sandbox.Spec) int {
		sb := create(t, spec)
		out, _, _ := sh(t, sb, "ls /proc/1/task | wc -l")
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("%q", out)
		}
		return n
	}
	without, with := threads(sandbox.Spec{}), threads(sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	// Where the commands' pids are held apart instead, the agent makes
	// none (TestCommandsPidsApart).
	if apart := pidsApartHere(); without >= baseline.ReserveThreads || apart != (with < baseline.ReserveThreads) {
		t.Fatalf("agent threads: %d without a pids limit, %d with one (commands held apart: %v); want fewer than %d, then at least that unless apart", without, with, apart, baseline.ReserveThreads)
	}
}

// TestRootInside: a sandbox whose user is root inside holds no capability
// either in its commands, and its agent's threads only CAP_SETUID and
// CAP_SETGID (to start commands as root), and has no_new_privs and seccomp
// everywhere (the credential change clears nothing by itself when the
// effective user stays 0).
func TestRootInside(t *testing.T) {
	root := 0
	sb := create(t, sandbox.Spec{User: &root})
	out, _, _ := sh(t, sb, "id -u; grep -hE '^(CapEff|CapPrm|CapAmb|CapInh|NoNewPrivs|Seccomp):' /proc/self/status; echo agent; grep -hE '^(CapEff|CapPrm|CapAmb|CapInh|NoNewPrivs|Seccomp):' /proc/1/task/*/status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 10 || lines[0] != "0" {
		t.Fatalf("want uid 0 and status lines:\n%s", out)
	}
	agent := false
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		want := "0000000000000000"
		switch {
		case f[0] == "agent":
			agent = true
			continue
		case f[0] == "NoNewPrivs:":
			want = "1"
		case f[0] == "Seccomp:":
			want = "2"
		case agent && (f[0] == "CapEff:" || f[0] == "CapPrm:"):
			want = "00000000000000c0"
		}
		if f[1] != want {
			t.Errorf("%s (agent: %v), want %s", l, agent, want)
		}
	}
}

// TestHostGroups: supplementary groups of the process that creates a
// sandbox are host groups (adm, docker, …) and must not reach it, neither
// its commands nor any thread of its agent, as the default user or as
// root inside. Before the fix they showed as 65534 inside and kept their
// host rights.
func TestHostGroups(t *testing.T) {
	testutil.RequiresRoot(t)
	old, err := syscall.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgroups([]int{4, 27}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setgroups(old); err != nil {
			t.Errorf("restore groups: %v", err)
		}
	})
	root := 0
	for _, spec := range []sandbox.Spec{{}, {User: &root}} {
		sb := create(t, spec)
		out, _, _ := sh(t, sb, "grep -h '^Groups:' /proc/self/status /proc/1/task/*/status")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 3 {
			t.Fatalf("want status lines:\n%s", out)
		}
		for _, l := range lines {
			if strings.TrimSpace(strings.TrimPrefix(l, "Groups:")) != "" {
				t.Errorf("user %v: %q, want no supplementary group", spec.User, l)
			}
		}
	}
}

// TestStateDirRefused: a state directory another user could change (its
// owner, a writer, or the owner of a directory above it), or a symlink
// where it should be, is refused with the reason: that user could put a
// socket of their own where the host expects its agent. The refusal comes
// from Probe and from every create; a directory of this user's own works.
func TestStateDirRefused(t *testing.T) {
	testutil.RequiresRoot(t)
	base := t.TempDir()
	for _, p := range []string{base, filepath.Dir(base)} { // sandboxes pass through
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	holding := func(dir string) string {
		if err := os.WriteFile(filepath.Join(dir, "planted"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mk("target", 0o711, 0), link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, dir, want string }{
		{"OtherOwner", mk("other", 0o711, 65534), "belongs to uid 65534"},
		// (one that holds something: an empty one is closed and taken,
		// privdir.Ensure)
		{"WritableByOthers", holding(mk("open", 0o777, 0)), "can be written by other users"},
		{"ParentOfOther", filepath.Join(mk("parent", 0o755, 65534), "state"), "belongs to uid 65534, who could rename"},
		{"OpenParent", filepath.Join(mk("openparent", 0o777, 0), "state"), "is not sticky"},
		{"Symlink", link, "is not a directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: c.dir})
			err := b.Probe(t.Context())
			if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Probe: %v, want %q", err, c.want)
			}
			_, err = sandbox.NewProvider([]sandbox.Backend{b}).Create(t.Context(), sandbox.Spec{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Create: %v, want %q", err, c.want)
			}
		})
	}
	t.Run("Own", func(t *testing.T) {
		b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: mk("own", 0o711, 0)})
		sb := createOn(t, b, sandbox.Spec{})
		if res, err := sb.Exec(t.Context(), "true", sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
	})
}

// TestPersistentDisk: a persistent workspace on a disk of the provider's
// (sandbox.WithDisks), suspended and resumed.
func TestPersistentDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a disk is a loop mount: root only")
	}
	sandboxtest.PersistentDisk(t, backend(t))
}
