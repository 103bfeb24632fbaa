//go:build linux

package process_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// TestSpawner: a backend that starts its inits through the spawner (as the
// daemon's does) makes working sandboxes whose init is the spawner's child,
// not this process's, and confirms their teardown all the same.
func TestSpawner(t *testing.T) {
	testutil.RequiresRoot(t)
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: stateDir(t), Spawner: true})
	process.NoClone(b)
	if err := b.Probe(t.Context()); err != nil {
		testutil.Missing(t, "process tier unavailable: %v", err)
	}
	p := sandbox.NewProvider([]sandbox.Backend{b})
	sb, err := p.Create(t.Context(), sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, res := sh(t, sb, "echo ok")
	if out != "ok\n" || res.ExitCode != 0 {
		t.Errorf("got %q, %+v", out, res)
	}
	parents := map[string]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !bytes.HasPrefix(cmdline, []byte("cordon-agent\x00"+sandboxinit.Arg)) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		parent, _ := os.ReadFile("/proc/" + f[1] + "/cmdline")
		parents[string(bytes.ReplaceAll(parent, []byte{0}, []byte{' '}))]++
	}
	if parents["cordon-agent "+sandboxinit.SpawnerArg+" "] == 0 {
		t.Errorf("no sandbox init is the spawner's child; their parents: %v", parents)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestSpawnerAfterFirst: a backend not asked for the spawner forks its
// first init itself, and a later create's init comes from the helper,
// which the second create started in the background.
func TestSpawnerAfterFirst(t *testing.T) {
	testutil.RequiresRoot(t)
	// Below SpawnerRSS, or every init comes from the helper (a test
	// before this one may have held more).
	debug.FreeOSMemory()
	if rss := selfRSS(t); rss > process.SpawnerRSS {
		// The race detector's shadow memory, for one, counts.
		t.Skipf("this test process holds %d MiB, over SpawnerRSS: every init comes from the helper", rss>>20)
	}
	dir := ownStateDir(t)
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: dir})
	process.NoClone(b)
	t.Cleanup(func() { b.Close() })
	self := strconv.Itoa(os.Getpid())
	sb := createOn(t, b, sandbox.Spec{})
	if parents := initParents(t, dir); len(parents) != 1 || parents[0] != self {
		t.Fatalf("the first init's parent is %v; want this process (%s)", parents, self)
	}
	destroy(t, sb)
	for i := 0; ; i++ {
		sb := createOn(t, b, sandbox.Spec{})
		parents := initParents(t, dir)
		if out, _, _ := sh(t, sb, "echo ok"); out != "ok\n" {
			t.Fatalf("sandbox %d: %q", i+2, out)
		}
		destroy(t, sb)
		if len(parents) != 1 {
			t.Fatalf("sandbox %d: init parents %v; want one", i+2, parents)
		}
		if parents[0] != self {
			break
		}
		if i == 20 {
			t.Fatalf("%d creates after the first, every init still forked from this process", i+1)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSpawnerForHeavyHost: a host that holds more than SpawnerRSS starts
// its sandboxes' inits through the spawner although its configuration does
// not ask for it (its own fork would cost more), and those sandboxes work
// as any other.
func TestSpawnerForHeavyHost(t *testing.T) {
	testutil.RequiresRoot(t)
	held := make([]byte, process.SpawnerRSS+(32<<20))
	for i := 0; i < len(held); i += os.Getpagesize() {
		held[i] = 1
	}
	defer runtime.KeepAlive(held)
	dir := ownStateDir(t)
	b := process.New(process.Config{AgentPath: testutil.BuildAgent(t), StateDir: dir})
	process.NoClone(b)
	t.Cleanup(func() { b.Close() })
	sb := createOn(t, b, sandbox.Spec{})
	if out, _, _ := sh(t, sb, "echo ok"); out != "ok\n" {
		t.Fatalf("a sandbox from the spawner: %q", out)
	}
	if parents := initParents(t, dir); len(parents) != 1 || parents[0] == strconv.Itoa(os.Getpid()) {
		t.Fatalf("the init's parent is %v; want the spawner, not this process (%d)", parents, os.Getpid())
	}
}

func destroy(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// selfRSS is this process's resident size in bytes.
func selfRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// initParents is the parent pid of every sandbox init in the state
// directory dir.
func initParents(t *testing.T, dir string) []string {
	t.Helper()
	inits, err := sandboxInits(dir)
	if err != nil {
		t.Fatal(err)
	}
	var parents []string
	for _, in := range inits {
		parents = append(parents, in.parent)
	}
	return parents
}

// sandboxInit is a sandbox's init as its state directory records it, and
// its parent as /proc shows it.
type sandboxInit struct{ pid, parent string }

// sandboxInits lists the inits of the sandboxes in the state directory dir.
func sandboxInits(dir string) ([]sandboxInit, error) {
	var inits []sandboxInit
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		rec, err := os.ReadFile(filepath.Join(dir, e.Name(), "init"))
		if err != nil {
			continue
		}
		pid := strings.Fields(string(rec))[0]
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return nil, err
		}
		s := string(stat)
		inits = append(inits, sandboxInit{pid, strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[1]})
	}
	return inits, nil
}
