package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/cordon-sandbox/cordon/internal/memcg"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// cgroups places a sandbox in its own cgroups, enforces its limits and
// tracks every process in it. Two layouts are supported behind one type:
//   - v2: one cgroup under the unified hierarchy with memory, pids and cpu.
//   - v1: one cgroup per controller (memory, pids, cpu); where a cgroup2
//     hierarchy is also mounted (even with no controllers), a cgroup there
//     too, for cgroup.kill and the populated event.
type cgroups struct {
	v2      string            // unified cgroup (v2 mode, or v1 tracking); "" if none
	v1      map[string]string // controller → cgroup directory
	unified bool              // v2 mode: limits live in v2
	// commands, on v1 under a pids limit, is a pids cgroup below the
	// sandbox's holding the thread commands are forked from, and so every
	// command and all it starts (see commandsApart); "" if none.
	commands string
	oomOnce  sync.Once
	oom      *os.File // what oomKills reads, kept open (oomFile)
}

// cgroupSupport is what the host can do, probed once.
type cgroupSupport struct {
	unified   bool   // /sys/fs/cgroup is cgroup2 with the controllers we need
	v2Root    string // a cgroup2 mount usable for tracking ("" if none)
	v1Roots   map[string]string
	writeable bool
	why       string // why limits are unavailable
}

const cgroup2Magic = 0x63677270

func probeCgroups() cgroupSupport {
	var s cgroupSupport
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == cgroup2Magic {
		ctrl, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		have := strings.Fields(string(ctrl))
		need := map[string]bool{"memory": false, "pids": false, "cpu": false}
		for _, c := range have {
			if _, ok := need[c]; ok {
				need[c] = true
			}
		}
		s.unified, s.v2Root = true, "/sys/fs/cgroup"
		for c, ok := range need {
			if !ok {
				s.unified, s.why = false, "the cgroup2 hierarchy has no "+c+" controller"
			}
		}
	} else {
		s.v1Roots = map[string]string{}
		own := ownCgroups()
		for _, c := range []string{"memory", "pids", "cpu"} {
			root := filepath.Join("/sys/fs/cgroup", c)
			if unix.Statfs(root, &st) != nil || st.Type == cgroup2Magic {
				s.why = "no cgroup v1 " + c + " hierarchy"
				s.v1Roots = nil
				break
			}
			s.v1Roots[c] = filepath.Join(root, own[c], "cordon")
		}
		// The freezer (pause and resume) is optional.
		if root := "/sys/fs/cgroup/freezer"; s.v1Roots != nil && unix.Statfs(root, &st) == nil && st.Type != cgroup2Magic {
			s.v1Roots["freezer"] = filepath.Join(root, own["freezer"], "cordon")
		}
		if unix.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == cgroup2Magic {
			s.v2Root = filepath.Join("/sys/fs/cgroup/unified", own[""], "cordon")
		}
	}
	if s.unified {
		s.v2Root = filepath.Join(s.v2Root, "cordon")
	}
	if s.unified || s.v1Roots != nil {
		// Limits need a cgroup of our own: root, or a delegated subtree.
		probe := s.v2Root
		if !s.unified {
			probe = s.v1Roots["memory"]
		}
		err := os.MkdirAll(probe, 0o755)
		if err == nil {
			err = unix.Access(probe, unix.W_OK|unix.X_OK)
		}
		if err != nil {
			s.why = fmt.Sprintf("cannot create cgroups under %s: %v", probe, err)
		} else {
			s.writeable = true
			s.boundTier()
		}
	}
	return s
}

// ownCgroups maps controller → this process's cgroup path (v2 under "").
func ownCgroups() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

func (s cgroupSupport) limits() bool { return s.writeable }

// boundTier holds all of this tier's sandboxes together below
// host.TierTasks and host.TierMemory, in the cgroups theirs are made in.
// Where they cannot be set (a delegated subtree without a controller),
// each sandbox's own limits and task ceiling are all there is, as before.
func (s cgroupSupport) boundTier() {
	pids, memory := s.v1Roots["pids"], s.v1Roots["memory"]
	if s.unified {
		// One controller a write: a write naming one the parent lacks
		// enables none of them.
		for _, c := range []string{"+pids", "+memory"} {
			_ = os.WriteFile(filepath.Join(filepath.Dir(s.v2Root), "cgroup.subtree_control"), []byte(c), 0)
		}
		pids, memory = s.v2Root, s.v2Root
	}
	if pids != "" {
		_ = host.BoundTasks(pids, host.TierTasks())
	}
	if memory != "" {
		_ = host.BoundMemory(memory, host.TierMemory())
	}
}

