//go:build linux

package process_test

import (
	"bufio"
	"context"
	"github.com/cordon-sandbox/cordon/backend/process"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/internal/spawner"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/adversarial"
)

func TestAdversarial(t *testing.T) { adversarial.Run(t, create) }
func TestLimits(t *testing.T)      { adversarial.Limits(t, backend(t).Capabilities(), create) }
func TestEscapeesDie(t *testing.T) { adversarial.Escapees(t, create) }

// TestForkBombUnderLoad: while a fork bomb holds every pid the workload
// may have, the agent serves concurrent requests (each may need a thread
// of the agent's own) and outlives the bomb.
func TestForkBombUnderLoad(t *testing.T) {
	sb := create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	bomb := make(chan *sandbox.Result, 1)
	go func() {
		res, _ := sb.Exec(context.Background(), "sh", sandbox.ExecOptions{Args: []string{"-c", "(bomb() { bomb | bomb & }; bomb); exec sleep 300"}, Timeout: 3 * time.Second})
		bomb <- res
	}()
	time.Sleep(time.Second) // the pids run out
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := sb.Client().Stat(t.Context(), "/workspace"); err != nil {
				t.Errorf("stat during the bomb: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			// A command cannot start (no pid is left), but its refusal is
			// an answer.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if _, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "spawn") {
				t.Errorf("exec during the bomb: %v", err)
			}
		}()
	}
	wg.Wait()
	if res := <-bomb; res == nil || !res.TimedOut {
		t.Fatalf("fork bomb: %+v", res)
	}
	if out, _, _ := sh(t, sb, "cat /proc/1/comm"); out != "cordon-agent\n" {
		t.Fatalf("agent after the bomb: %q", out)
	}
}

// TestTeardownLeavesNothing: after Destroy no process, mount, cgroup or
// directory of the sandbox remains.
func TestTeardownLeavesNothing(t *testing.T) {
	b := backend(t)
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), sandbox.Spec{Limits: sandbox.Limits{Pids: 100, MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "(setsid sleep 300 >/dev/null 2>&1 &); nohup sleep 301 >/dev/null 2>&1 &")
	dir := filepath.Dir(sb.Client().Endpoint().Address)
	dir = filepath.Dir(dir)
	id := filepath.Base(dir)
	before := cgroupDirs(id)
	if len(before) == 0 {
		t.Fatal("sandbox has no cgroups")
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state dir %s remains", dir)
	}
	if left := cgroupDirs(id); len(left) > 0 {
		t.Errorf("cgroups remain: %v", left)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), id) {
		t.Errorf("mounts of %s remain in the host's table", id)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(string(cmd), "sleep\x00301") {
			t.Errorf("process %s (%q) outlived Destroy", e.Name(), cmd)
		}
	}
}

