package adversarial

// The limits a tier holds: its own (pids, memory, CPU, the writable space)
// and the host's pools every sandbox draws on.

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// Limits checks that the tier's limits hold against a fork bomb, a
// memory hog and a CPU spinner. A limit the tier refuses (its capabilities
// say so, and create fails with ErrUnsupported) is skipped with the reason.
func Limits(t *testing.T, caps sandbox.Capabilities, create Create) {
	if !caps.PidsLimit || !caps.MemoryLimit {
		orig := create
		create = func(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox {
			if (spec.Limits.Pids > 0 && !caps.PidsLimit) || (spec.Limits.MemoryBytes > 0 && !caps.MemoryLimit) {
				t.Skip("the tier refuses this limit (sandbox.Capabilities), rather than enforce it badly")
			}
			return orig(t, spec)
		}
	}
	t.Run("ForkBomb", func(t *testing.T) {
		sb := create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
		// The bomb goes off in a subshell, forked while pids are free, and
		// the shell then becomes sleep (exec, no fork): a shell that has to
		// fork with every pid taken exits at once, before the timeout.
		res, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", "(bomb() { bomb | bomb & }; bomb); exec sleep 300"}, Timeout: 2 * time.Second})
		if err != nil || !res.TimedOut {
			t.Fatalf("fork bomb: %+v %v", res, err)
		}
		out, _, _ := sh(t, sb, "cat /proc/1/comm")
		if out != "cordon-agent\n" {
			t.Fatalf("agent after fork bomb: %q", out)
		}
		// The limit is the workload's own, not shared with the agent.
		small := create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: sandbox.MinPids}})
		if out, _, _ := sh(t, small, "echo fits"); out != "fits\n" {
			t.Fatalf("a %d-pid sandbox: %q", sandbox.MinPids, out)
		}
	})
	t.Run("PidsLimitHolds", func(t *testing.T) {
		const limit = 16
		sb := create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: limit}})
		// gVisor's own pids cgroup holds the limit loosely (measured: 14 to
		// 52 forks under a limit of 16, the most on a loaded machine;
		// docs/security.md).
		var slack int64
		if userSpaceKernel(sb) {
			slack = 48
		}
		CheckPidsLimit(t, sb, limit, slack)
	})
	t.Run("MemoryHogIsOOMKilled", func(t *testing.T) {
		sb := create(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
		_, _, res := sh(t, sb, "exec python3 -c 'a = bytearray(512 << 20)'")
		if !res.OOMKilled || res.Signal != "SIGKILL" || res.TimedOut {
			t.Fatalf("result %+v, want an OOM kill", res)
		}
		if out, _, r := sh(t, sb, "echo alive"); out != "alive\n" || r.OOMKilled {
			t.Fatalf("agent after OOM: %q %+v", out, r)
		}
		// An ordinary SIGKILL is not mistaken for one.
		if _, _, r := sh(t, sb, "kill -KILL $$"); r.OOMKilled || r.Signal != "SIGKILL" {
			t.Fatalf("plain SIGKILL: %+v", r)
		}
	})
	t.Run("FilesBounded", func(t *testing.T) {
		if !caps.DiskLimit {
			t.Skip("the tier refuses a writable space's limit (sandbox.Capabilities)")
		}
		const space = 4 << 20
		sb := create(t, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: space}})
		if userSpaceKernel(sb) {
			t.Skip("runsc drops a tmpfs's nr_inodes: gVisor's files are bounded by its sentry's memory (docs/security.md)")
		}
		if sb.Tier() == "kubernetes" {
			t.Skip("the kubelet mounts a pod's memory-backed emptyDirs, with no count of files: the pod's memory limit bounds them (docs/security.md)")
		}
		// Empty files hold no bytes, but each costs the kernel an inode:
		// a writable tmpfs holds at most one a page of its size, not the
		// millions the kernel's default allows whatever the size.
		out := Py(t, sb, `import os
for d in ("/workspace", "/tmp", "/dev/shm"):
    n = 0
    try:
        while n < 50000:
            open(os.path.join(d, "empty%d" % n), "w").close()
            n += 1
        print(d, n, 0)
    except OSError as e:
        print(d, n, e.errno)`)
		for d, most := range map[string]int{"/workspace": space / 4096, "/tmp": space / 4096, "/dev/shm": baseline.ShmBytes / 4096} {
			var n, errno int
			i := strings.Index(out, d+" ")
			if i < 0 {
				t.Fatalf("no count for %s: %q", d, out)
			}
			fmt.Sscanf(out[i+len(d)+1:], "%d %d", &n, &errno)
			if errno != int(syscall.ENOSPC) || n > most {
				t.Errorf("%s took %d empty files (errno %d), want ENOSPC by %d", d, n, errno, most)
			}
		}
	})
	t.Run("SysVIPCBounded", func(t *testing.T) {
		sb := create(t, sandbox.Spec{})
		if userSpaceKernel(sb) {
			t.Skip("gVisor's System V limits are constants of its own, and runsc takes no sysctl: there its objects are bounded by the sentry's memory (docs/security.md)")
		}
		// System V objects outlive the processes that made them: their IPC
		// namespace's defaults, no limits to speak of, let a sandbox
		// without a memory limit leave the host's memory held where no OOM
		// kill frees it (2 GiB of segments, 32,000 full queues).
		if sb.Tier() == "kubernetes" {
			// A kubelet allows only kernel.shm_rmid_forced: a segment no
			// process holds is removed, and the pod's memory limit bounds
			// the rest.
			Py(t, sb, "import ctypes\nctypes.CDLL(None).shmget(0, ctypes.c_size_t(1 << 30), 0o1600)")
			if out, _, _ := sh(t, sb, "tail -n +2 /proc/sysvipc/shm | wc -l"); out != "0\n" {
				t.Errorf("segments left once their process ended: %s", out)
			}
			return
		}
		// Shared memory holds what /dev/shm holds, in all and in one
		// segment; message queues and semaphore sets are few.
		out := Py(t, sb, `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for size in (48 << 20, 48 << 20, 1 << 30):
    ok = libc.shmget(0, ctypes.c_size_t(size), 0o1600) >= 0
    print(size >> 20, "made" if ok else ctypes.get_errno())
for what, get in (("queues", lambda: libc.msgget(0, 0o1600)), ("sets", lambda: libc.semget(0, 250, 0o1600))):
    n = 0
    while n < 40000 and get() >= 0:
        n += 1
    print(what, n, ctypes.get_errno())`)
		want := fmt.Sprintf("48 made\n48 %d\n1024 %d\nqueues 256 %d\nsets 128 %d\n", syscall.ENOSPC, syscall.EINVAL, syscall.ENOSPC, syscall.ENOSPC)
		if out != want {
			t.Errorf("System V objects: %q, want %q (segments: the second past %d MiB in all, the third past it alone)", out, want, baseline.ShmBytes>>20)
		}
	})
	t.Run("TCPMemoryBounded", func(t *testing.T) {
		sb := create(t, sandbox.Spec{})
		if sb.Tier() == "kubernetes" {
			t.Skip("a pod's cgroups are its node's runtime's, which set no bound on TCP memory under cgroup v1 (docs/security.md)")
		}
		if userSpaceKernel(sb) {
			t.Skip("gVisor's TCP is its sentry's own, in the sandbox's memory: the host's TCP memory is not at stake")
		}
		// The kernel's TCP memory is one pool for the whole kernel
		// (net.ipv4.tcp_mem, counted in pages by /proc/net/sockstat): 300
		// loopback connections whose data nobody reads took 1.1 GB of it
		// from a sandbox without any limit, and 1,000 put every TCP socket
		// of the host under memory pressure. The sandbox holds at most
		// its bound (with a page or two a socket, which the kernel always
		// allows).
		out := Py(t, sb, `import socket
def pool():
    for line in open("/proc/net/sockstat"):
        if line.startswith("TCP:"):
            f = line.split()
            return int(f[f.index("mem") + 1]) * 4096
before = pool()
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(512)
held, chunk = [], b"x" * (1 << 20)
for i in range(300):
    c = socket.create_connection(srv.getsockname())
    held.append((c, srv.accept()[0]))
    c.setblocking(False)
    try:
        for _ in range(64):
            c.send(chunk)
    except BlockingIOError:
        pass
print((pool() - before) >> 20)`)
		var grew int64
		if _, err := fmt.Sscan(out, &grew); err != nil {
			t.Fatalf("the pool's growth: %q: %v", out, err)
		}
		if grew > 256 {
			t.Errorf("300 connections left unread took %d MiB of the kernel's TCP memory, want at most %d MiB and a little", grew, baseline.TCPBytes>>20)
		}
	})
	t.Run("InotifyApart", func(t *testing.T) {
		a, b := create(t, sandbox.Spec{}), create(t, sandbox.Spec{})
		switch {
		case a.Tier() == "docker" || a.Tier() == "kubernetes":
			t.Skip("the sandbox has no user namespace of its own: its user is a host user, which every such sandbox shares (docs/security.md)")
		}
		// The kernel charges a user namespace's inotify instances to its
		// owner in the parent namespace too. Owned by root, one sandbox's
		// 128 left the host's root processes and every other sandbox
		// unable to make one.
		hold := `import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 2000 and libc.inotify_init1(0) >= 0:
    n += 1
print(n, flush=True)
sys.stdin.read()`
		held := make(chan string, 1)
		var line []byte
		done := make(chan error, 1)
		stdin, release := io.Pipe()
		go func() {
			_, err := a.Exec(t.Context(), "python3", sandbox.ExecOptions{Args: []string{"-c", hold}, StdinStream: stdin, Timeout: time.Minute,
				Stdout: writerFunc(func(p []byte) (int, error) {
					if line = append(line, p...); bytes.IndexByte(line, '\n') >= 0 && len(held) == 0 {
						held <- strings.TrimSpace(string(line))
					}
					return len(p), nil
				})})
			done <- err
		}()
		defer func() { release.Close(); <-done }()
		var n string
		select {
		case n = <-held:
		case err := <-done:
			done <- err
			t.Fatalf("the holder ended before it said how many it holds: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the holder never said how many it holds")
		}
		if got := Py(t, b, "import ctypes\nprint(ctypes.CDLL(None, use_errno=True).inotify_init1(0) >= 0)"); got != "True\n" {
			t.Errorf("another sandbox could not make an inotify instance while one held %s", n)
		}
		if err := hostInotify(); err != nil {
			t.Errorf("the host could not make an inotify instance while a sandbox held %s: %v", n, err)
		}
	})
	t.Run("PtysBounded", func(t *testing.T) {
		sb := create(t, sandbox.Spec{})
		switch {
		case userSpaceKernel(sb):
			t.Skip("gVisor's terminals are its sentry's own, none of the host's")
		case sb.Tier() == "docker" || sb.Tier() == "kubernetes":
			t.Skip("the runtime mounts the sandbox's devpts, with no bound of ours: its terminals draw on the host's pool (docs/security.md)")
		}
		// Every devpts instance but the host's draws on one pool
		// (kernel.pty.max less kernel.pty.reserve): one sandbox took all
		// 3071, and no other could open a terminal.
		out := Py(t, sb, `import os
fds = []
try:
    while len(fds) < 4000:
        fds.append(os.openpty())
except OSError as e:
    print(len(fds), e.errno)`)
		if want := fmt.Sprintf("%d %d\n", baseline.Ptys, syscall.ENOSPC); out != want {
			t.Errorf("terminals opened, and the refusal: %q, want %q", out, want)
		}
	})
	t.Run("CPU", func(t *testing.T) {
		sb := create(t, sandbox.Spec{Limits: sandbox.Limits{CPUs: 0.2}})
		if HostThrottled[sb.Tier()] {
			t.Skip("the limit throttles the sandbox's virtual CPUs from the host, which the guest's own clocks cannot see; the tier's tests measure it from the host")
		}
		// The lowest share of three one-second spins: a sandbox's own
		// count of its CPU time can run high on a contended host (gVisor's
		// sentry counts the time its task was throttled or preempted),
		// never low, and an unenforced limit reads near 1 every time.
		var shares []float64
		for range 3 {
			out := Py(t, sb, "import time\nt0=time.time(); c0=time.process_time()\nwhile time.time()-t0 < 1.0: pass\nprint(round((time.process_time()-c0)/(time.time()-t0), 2))")
			var share float64
			fmt.Sscanf(out, "%f", &share)
			if share <= 0.5 {
				return
			}
			shares = append(shares, share)
		}
		t.Fatalf("a 0.2-CPU sandbox used %v of a core", shares)
	})
}

