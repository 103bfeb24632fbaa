package host

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestSweepCgroups: below a parent, of the cgroups named with the prefix,
// an old one that holds no process goes with its empty child; one with a
// process in it, one just made and one of another name stay.
func TestSweepCgroups(t *testing.T) {
	testutil.RequiresRoot(t) // to make cgroups
	root := cgroup2Mount(t)
	parent, err := os.MkdirTemp(root, "cordon-sweep-test-")
	if err != nil {
		t.Fatal(err)
	}
	busy := exec.Command("sleep", "60")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	mk := func(name string, aged bool) string {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if aged {
			if err := os.Chtimes(dir, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	t.Cleanup(func() {
		busy.Process.Kill()
		busy.Wait()
		for _, d := range []string{"x-gone/child", "x-gone", "x-busy", "x-young", "y-old"} {
			os.Remove(filepath.Join(parent, d))
		}
		os.Remove(parent)
	})
	gone := mk("x-gone", false)
	mk("x-gone/child", false)
	os.Chtimes(gone, old, old) // (the child's making touched it)
	b := mk("x-busy", true)
	if err := os.WriteFile(filepath.Join(b, "cgroup.procs"), []byte(strconv.Itoa(busy.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	mk("x-young", false)
	mk("y-old", true)
	state := t.TempDir()
	stamp := filepath.Join(state, ".cgroup-sweep")
	SweepCgroups(state, []string{parent, filepath.Join(parent, "none")}, "x-", time.Minute)
	for name, want := range map[string]bool{"x-gone": false, "x-busy": true, "x-young": true, "y-old": true} {
		if _, err := os.Stat(filepath.Join(parent, name)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", name, err == nil, want)
		}
	}
	// Looked a moment ago: not again, until sweepEvery has passed.
	mk("x-again", true)
	t.Cleanup(func() { os.Remove(filepath.Join(parent, "x-again")) })
	SweepCgroups(state, []string{parent}, "x-", time.Minute)
	if _, err := os.Stat(filepath.Join(parent, "x-again")); err != nil {
		t.Fatalf("swept again at once: %v", err)
	}
	earlier := time.Now().Add(-sweepEvery)
	os.Chtimes(stamp, earlier, earlier)
	SweepCgroups(state, []string{parent}, "x-", time.Minute)
	if _, err := os.Stat(filepath.Join(parent, "x-again")); err == nil {
		t.Fatal("not swept once sweepEvery had passed")
	}
}

// cgroup2Mount is where a cgroup2 hierarchy is mounted here.
func cgroup2Mount(t *testing.T) string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	testutil.Missing(t, "no cgroup2 hierarchy is mounted")
	return ""
}
