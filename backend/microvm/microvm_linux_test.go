package microvm_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/microvm"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/disk"
	"github.com/cordon-sandbox/cordon/internal/testnet"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

// stateDir is the package's tests' one state directory: a saved guest is
// made once for all of them.
var stateDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cordon-microvm-test-")
	if err != nil {
		panic(err)
	}
	stateDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func backend(t testing.TB) *microvm.Backend {
	t.Helper()
	testutil.RequiresRoot(t)
	b := microvm.New(microvm.Config{AgentPath: testutil.BuildAgent(t), StateDir: stateDir})
	if err := b.Probe(t.Context()); err != nil {
		testutil.Missing(t, "microvm tier unavailable: %v", err)
	}
	return b
}

func TestExec(t *testing.T) {
	b := backend(t)
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	out, res := sandboxtest.Sh(t, sb, "echo hello from $(uname -r); id -u; cat /proc/1/comm; ls /sys/fs/cgroup | head -3")
	t.Logf("accel %s: %q %+v", b.Accel(), out, res)
	if !strings.HasPrefix(out, "hello from ") {
		t.Fatalf("%q", out)
	}
}

// TestRestoredGuestsDiffer: two sandboxes restored from one saved guest
// have their own boot ids, tokens, random streams and files.
func TestRestoredGuestsDiffer(t *testing.T) {
	b := backend(t)
	var sbs []*sandbox.Sandbox
	var outs []string
	var saved [][]string
	for range 2 {
		sb := sandboxtest.Create(t, b, sandbox.Spec{})
		// Both from the one saved guest of their kind: starting from it
		// does not make it anew.
		files, _ := filepath.Glob(filepath.Join(stateDir, "saved-*.vmstate"))
		saved = append(saved, files)
		if d := sb.Diagnostics(); !strings.Contains(d, "restored from a saved guest") {
			t.Fatalf("not restored:\n%s", d)
		}
		if ls, _ := sandboxtest.Sh(t, sb, "ls -A /workspace /tmp; echo mine > /workspace/f"); ls != "/tmp:\n\n/workspace:\n" {
			t.Fatalf("a restored guest found files: %q", ls)
		}
		out, _ := sandboxtest.Sh(t, sb, "head -c 16 /dev/urandom | od -An -tx1; cat /proc/sys/kernel/random/boot_id")
		sbs, outs = append(sbs, sb), append(outs, out)
	}
	if !slices.Equal(saved[0], saved[1]) {
		t.Errorf("saved guests after the first VM %v, after the second %v", saved[0], saved[1])
	}
	if outs[0] == outs[1] || sbs[0].BootID() == sbs[1].BootID() || sbs[0].BootID() == "" || sbs[0].Client().Endpoint().Token == sbs[1].Client().Endpoint().Token {
		t.Fatalf("two restored guests share state (boot ids %q %q):\n%s\n%s", sbs[0].BootID(), sbs[1].BootID(), outs[0], outs[1])
	}
	// Each agent demands its own token.
	if _, err := client.New(client.Endpoint{Network: "unix", Address: sbs[0].Client().Endpoint().Address, Token: sbs[1].Client().Endpoint().Token}).Exec(t.Context(), "true", client.ExecOptions{}); err == nil {
		t.Fatal("a guest's agent admitted another's token")
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.FromBackend(backend(t), sandbox.Spec{}))
}

func creator(b *microvm.Backend) adversarial.Create {
	return func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox { return sandboxtest.Create(t, b, spec) }
}

func TestAdversarial(t *testing.T) {
	adversarial.Run(t, creator(backend(t)))
}

func TestLimits(t *testing.T) {
	b := backend(t)
	adversarial.Limits(t, b.Capabilities(), creator(b))
}

// TestSpaceWithoutMemoryLimit: a writable space asked for without a memory
// limit is the guest's memory, and the guest has room for all of it: full,
// it is ENOSPC and the agent serves on (a 512 MiB guest once took an
// 800 MiB space, and filling it left the guest out of memory).
func TestSpaceWithoutMemoryLimit(t *testing.T) {
	b := backend(t)
	sb := sandboxtest.Create(t, b, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 800 << 20}})
	out, res := sandboxtest.Sh(t, sb, "for d in /workspace /tmp /home/sandbox /var/tmp; do head -c 1G /dev/zero > $d/fill 2>/dev/null || echo full; done; echo done")
	if out != "full\nfull\nfull\nfull\ndone\n" || res.OOMKilled || res.ExitCode != 0 {
		t.Fatalf("filling the space: %q %+v", out, res)
	}
	if out, _ := sandboxtest.Sh(t, sb, "echo alive"); out != "alive\n" {
		t.Fatalf("after the space filled: %q", out)
	}
}

