package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/procid"
)

// TestStale: an instance directory is stale when its record names a
// process that has ended, or when it has no record and is older than
// recordWait; a running process's, a young one without a record, and
// directories of other names are not.
func TestStale(t *testing.T) {
	state := t.TempDir()
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill(); live.Wait() })
	ended := exec.Command("true")
	if err := ended.Start(); err != nil {
		t.Fatal(err)
	}
	endedStart := procid.StartTime(ended.Process.Pid)
	ended.Wait()
	add := func(name, record string, age time.Duration) {
		dir := filepath.Join(state, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if record != "" {
			if err := os.WriteFile(filepath.Join(dir, "rec"), []byte(record+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		when := time.Now().Add(-age)
		if err := os.Chtimes(dir, when, when); err != nil {
			t.Fatal(err)
		}
	}
	add("x-live", strconv.Itoa(live.Process.Pid)+" "+procid.StartTime(live.Process.Pid), time.Hour)
	add("x-ended", strconv.Itoa(ended.Process.Pid)+" "+endedStart, 0)
	add("x-garbled", "not a record", 0)
	add("x-starting", "", 0)
	add("x-abandoned", "", 2*recordWait)
	add("y-ended", strconv.Itoa(ended.Process.Pid)+" "+endedStart, 0)
	got := Stale(state, "x-", "rec")
	slices.Sort(got)
	if want := []string{"x-abandoned", "x-ended", "x-garbled"}; !slices.Equal(got, want) {
		t.Fatalf("stale: %v, want %v", got, want)
	}
	if got := Stale(filepath.Join(state, "none"), "x-", "rec"); got != nil {
		t.Fatalf("a state directory not made yet: %v", got)
	}
}
