package main_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
)

// TestDaemonStats: cordon stats shows what sandboxes on a real daemon use,
// on the process and container tiers: the CPU time of commands that
// ended, the memory a running program holds, a file in the writable
// space, the tasks of a program whose thread names itself to look like
// /proc's fields, each against the sandbox's limits; the CPU's use of a
// busy program over the interval; and a sandbox not the caller's is not
// found.
func TestDaemonStats(t *testing.T) {
	testutil.Requires(t, "crun", "python3")
	id, _, run := daemonSandbox(t, "--memory", "512m", "--pids", "100", "--cpus", "1")
	out, errOut, code := run("create", "--tier", "container", "--memory", "512m", "--pids", "100", "--cpus", "1")
	if code != 0 {
		t.Fatalf("create --tier container: %s", errOut)
	}
	ctr := strings.TrimSpace(out)
	t.Cleanup(func() { run("rm", ctr) })
	const holder = `import ctypes, threading, time
b = b'x' * (64 << 20)
ctypes.CDLL(None).prctl(15, b') R 1 1 1 1 1', 0, 0, 0)
for _ in range(3):
    threading.Thread(target=time.sleep, args=(600,)).start()
time.sleep(600)`
	for _, sb := range []string{id, ctr} {
		if _, errOut, code := run("exec", sb, "--", "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; head -c 20971520 /dev/zero > big"); code != 0 {
			t.Fatalf("%s: exec: %s", sb, errOut)
		}
		if _, errOut, code := run("exec", "-d", sb, "--", "python3", "-c", holder); code != 0 {
			t.Fatalf("%s: exec -d: %s", sb, errOut)
		}
		if _, errOut, code := run("exec", "-d", sb, "--", "sh", "-c", "while :; do :; done"); code != 0 {
			t.Fatalf("%s: exec -d: %s", sb, errOut)
		}
	}
	// The holder's memory is there once its threads are.
	var stats []struct {
		ID string `json:"id"`
		api.Metrics
	}
	for range 100 {
		out, errOut, code := run("stats", "-o", "json", "--interval", "500ms", id, ctr)
		if code != 0 {
			t.Fatalf("stats: %d %s", code, errOut)
		}
		stats = nil
		if err := json.Unmarshal([]byte(out), &stats); err != nil || len(stats) != 2 {
			t.Fatalf("stats -o json: %v %q", err, out)
		}
		if stats[0].Tasks >= 5 && stats[1].Tasks >= 5 && *stats[0].MemoryBytes >= 84<<20 && *stats[1].MemoryBytes >= 84<<20 {
			break
		}
	}
	for i, s := range stats {
		if s.ID != []string{id, ctr}[i] || s.CPUSeconds < 0.05 || s.CPUUsedPct <= 0 || s.CPUUsedPct > 100 || s.CPUCount != 1 ||
			s.MemoryBytes == nil || *s.MemoryBytes < 84<<20 || *s.MemoryBytes > 512<<20 || s.MemoryLimitBytes != 512<<20 ||
			s.DiskUsedBytes < 20<<20 || s.DiskTotalBytes < s.DiskUsedBytes ||
			s.Tasks < 5 || s.Tasks > 100 || s.TasksLimit != 100 || s.OOMKills == nil || *s.OOMKills != 0 {
			t.Errorf("%+v (memory %v)", s, *s.MemoryBytes)
		}
	}
	out, errOut, code = run("stats", id)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], id+" ") || !strings.Contains(lines[1], "/ 512.0 MiB") {
		t.Errorf("stats: %d %q %s", code, out, errOut)
	}
	if _, errOut, code := run("stats", "sbx_0000000000000000"); code == 0 || !strings.Contains(errOut, "no sandbox") {
		t.Errorf("stats of no sandbox: %d %s", code, errOut)
	}
}