// TestCPULimitFromHost: a 0.2-CPU sandbox's VMM, its guest spinning, gets
// about a fifth of a core of the host's time (the guest cannot see the
// throttling: its clocks count the time it was stopped as its own).
func TestCPULimitFromHost(t *testing.T) {
	b := backend(t)
	if !b.Capabilities().CPULimit {
		t.Skip("no cpu cgroup controller: the tier refuses CPU limits here")
	}
	sb := sandboxtest.Create(t, b, sandbox.Spec{Limits: sandbox.Limits{CPUs: 0.2}})
	procs, _ := filepath.Glob("/sys/fs/cgroup/cpu/cordon-microvm/*/cgroup.procs")
	procs2, _ := filepath.Glob("/sys/fs/cgroup/cordon-microvm/*/cgroup.procs")
	procs = append(procs, procs2...)
	var pids []int
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	if len(pids) != 1 {
		t.Fatalf("VMMs in the tier's cgroups: %v", pids)
	}
	ticks := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pids[0]))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return u + s
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", "timeout 4 sh -c 'while :; do :; done'"}, Timeout: time.Minute})
	}()
	time.Sleep(time.Second)
	t0, c0 := time.Now(), ticks()
	time.Sleep(2 * time.Second)
	share := float64(ticks()-c0) / 100 / time.Since(t0).Seconds() // USER_HZ is 100
	<-done
	t.Logf("a 0.2-CPU VM spinning used %.2f of a host core", share)
	if share > 0.35 {
		t.Fatalf("a 0.2-CPU VM used %.2f of a core", share)
	}
}

// TestEgress: the guest has no network of its own; what its policy
// allows it reaches through the host's egress proxy, over its port, and
// nothing else.
func TestEgress(t *testing.T) {
	b := backend(t)
	n := testnet.New(t, "203.0.113.10", "203.0.113.11")
	for _, addr := range []string{"203.0.113.10:80", "203.0.113.11:80"} {
		ln := n.Listen(t, addr)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s", addr)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	p := sandbox.NewProvider([]sandbox.Backend{b}, sandbox.WithEgressProxy(egress.New(egress.Config{NetNS: n.Path})))
	sb := sandboxtest.CreateWith(t, p, sandbox.Spec{Egress: &egress.Policy{Mode: egress.Static, Rules: []egress.Rule{{Host: "203.0.113.10", Ports: []int{80}}}}})
	curl := func(args string) string {
		out, _ := sandboxtest.Sh(t, sb, "curl -sS -m 10 "+args+" 2>&1; echo")
		return strings.TrimSpace(out)
	}
	if out := curl("http://203.0.113.10/"); out != "hello from 203.0.113.10:80" {
		t.Fatalf("an allowed host through the proxy: %q", out)
	}
	if out := curl("http://203.0.113.11/"); strings.Contains(out, "hello") {
		t.Fatalf("a host the policy does not allow: %q", out)
	}
	if out := curl("--noproxy '*' http://203.0.113.10/"); strings.Contains(out, "hello") {
		t.Fatalf("around the proxy: %q", out)
	}
	if out, _ := sandboxtest.Sh(t, sb, "ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
		t.Fatalf("the guest's interfaces: %q", out)
	}
}

// TestDumpBeforeTeardown: asked before a teardown (as the host asks when
// an agent kept no deadline), the guest writes its processes' states and
// the agent's goroutines to its console, and the sandbox's diagnostics
// keep them after the VM and its directory are gone.
func TestDumpBeforeTeardown(t *testing.T) {
	b := backend(t)
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	// A command running as the dump is taken.
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		// A shell that names itself with bytes that would act on a
		// terminal, and its child.
		_, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", `printf '\033[2Jevil' > /proc/$$/comm; echo started; sleep 300`}, Stdout: &out})
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); out.String() != "started\n"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command did not start: %q", out.String())
		}
	}
	sb.DumpState(t.Context())
	if err := <-done; err == nil {
		t.Fatal("the command ended well with its agent gone")
	}
	want := []string{"cordon: the guest's state", "(cordon-agent) S ppid 1 wchan ", "(sleep) ", "runtime.main()", "SIGQUIT"}
	for _, w := range want {
		if d := sb.Diagnostics(); !strings.Contains(d, w) {
			t.Fatalf("the dump lacks %q:\n%s", w, d)
		}
	}
	if d := sb.Diagnostics(); strings.Contains(d, "\x1b[2J") || !strings.Contains(d, `("\x1b[2Jevil") S ppid `) {
		t.Fatalf("a process's own name shown as it is, or not at all:\n%s", d)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := sb.Diagnostics(); !strings.Contains(d, want[0]) || !strings.Contains(d, want[3]) {
		t.Fatalf("after the teardown, the diagnostics lost the dump:\n%s", d)
	}
}