// parents are the directories its sandboxes' cgroups are made in, one
// per hierarchy.
func (s cgroupSupport) parents() []string {
	var out []string
	for _, root := range s.v1Roots {
		out = append(out, root)
	}
	if s.v2Root != "" {
		out = append(out, s.v2Root)
	}
	return out
}

// create makes the sandbox's cgroups and writes its limits. l is the
// workload's: a pids limit grows by baseline.AgentPids for the agent's own threads
// (on v1 the workload's commands are held to l.Pids apart from them:
// commandsApart).
func (s cgroupSupport) create(id string, l sandbox.Limits) (*cgroups, error) {
	cg := &cgroups{v1: map[string]string{}, unified: s.unified}
	fail := func(err error) (*cgroups, error) {
		cg.remove()
		return nil, err
	}
	if s.v2Root != "" && (s.unified || s.writeable) {
		if s.unified {
			// Controllers must be enabled on the way down.
			_ = os.MkdirAll(s.v2Root, 0o755)
			_ = os.WriteFile(filepath.Join(filepath.Dir(s.v2Root), "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
			_ = os.WriteFile(filepath.Join(s.v2Root, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
		}
		dir := filepath.Join(s.v2Root, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if s.unified {
				return fail(err)
			}
		} else {
			cg.v2 = dir
		}
	}
	for c, root := range s.v1Roots {
		if !cg.needsV1(c, l) {
			continue
		}
		dir := filepath.Join(root, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(err)
		}
		cg.v1[c] = dir
	}
	withAgent := l
	if l.Pids > 0 {
		withAgent.Pids += baseline.AgentPids
	}
	if err := cg.setLimits(withAgent); err != nil {
		return fail(err)
	}
	if s.commandsApart(l) {
		// The command thread counts there too.
		parent := cg.v1["pids"]
		if s.unified {
			parent = cg.v2
		}
		dir := filepath.Join(parent, commandsCgroup)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(err)
		}
		cg.commands = dir
		if s.unified {
			// A threaded child, which takes single threads; the
			// sandbox's cgroup becomes its threaded domain, where its
			// memory and CPU limits stay, and passes pids down.
			if err := write(dir, "cgroup.type", "threaded"); err != nil {
				return fail(err)
			}
			if err := write(cg.v2, "cgroup.subtree_control", "+pids"); err != nil {
				return fail(err)
			}
		}
		if err := write(dir, "pids.max", strconv.FormatInt(l.Pids+1, 10)); err != nil {
			return fail(err)
		}
	}
	cg.oomFile() // opened here, beside the init's start, not at the first command
	return cg, nil
}

// commandsCgroup names the pids cgroup of a sandbox's commands.
const commandsCgroup = "commands"

// commandsApart reports whether a sandbox with limits l gets a pids cgroup
// of its own for its commands (cgroups.commands): under a pids limit. The
// init's command thread is moved there alone (a v1 pids cgroup takes
// single threads, as a threaded child of the sandbox's does on cgroup2),
// so each command starts there and a fork bomb exhausts the workload's
// pids, not the agent's, which then needs no spare threads made ahead (16
// held the agent's one P for some 4 ms, and its first command waited).
// (Without it, on cgroup2 a 16-pid sandbox forked 43 times, into the
// agent's headroom: the microvm tier's cgroup-v2 test bed found it.)
func (s cgroupSupport) commandsApart(l sandbox.Limits) bool {
	return l.Pids > 0 && (s.unified || s.v1Roots["pids"] != "")
}

// holdCommands moves thread tid, the one the init forks every command
// from, into the commands' cgroup (instance.holdCommands says when).
func (cg *cgroups) holdCommands(tid int) error {
	if cg.unified {
		return write(cg.commands, "cgroup.threads", strconv.Itoa(tid))
	}
	return write(cg.commands, "tasks", strconv.Itoa(tid))
}

// needsV1 reports whether the sandbox needs a cgroup in v1 controller c:
// pids and cpu for their limits only; the freezer unless cgroup2's own
// freeze serves; memory always (it counts OOM kills, global ones too).
func (cg *cgroups) needsV1(c string, l sandbox.Limits) bool {
	switch c {
	case "pids":
		return l.Pids > 0
	case "cpu":
		return l.CPUs > 0
	case "freezer":
		return !cg.freezeV2()
	}
	return true
}

func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", file, err)
	}
	return nil
}

func (cg *cgroups) setLimits(l sandbox.Limits) error {
	if cg.unified {
		if l.MemoryBytes > 0 {
			if err := write(cg.v2, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return err
			}
			if err := write(cg.v2, "memory.swap.max", "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if l.Pids > 0 {
			if err := write(cg.v2, "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
				return err
			}
		}
		if l.CPUs > 0 {
			if err := write(cg.v2, "cpu.max", fmt.Sprintf("%d 100000", int64(l.CPUs*100000))); err != nil {
				return err
			}
		}
		return nil
	}
	if mem := cg.v1["memory"]; mem != "" {
		// The host's TCP memory is one pool (baseline.TCPBytes); a
		// kernel without v1's TCP accounting has no file for it.
		if err := write(mem, "memory.kmem.tcp.limit_in_bytes", strconv.Itoa(baseline.TCPBytes)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if l.MemoryBytes > 0 {
		mem := cg.v1["memory"]
		if err := write(mem, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		// Swap counts against the limit where the kernel accounts it; a
		// host with no swap has none to limit.
		if _, err := os.Stat(filepath.Join(mem, "memory.memsw.limit_in_bytes")); err == nil {
			if err := write(mem, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return err
			}
		} else if swapTotal() > 0 {
			_ = write(mem, "memory.swappiness", "0")
		}
	}
	if l.Pids > 0 {
		if err := write(cg.v1["pids"], "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	if l.CPUs > 0 {
		if err := write(cg.v1["cpu"], "cpu.cfs_period_us", "100000"); err != nil {
			return err
		}
		if err := write(cg.v1["cpu"], "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*100000), 10)); err != nil {
			return err
		}
	}
	return nil
}

func swapTotal() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SwapTotal:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// add moves pid into every cgroup of the sandbox.
func (cg *cgroups) add(pid int) error {
	p := strconv.Itoa(pid)
	for _, dir := range cg.dirs() {
		if err := write(dir, "cgroup.procs", p); err != nil {
			return err
		}
	}
	return nil
}

func (cg *cgroups) dirs() []string {
	var out []string
	if cg.v2 != "" {
		out = append(out, cg.v2)
	}
	for _, d := range cg.v1 {
		out = append(out, d)
	}
	return out
}

// allDirs is dirs with the commands' cgroup, if any, first: before the
// cgroup it is in, for a removal.
func (cg *cgroups) allDirs() []string {
	if cg.commands == "" {
		return cg.dirs()
	}
	return append([]string{cg.commands}, cg.dirs()...)
}

// procs lists the processes still in the sandbox's cgroups.
func (cg *cgroups) procs() []int {
	seen := map[int]bool{}
	for _, dir := range cg.allDirs() {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				seen[pid] = true
			}
		}
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	return out
}

// killAll ends every process in the cgroups (cgroup.kill where there is
// one, SIGKILL to each member otherwise) and waits until they are empty.
func (cg *cgroups) killAll(deadline time.Time) error {
	if cg.v2 != "" {
		_ = write(cg.v2, "cgroup.kill", "1")
	}
	for {
		pids := cg.procs()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v remain in the sandbox's cgroups", pids)
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// canFreeze reports whether the cgroups can be frozen: cgroup.freeze of
// cgroup2 (a core feature there, needing no controller), or else the v1
// freezer, which can stay FREEZING for good with a task in an
// uninterruptible sleep.
func (cg *cgroups) canFreeze() bool {
	return cg.freezeV2() || cg.v1["freezer"] != ""
}

func (cg *cgroups) freezeV2() bool {
	return cg.v2 != "" && fileExists(filepath.Join(cg.v2, "cgroup.freeze"))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// freeze stops (or thaws) every process in the sandbox and waits until the
// kernel reports the change done; a freeze that does not settle is undone.
func (cg *cgroups) freeze(ctx context.Context, on bool) error {
	var file, stateFile, want, thawed string
	value := map[bool]string{true: "1", false: "0"}[on]
	switch {
	case cg.freezeV2():
		file, stateFile, thawed = filepath.Join(cg.v2, "cgroup.freeze"), filepath.Join(cg.v2, "cgroup.events"), "0"
		want = "frozen " + value
	case cg.v1["freezer"] != "":
		file, thawed = filepath.Join(cg.v1["freezer"], "freezer.state"), "THAWED"
		stateFile, value = file, map[bool]string{true: "FROZEN", false: "THAWED"}[on]
		want = value
	default:
		return errors.New("no freezer cgroup")
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup freezer: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, freezeWait)
	defer cancel()
	for {
		b, err := os.ReadFile(stateFile)
		if err != nil {
			return fmt.Errorf("cgroup freezer: %w", err)
		}
		if strings.Contains(string(b), want) {
			return nil
		}
		select {
		case <-ctx.Done():
			if on {
				// Half frozen is no state to leave a sandbox in.
				_ = os.WriteFile(file, []byte(thawed), 0)
			}
			return fmt.Errorf("cgroup freezer: the sandbox did not reach %q: %w", want, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// freezeWait bounds how long a freeze or thaw may take to settle.
const freezeWait = 10 * time.Second

// oomFile is the file that counts the sandbox's OOM kills, opened once
// and kept: every command's count (the SDK reads one before each) is then
// a read, not an open, a read and a close (2 µs against 26 here). Nil
// without a memory cgroup.
func (cg *cgroups) oomFile() *os.File {
	cg.oomOnce.Do(func() {
		var file string
		switch {
		case cg.unified:
			file = filepath.Join(cg.v2, "memory.events")
		case cg.v1["memory"] != "":
			file = filepath.Join(cg.v1["memory"], "memory.oom_control")
		default:
			return
		}
		cg.oom, _ = os.Open(file)
	})
	return cg.oom
}

// oomKills counts the OOM kills in the sandbox so far.
func (cg *cgroups) oomKills() uint64 {
	f := cg.oomFile()
	if f == nil {
		return 0
	}
	var b [512]byte // either file is some 100 bytes
	n, _ := f.ReadAt(b[:], 0)
	for _, line := range strings.Split(string(b[:n]), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// memoryInUse is the sandbox's memory, where it has a memory cgroup.
func (cg *cgroups) memoryInUse() (int64, bool) {
	switch {
	case cg.unified:
		return memcg.InUse(cg.v2)
	case cg.v1["memory"] != "":
		return memcg.InUse(cg.v1["memory"])
	}
	return 0, false
}

// remove deletes the cgroups; they must be empty.
func (cg *cgroups) remove() error {
	cg.oomOnce.Do(func() {}) // none is opened from here on
	if cg.oom != nil {
		cg.oom.Close()
	}
	var errs []error
	for _, dir := range cg.allDirs() {
		var err error
		for i := 0; i < 100; i++ {
			if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(10 * time.Millisecond) // an exiting task may still be charged
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// existing finds the cgroups a sandbox id was given, if any remain.
func (s cgroupSupport) existing(id string) *cgroups {
	cg := &cgroups{v1: map[string]string{}, unified: s.unified}
	found := false
	if s.v2Root != "" {
		if d := filepath.Join(s.v2Root, id); isDir(d) {
			cg.v2, found = d, true
		}
	}
	for c, root := range s.v1Roots {
		if d := filepath.Join(root, id); isDir(d) {
			cg.v1[c], found = d, true
		}
	}
	if !found {
		return nil
	}
	if d := filepath.Join(cg.v1["pids"], commandsCgroup); cg.v1["pids"] != "" && isDir(d) {
		cg.commands = d
	}
	if d := filepath.Join(cg.v2, commandsCgroup); cg.unified && cg.v2 != "" && isDir(d) {
		cg.commands = d
	}
	return cg
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// SlowCgroupMoves names the cgroup2 mount the tier uses when it lacks
// favordynmods ("" when it has it, or there is none). Without it every
// move of a process between cgroups waits for an RCU grace period (about
// 10 ms on our machines) on a lock that every create takes.
func SlowCgroupMoves() string {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	return slowCgroup2(string(mi))
}

// slowCgroup2 is SlowCgroupMoves on a mountinfo text: the first cgroup2
// mount whose superblock options lack favordynmods.
func slowCgroup2(mountinfo string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != "cgroup2" {
			continue
		}
		if !slices.Contains(strings.Split(g[2], ","), "favordynmods") {
			return f[4]
		}
	}
	return ""
}
