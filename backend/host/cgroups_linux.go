package host

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// SweepCgroups removes, below each of parents (a tier's cgroup parent in
// each hierarchy), the cgroups whose names start with prefix, made more
// than minAge ago, that hold no process: their empty children first, then
// them. These are sandboxes' whose creator was killed and whose state
// directory went too, so that no later process sweeps it (a test's
// temporary one, a private daemon's). The kernel refuses to remove a
// cgroup with a process in it, so a running sandbox's stays; minAge
// spares one just made, whose first process is on its way in.
//
// It looks at every sandbox's cgroups, some microseconds each, so it looks
// at most once every sweepEvery per state directory (whose stamp file's
// time says when it last looked).
func SweepCgroups(stateDir string, parents []string, prefix string, minAge time.Duration) {
	stamp := filepath.Join(stateDir, ".cgroup-sweep")
	if st, err := os.Stat(stamp); err == nil && time.Since(st.ModTime()) < sweepEvery {
		return
	}
	if err := os.WriteFile(stamp, nil, 0o600); err != nil {
		return
	}
	for _, parent := range parents {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) >= minAge && !holdsProcess(dir) {
				removeEmptyCgroup(dir, 0)
			}
		}
	}
}

// sweepEvery is how often SweepCgroups looks, per stamp.
const sweepEvery = 10 * time.Minute

// removeEmptyCgroup removes dir, and below it (to a depth of 4, more than
// any tier makes) its children; each that holds a process stays.
func removeEmptyCgroup(dir string, depth int) {
	if depth < 4 {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				removeEmptyCgroup(filepath.Join(dir, e.Name()), depth+1)
			}
		}
	}
	_ = unix.Rmdir(dir)
}

// holdsProcess reports whether a process is in cgroup dir itself (a
// running sandbox's init always is), which a read of one byte tells
// without the kernel's cgroup lock that a refused removal takes.
func holdsProcess(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return true // (not a cgroup, or not readable: left alone)
	}
	defer f.Close()
	var b [1]byte
	n, _ := f.Read(b[:])
	return n > 0
}