func cgroupDirs(id string) []string {
	var out []string
	filepath.Walk("/sys/fs/cgroup", func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return filepath.SkipDir
		}
		if info.IsDir() && filepath.Base(p) == id {
			out = append(out, p)
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// TestSandboxesDieWithHost: a host that made several sandboxes is killed
// outright: every sandbox's processes die with it, setsid'd ones included,
// whichever process started its init.
func TestSandboxesDieWithHost(t *testing.T) {
	testutil.RequiresRoot(t)
	// Started by clonexec, every init is the host's child; without it, the
	// first is forked by the host and later ones come from the spawner.
	t.Run("Cloned", func(t *testing.T) { dieWithHost(t, false) })
	t.Run("ForkedAndSpawned", func(t *testing.T) { dieWithHost(t, true) })
}

func dieWithHost(t *testing.T, noClone bool) {
	state := t.TempDir()
	os.Chmod(state, 0o711)
	os.Chmod(filepath.Dir(state), 0o711)
	host := exec.Command(os.Args[0])
	host.Env = append(os.Environ(), "CORDON_TEST_HOLD_SANDBOXES=4", "CORDON_TEST_AGENT="+testutil.BuildAgent(t), "CORDON_TEST_STATE="+state)
	if noClone {
		host.Env = append(host.Env, "CORDON_TEST_NO_CLONE=1")
	}
	stdout, _ := host.StdoutPipe()
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer host.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 6 || f[0] != "ready" {
		t.Fatalf("the host said %q (%v); want ready, its pid and four inits", line, err)
	}
	viaHelper := 0
	for _, pp := range f[2:] {
		if _, parent, _ := strings.Cut(pp, ":"); parent != f[1] {
			viaHelper++
		}
	}
	if noClone && (viaHelper == 0 || viaHelper == 4) {
		t.Fatalf("inits and their parents %v (host %s): want the first from the host and later ones from the spawner", f[2:], f[1])
	}
	if !noClone && viaHelper != 0 {
		t.Fatalf("inits and their parents %v (host %s): want all from the host", f[2:], f[1])
	}
	_ = host.Process.Kill()
	_ = host.Wait()
	left := func() []string {
		var out []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil {
				continue
			}
			if strings.HasPrefix(string(b), "sleep\x00317") {
				out = append(out, e.Name()+" "+strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
		for _, pp := range f[2:] {
			pid, _, _ := strings.Cut(pp, ":")
			if _, err := os.Stat("/proc/" + pid); err == nil {
				out = append(out, "init "+pid)
			}
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for l := left(); len(l) > 0; l = left() {
		if time.Now().After(deadline) {
			t.Fatalf("outlived their host: %v", l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDiesWithCreator: when the cordon process that created a sandbox is
// killed outright, the sandbox's processes die too.
func TestDiesWithCreator(t *testing.T) {
	testutil.RequiresRoot(t)
	agent := testutil.BuildAgent(t)
	cli := filepath.Join(filepath.Dir(agent), "cordon")
	build := exec.Command("go", "build", "-o", cli, "./cmd/cordon")
	build.Dir = testutil.RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	state := t.TempDir()
	// The sandbox's mapped users must be able to pass through it.
	os.Chmod(state, 0o711)
	os.Chmod(filepath.Dir(state), 0o711)
	cmd := exec.Command(cli, "run", "--", "sh", "-c", "(setsid sleep 303 >/dev/null 2>&1 &); echo ready; exec sleep 304")
	cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+state)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("sandbox did not start: %q %v", buf, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The sandboxes' directories (the state also holds what they share).
	sandboxes := func() []string {
		ents, _ := os.ReadDir(state)
		var names []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "sb-") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	gone := func() bool {
		// The init first: it is the last to go, and the sweep below
		// removes only what a dead init left.
		if sbs := sandboxes(); len(sbs) == 1 {
			if b, err := os.ReadFile(filepath.Join(state, sbs[0], "init")); err == nil {
				if f := strings.Fields(string(b)); len(f) == 2 {
					if pid, _ := strconv.Atoi(f[0]); procid.Alive(pid, f[1]) {
						return false
					}
				}
			}
		}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && (strings.HasPrefix(string(b), "sleep\x00303") || strings.HasPrefix(string(b), "sleep\x00304")) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(5 * time.Second)
	for !gone() {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox outlived the cordon process that created it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its leftovers go the next time a backend starts on the same state.
	if sbs := sandboxes(); len(sbs) != 1 {
		t.Fatalf("expected the killed sandbox's directory to remain until swept, found %v", sbs)
	}
	again := exec.Command(cli, "run", "--", "true")
	again.Env = cmd.Env
	if out, err := again.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if sbs := sandboxes(); len(sbs) != 0 {
		t.Errorf("leftover %v not swept", sbs)
	}
}

// TestNoLeaksUnderChurn: many sandboxes created and destroyed at once leave
// no process, cgroup, directory or descriptor behind in the host.
func TestNoLeaksUnderChurn(t *testing.T) {
	backend(t) // (the tier's probe)
	dir := ownStateDir(t)
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: dir})
	p := sandbox.NewProvider([]sandbox.Backend{b})
	fds := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	// Two rounds first, so lazily opened descriptors (proxy, cgroups, the
	// spawner the second create starts) exist.
	for range 2 {
		warm, err := p.Create(t.Context(), sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		warm.Destroy(t.Context())
	}
	for deadline := time.Now().Add(10 * time.Second); spawner.Running(testutil.BuildAgent(t)) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the spawner did not start")
		}
	}
	before := fds()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := p.Create(t.Context(), sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
			if err != nil {
				errs <- err
				return
			}
			if _, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", "(setsid sleep 3060 >/dev/null 2>&1 &); echo hi"}}); err != nil {
				errs <- err
			}
			errs <- sb.Destroy(t.Context())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if after := fds(); after > before+2 {
		t.Errorf("host descriptors grew from %d to %d", before, after)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		var live int
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "init")); err == nil {
				live++
			}
		}
		if live > 0 {
			t.Errorf("%d sandbox directories remain", live)
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(string(cmd), "sleep\x003060") {
			if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); !strings.Contains(string(st), ") Z ") {
				t.Errorf("process %s outlived its sandbox", e.Name())
			}
		}
	}
}

func TestLandlock(t *testing.T) { adversarial.Landlock(t, create) }

// TestHostDeadline: see adversarial.HostDeadline.
func TestHostDeadline(t *testing.T) { adversarial.HostDeadline(t, backend(t)) }