// CheckPidsLimit counts the forks a workload of sb gets, whose pids limit
// is limit: fewer than the limit (the workload's shell and python count
// too), then EAGAIN (without a limit all 400 would succeed). The
// workload's pids are held apart from the agent's on every tier here; a
// tier that cannot hold them exactly is given slack over the limit.
func CheckPidsLimit(t *testing.T, sb *sandbox.Sandbox, limit, slack int64) {
	t.Helper()
	if n, code := CountForks(t, sb); code != "EAGAIN" || n >= limit+slack {
		t.Fatalf("a %d-pid sandbox forked %d times, then %s (want fewer than %d, then EAGAIN)", limit, n, code, limit+slack)
	}
}

// CountForks has a workload of sb fork up to 400 children that wait, and
// returns how many it got and the errno name that stopped it ("0" if none
// did); the children are gone when it returns.
func CountForks(t *testing.T, sb *sandbox.Sandbox) (int64, string) {
	t.Helper()
	out := Py(t, sb, `import os, signal, errno
kids, err = [], 0
try:
    for _ in range(400):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        kids.append(pid)
except OSError as e:
    err = e.errno
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
print(len(kids), errno.errorcode.get(err, err))`)
	t.Logf("forks before the refusal, and the refusal: %s", strings.TrimSpace(out))
	var n int64
	var code string
	if _, err := fmt.Sscanf(out, "%d %s", &n, &code); err != nil {
		t.Fatalf("fork count: %q: %v", out, err)
	}
	return n, code
}