// TestVMMKilled: a VMM killed from outside mid-command is noticed: the
// command's exec fails, the sandbox's Exited closes, and its teardown
// leaves nothing.
func TestVMMKilled(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := filepath.Glob(filepath.Join(stateDir, "vm-*"))
	pid := vmmPid(t, sb.Client().Endpoint().Address)
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), "sleep", sandbox.ExecOptions{Args: []string{"30"}, Timeout: time.Minute})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a command in a killed VM succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a command in a killed VM did not end")
	}
	select {
	case <-sb.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox of a killed VM did not exit")
	}
	if d := sb.Diagnostics(); !strings.Contains(d, "the VMM ended: signal: killed") {
		t.Fatalf("the sandbox's diagnostics do not say the VMM was killed:\n%s", d)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	after, _ := filepath.Glob(filepath.Join(stateDir, "vm-*"))
	if len(after) >= len(before) {
		t.Fatalf("VM directories left: %v (before the kill: %v)", after, before)
	}
}

// vmmPid is the pid of the VMM whose agent socket is sock.
func vmmPid(t testing.TB, sock string) int {
	t.Helper()
	port := filepath.Join(filepath.Dir(sock), "port.sock")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), port) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	t.Fatalf("no VMM serves %s", port)
	return 0
}

// TestVMMOutlivesItsStartingThread: a VM started from a goroutine that
// locked its thread and ends without unlocking it, whose thread the Go
// runtime then ends, runs on. A VMM dies with its creator by a
// parent-death signal, which the kernel ties to the thread that forked
// it: the VMM must be forked from a thread that lives as long as the
// process.
func TestVMMOutlivesItsStartingThread(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	type created struct {
		sb  *sandbox.Sandbox
		err error
	}
	done := make(chan created, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		sb, err := p.Create(t.Context(), sandbox.Spec{})
		done <- created{sb, err}
	}()
	c := <-done
	if c.err != nil {
		t.Fatal(c.err)
	}
	t.Cleanup(func() { c.sb.Destroy(context.WithoutCancel(t.Context())) })
	time.Sleep(time.Second) // (the ended thread's parent-death signals are sent by now)
	select {
	case <-c.sb.Exited():
		t.Fatalf("the VM ended with the thread that started it: %s", c.sb.Diagnostics())
	default:
	}
	if out, res := sandboxtest.Sh(t, c.sb, "echo alive"); out != "alive\n" || res.ExitCode != 0 {
		t.Fatalf("%q %+v", out, res)
	}
}

// TestPauseResume: a paused VM runs nothing, its agent included; resumed,
// it serves on with its state.
func TestPauseResume(t *testing.T) {
	sb := sandboxtest.Create(t, backend(t), sandbox.Spec{})
	if !sb.CanPause() {
		t.Fatal("a microVM cannot be paused")
	}
	sandboxtest.Sh(t, sb, "echo kept > /workspace/f")
	if err := sb.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := sb.Client().Health(ctx)
	cancel()
	if err == nil {
		t.Fatal("a paused VM's agent answered")
	}
	if err := sb.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, _ := sandboxtest.Sh(t, sb, "cat /workspace/f"); out != "kept\n" {
		t.Fatalf("after resuming: %q", out)
	}
}

