package agent

import (
	"bytes"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaper owns every wait on this process's children. The agent is PID 1 or a
// child subreaper, so orphans of every command land here; reaping them all
// in one place means a process group is never kept "alive" by a zombie and
// no exit status is stolen from the execution that owns it.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	// all reaps every child (wait4(-1)); otherwise only registered pids, for
	// a process that shares its children with other code (tests).
	all bool
	// onThread, when set, runs each fork on one dedicated thread: a
	// thread-scoped confinement (the bounding set, Landlock) applied there
	// reaches every command.
	onThread func(func())
	// reserved, when set, closes once the agent's spare threads exist
	// (reserveThreads): no command starts before, so none can exhaust a
	// pids limit while the agent may still need a thread.
	reserved <-chan struct{}
	// cred, when set, is the workload's user, which every command takes
	// at its start: an agent with ids of its own runs with the workload's
	// as its effective ones (sandboxinit's becomeAgent).
	cred *syscall.Credential
	// oom is this process's oom_score_adj, open, and own its value: every
	// command starts at commandOOMScore, above the agent, so that the
	// kernel, out of memory, kills a command before the agent.
	oom *os.File
	own []byte
}

// commandOOMScore is the oom_score_adj every command starts with: the
// kernel's first choice when memory runs out. A command may lower its own
// back to the agent's, and then only its size tells them apart.
const commandOOMScore = "1000"

// oomScore reads the value of f (Options.OOMScore), nil where it cannot
// be read or is already commandOOMScore.
func oomScore(f *os.File) (*os.File, []byte) {
	if f == nil {
		return nil, nil
	}
	b := make([]byte, 16)
	n, err := f.ReadAt(b, 0)
	own := bytes.TrimSpace(b[:n])
	if (err != nil && n == 0) || string(own) == commandOOMScore {
		f.Close()
		return nil, nil
	}
	return f, own
}

// workloadCred is the user commands must switch to, nil when the agent's
// real and effective ids are the same (it runs as the workload's user).
func workloadCred() *syscall.Credential {
	r, e, _ := unix.Getresuid()
	rg, eg, _ := unix.Getresgid()
	if r == e && rg == eg {
		return nil
	}
	return &syscall.Credential{Uid: uint32(e), Gid: uint32(eg), NoSetGroups: true}
}

func newReaper(all bool) *reaper {
	r := &reaper{waiters: map[int]chan unix.WaitStatus{}, all: all, cred: workloadCred()}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			r.reap()
		}
	}()
	return r
}

func (r *reaper) reap() {
	if !r.all {
		r.mu.Lock()
		defer r.mu.Unlock()
		for pid, ch := range r.waiters {
			var ws unix.WaitStatus
			if got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid {
				ch <- ws
				delete(r.waiters, pid)
			}
		}
		return
	}
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if pid <= 0 {
			return
		}
		// The lock is held across spawn and registration, so a child reaped
		// before its registration finishes is matched once the lock frees.
		r.mu.Lock()
		if ch, ok := r.waiters[pid]; ok {
			ch <- ws
			delete(r.waiters, pid)
		}
		r.mu.Unlock()
	}
}

// spawn starts argv[0] as the leader of a new process group with the given
// stdio, and returns a channel that receives its wait status exactly once.
func (r *reaper) spawn(path string, argv, env []string, dir string, files []uintptr) (int, <-chan unix.WaitStatus, error) {
	return r.spawnTTY(path, argv, env, dir, files, false)
}

// spawnTTY is spawn; with ctty, the terminal on files[0] becomes the new
// session's controlling terminal.
func (r *reaper) spawnTTY(path string, argv, env []string, dir string, files []uintptr, ctty bool) (int, <-chan unix.WaitStatus, error) {
	if r.reserved != nil {
		<-r.reserved
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: files,
		// Its own session: no controlling terminal to inject into, and a
		// process group (pgid = pid) that cancellation addresses.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: ctty, Ctty: 0, Credential: r.cred},
	}
	var pid int
	var err error
	fork := func() {
		// The child inherits the score the process has as it forks.
		if r.oom != nil {
			_, _ = r.oom.WriteAt([]byte(commandOOMScore), 0)
			defer r.oom.WriteAt(r.own, 0)
		}
		pid, err = syscall.ForkExec(path, argv, attr)
	}
	if r.onThread != nil {
		r.onThread(fork)
	} else {
		fork()
	}
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = ch
	return pid, ch, nil
}

// groupAlive reports whether any process (zombies included) is still in the
// process group. EPERM proves existence as well as success does.
func groupAlive(pgid int) bool {
	if pgid <= 0 {
		return false
	}
	err := unix.Kill(-pgid, 0)
	return err == nil || !errors.Is(err, unix.ESRCH)
}

func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 0 {
		return nil
	}
	if err := unix.Kill(-pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// waitGroupGone polls until the group is empty or the deadline passes.
func waitGroupGone(pgid int, deadline time.Time) bool {
	wait := time.Millisecond
	for groupAlive(pgid) {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(wait, left))
		wait = min(wait*2, 25*time.Millisecond)
	}
	return true
}

// descendants lists every live process below self, found through /proc. A
// subreaper inherits the orphans of its whole tree, so this also finds
// processes that left their group with setsid or double-forked.
func descendants(self int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: fields start
		// after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
	}
	var out []int
	for pid := range parent {
		for p, hops := parent[pid], 0; p != 0 && hops < 4096; p, hops = parent[p], hops+1 {
			if p == self {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// killDescendants SIGKILLs everything below self until nothing is left or
// the deadline passes, and reports whether the tree is empty.
func killDescendants(self int, deadline time.Time) bool {
	for {
		pids := descendants(self)
		if len(pids) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hardenSelf makes the agent non-dumpable (so /proc/<agent>/environ and
// /proc/<agent>/mem are closed to same-uid processes), overwrites the token
// in the environment block the kernel shows, and makes the agent a child
// subreaper when it is not already PID 1.
func hardenSelf(scrub bool, secretVars []string) error {
	if scrub {
		if err := scrubEnvironBlock(secretVars); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return err
	}
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return err
		}
	}
	return nil
}

// scrubEnvironBlock overwrites the values of the named variables in the
// initial environment block (what /proc/self/environ shows) with 'x'.
func scrubEnvironBlock(names []string) error {
	block, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return err
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// env_start is field 50 of stat; fields here start at field 3.
	if len(fields) < 48 {
		return errors.New("scrub environment: /proc/self/stat has no env_start")
	}
	start, err := strconv.ParseUint(fields[47], 10, 64)
	if err != nil {
		return err
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	off := 0
	for _, kv := range strings.Split(string(block), "\x00") {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				v := len(n) + 1
				pad := []byte(strings.Repeat("x", len(kv)-v))
				if _, err := mem.WriteAt(pad, int64(start)+int64(off+v)); err != nil {
					return err
				}
			}
		}
		off += len(kv) + 1
	}
	return nil
}

// reserveThreads makes n OS threads and leaves them idle. A sandbox whose
// pids limit is exhausted (a fork bomb) refuses every new thread, and a Go
// program that cannot make one when it needs one dies; with spare threads
// parked the runtime reuses them instead, and the agent stays up.
func reserveThreads(n int) {
	var started sync.WaitGroup
	release := make(chan struct{})
	for range n {
		started.Add(1)
		go func() {
			runtime.LockOSThread() // a thread of its own while held
			started.Done()
			<-release
			runtime.UnlockOSThread() // then back to the runtime's idle threads
		}()
	}
	started.Wait()
	close(release)
}