// cgroupTests are the process tier's tests of what its cgroups hold:
// limits, OOM kills, the commands' own pids cgroup, pause and resume (the
// freezer), teardown leaving no cgroup behind.
const cgroupTests = "TestLimits|TestCgroupsForLimits|TestCgroupsJoined|TestCommandsPidsApart|TestPauseResume|TestTeardownLeavesNothing|TestForkBombUnderLoad|TestSpareThreads"

// TestCgroupV2TestBed runs the process tier's limit tests inside a
// guest, whose kernel has cgroup v2 alone, on a host whose cgroups are
// v1: the process tier's v2 code (memory, pids and CPU limits, OOM kills)
// runs for real on every CI run. A host with cgroup v2 ran them itself.
func TestCgroupV2TestBed(t *testing.T) {
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "memory") {
		t.Skip("this host has cgroup v2 with its controllers: the process tier's tests ran on it")
	}
	b := backend(t)
	agent := testutil.BuildAgent(t)
	bin := filepath.Join(t.TempDir(), "process.test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, "./backend/process")
	cmd.Dir = testutil.RepoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the process tier's tests: %v\n%s", err, out)
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	code, err := b.RunInGuest(ctx, map[string]string{"process.test": bin, "cordon-agent": agent},
		[]string{microvm.ExtraDir + "/process.test", "-test.run", "^(" + cgroupTests + ")$", "-test.v", "-test.count=1"},
		[]string{testutil.EnvGuestAgent + "=" + microvm.ExtraDir + "/cordon-agent", "CI=true"}, 2<<30, &out)
	t.Logf("in the guest:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("the process tier's limit tests failed in a cgroup v2 guest (exit %d)", code)
	}
	for _, want := range []string{"--- PASS: TestLimits/ForkBomb", "--- PASS: TestLimits/PidsLimitHolds", "--- PASS: TestLimits/MemoryHogIsOOMKilled", "--- PASS: TestLimits/CPU", "--- PASS: TestPauseResume", "--- PASS: TestCommandsPidsApart"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("in the guest, no %q", want)
		}
	}
}

// TestRootFS: a root directory (here a Debian minbase, without python3,
// so that the guest image's root cannot pass for it) becomes the guest's
// root disk, with the mount points it lacks added; the sandbox writes
// only its writable space.
func TestRootFS(t *testing.T) {
	b := backend(t)
	root := testutil.DebianMinbase(t)
	sb := sandboxtest.Create(t, b, sandbox.Spec{RootFS: root})
	// The guest reads each program from the new disk for the first time,
	// emulated (TCG): alone that takes seconds, but on CI's two loaded
	// cores it once took more than the minute sandboxtest.Sh allows.
	var buf bytes.Buffer
	if _, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", "cat /etc/debian_version; command -v python3 || echo no-python; touch /etc/x 2>&1 | grep -c Read-only; echo w > /workspace/f && cat /workspace/f"},
		Stdout: &buf, Stderr: &buf, Timeout: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	want, _ := os.ReadFile(filepath.Join(root, "etc", "debian_version"))
	if out != string(want)+"no-python\n1\nw\n" {
		t.Fatalf("in a guest on %s: %q", root, out)
	}
}

// TestPersistentDisk: a persistent workspace on the provider's disk, as
// on the host's tiers (sandboxtest.PersistentDisk: its files, its quota,
// nosuid, the egress boundary across stops); and what is the VM's own: a
// VM destroyed right after a write, without the agent's flush, leaves the
// write on the disk (the guest flushes it before it powers off), a
// disk's VM is restored from a saved guest (with a stand-in disk, then
// told this one's size), and the disk itself is out of the workload's
// reach.
func TestPersistentDisk(t *testing.T) {
	b := backend(t)
	sandboxtest.PersistentDisk(t, b)

	image := filepath.Join(t.TempDir(), "disk.img")
	if err := disk.Create(t.Context(), image, 64<<20); err != nil {
		t.Fatal(err)
	}
	start := func() (sandbox.Instance, *client.Client) {
		in, err := b.Start(t.Context(), sandbox.Launch{Token: "disk-test-token-0123456789abcdef", Disk: image})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Destroy(context.Background()) })
		return in, client.New(in.Endpoint())
	}
	in, c := start()
	if d := in.Diagnostics(); !strings.Contains(d, "restored from a saved guest") {
		t.Errorf("a disk VM was not restored from a saved guest: %q", d)
	}
	var out strings.Builder
	res, err := c.Exec(t.Context(), "sh", client.ExecOptions{Args: []string{"-c", "head -c 3000000 /dev/urandom > /workspace/r && sha256sum /workspace/r > ~/sum && ls /dev | grep -c '^vd'; ls -A /run/.cordon-disk"}, Stdout: &out})
	if err != nil || res.ExitCode == 0 || out.String() != "0\n" {
		t.Fatalf("the workload sees the disk itself, or could not write: %q %+v %v", out.String(), res, err)
	}
	if err := in.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, c = start()
	if res, err := c.Exec(t.Context(), "sh", client.ExecOptions{Args: []string{"-c", "sha256sum -c ~/sum"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("after the VM was destroyed: %+v %v", res, err)
	}
}

// TestDiskCloneOfVM: where the disks' file system has reflinks (XFS on a
// loop device here), a running VM's disk is cloned with its guest's file
// system frozen (its writes flushed first, so a write made just before is
// in the clone); the source writes on once thawed; and a sandbox on the
// clone has its files and diverges. A stopped VM's disk is cloned too.
func TestDiskCloneOfVM(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b}, sandbox.WithDisks(testutil.XFSDir(t, 1<<30), 0))
	spec := sandbox.Spec{PersistentWorkspace: true, Limits: sandbox.Limits{DiskBytes: 64 << 20}}
	sb := sandboxtest.CreateWith(t, p, spec)
	if out, res := sandboxtest.Sh(t, sb, "echo mine > /workspace/who && echo ok"); out != "ok\n" {
		t.Fatalf("write: %q %+v", out, res)
	}
	fork := func(from *sandbox.Sandbox) *sandbox.Sandbox {
		t.Helper()
		clones, err := p.CloneDisks(t.Context(), from, 1)
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.CreateOnDisk(t.Context(), spec, clones[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Destroy(context.Background()) })
		return f
	}
	running := fork(sb)
	if out, _ := sandboxtest.Sh(t, running, "cat /workspace/who; echo fork > /workspace/who"); out != "mine\n" {
		t.Fatalf("the clone of a running VM's disk holds %q", out)
	}
	if out, _ := sandboxtest.Sh(t, sb, "cat /workspace/who; echo again > /workspace/who && cat /workspace/who"); out != "mine\nagain\n" {
		t.Fatalf("the source after its disk was cloned: %q", out)
	}
	if err := sb.Suspend(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, _ := sandboxtest.Sh(t, fork(sb), "cat /workspace/who"); out != "again\n" {
		t.Fatalf("the clone of a stopped VM's disk holds %q", out)
	}
	if out, _ := sandboxtest.Sh(t, running, "cat /workspace/who"); out != "fork\n" {
		t.Fatalf("the first clone diverged to %q", out)
	}
}

// TestSweep: a later process's Sweep tears down the VMs of this backend's
// directory it was not asked to keep (their VMMs killed, their
// directories removed), and leaves the kept one running.
func TestSweep(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := testutil.StateDir(t)
	cfg := microvm.Config{AgentPath: testutil.BuildAgent(t), StateDir: dir, ColdBoot: true}
	first := microvm.New(cfg)
	if err := first.Probe(t.Context()); err != nil {
		testutil.Missing(t, "microvm tier unavailable: %v", err)
	}
	var insts []sandbox.Instance
	for range 2 {
		in, err := first.Start(t.Context(), sandbox.Launch{Token: "sweep-test-token-0123456789abcdef"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Destroy(context.Background()) })
		insts = append(insts, in)
	}
	later := microvm.New(cfg)
	if err := later.Sweep(t.Context(), insts[1:]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-insts[0].Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("a swept VM's VMM still runs")
	}
	if vms, _ := filepath.Glob(filepath.Join(dir, "vm-*")); len(vms) != 1 {
		t.Fatalf("VM directories after the sweep: %v", vms)
	}
	select {
	case <-insts[1].Exited():
		t.Fatal("the kept VM was swept")
	default:
	}
	if res, err := client.New(insts[1].Endpoint()).Exec(t.Context(), "true", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("the kept VM: %+v %v", res, err)
	}
}
