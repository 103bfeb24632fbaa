package clonexec

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"golang.org/x/sys/unix"
)

// nsAttr is what the process tier asks for: every namespace, the IDs mapped,
// root inside, a session of its own, a parent-death signal.
func nsAttr() *syscall.SysProcAttr {
	id := os.Geteuid()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}}
	if id == 0 {
		m = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	}
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings:                m,
		GidMappings:                m,
		GidMappingsEnableSetgroups: id == 0,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Pdeathsig:                  syscall.SIGKILL,
		Setsid:                     true,
	}
}

// requireUserns skips (outside CI) where this host does not let this user
// make the namespaces nsAttr asks for, as a full fork would find.
func requireUserns(t testing.TB) {
	t.Helper()
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = nsAttr()
	if err := cmd.Run(); err != nil {
		testutil.Missing(t, "user namespaces: %v", err)
	}
}

// run starts argv with start, its output on a pipe given as descriptors 1
// and 2 and an extra descriptor 3, and returns the output and exit status.
func run(t *testing.T, start func(files []int) (int, error), extra *os.File) (string, unix.WaitStatus) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	pid, err := start([]int{int(null.Fd()), int(w.Fd()), int(w.Fd()), int(extra.Fd())})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	return string(out), ws
}

// TestSameAsForkExec: a shell started by Start reports the same identity,
// namespaces' view, signal dispositions and mask, limits, directory,
// environment and descriptors as one started by syscall.ForkExec with the
// same attributes.
func TestSameAsForkExec(t *testing.T) {
	requireUserns(t)
	sh := testutil.Requires(t, "sh")[0]
	extra, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	// The child's root maps to an unprivileged host user: every directory
	// on the way must be open to others.
	dir, err := os.MkdirTemp("", "clonexec-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := `id; pwd; echo "$CLONEXEC_TEST"; grep -E '^(Sig(Blk|Ign|Cgt)|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Groups|NSpid)' /proc/self/status | sed 's/\t[0-9]*\t/\t/'; ulimit -Sn; ulimit -Hn; ls /proc/self/fd; readlink /proc/self/fd/3; ps -o sid= -o pgid= -p 1 2>/dev/null || true`
	argv := []string{"sh", "-c", script}
	env := []string{"CLONEXEC_TEST=passed through", "PATH=/usr/bin:/bin"}
	ours, ws := run(t, func(files []int) (int, error) {
		nofile, err := OriginalNofile("/proc/self/exe")
		if err != nil {
			t.Fatal(err)
		}
		pid, pidfd, err := Start(sh, argv, env, dir, files, nsAttr(), &nofile, nil)
		if err == nil {
			unix.Close(pidfd)
		}
		return pid, err
	}, extra)
	if ws.ExitStatus() != 0 {
		t.Fatalf("exit %v: %s", ws, ours)
	}
	theirs, _ := run(t, func(files []int) (int, error) {
		fds := make([]uintptr, len(files))
		for i, f := range files {
			fds[i] = uintptr(f)
		}
		return syscall.ForkExec(sh, argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: fds, Sys: nsAttr()})
	}, extra)
	if ours != theirs {
		t.Errorf("Start's child saw:\n%s\nsyscall.ForkExec's saw:\n%s", ours, theirs)
	}
	for _, want := range []string{"uid=0(root) gid=0(root)", "passed through", "SigBlk:\t0000000000000000", dir + "\n"} {
		if !strings.Contains(ours, want) {
			t.Errorf("output lacks %q:\n%s", want, ours)
		}
	}
}

// TestFailures: a step that fails is reported with its errno, and the
// child is reaped.
func TestFailures(t *testing.T) {
	requireUserns(t)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	files := []int{int(null.Fd()), int(null.Fd()), int(null.Fd())}
	badMap := nsAttr()
	badMap.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 0}}
	cases := []struct {
		name string
		path string
		dir  string
		sys  *syscall.SysProcAttr
		is   error
		step string
	}{
		{"MissingBinary", "/nonexistent/cordon-test", "", nsAttr(), fs.ErrNotExist, "execve"},
		{"MissingDir", "/bin/true", "/nonexistent/dir", nsAttr(), fs.ErrNotExist, "chdir"},
		{"BadMap", "/bin/true", "", badMap, unix.EINVAL, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, pidfd, err := Start(c.path, []string{"x"}, nil, c.dir, files, c.sys, nil, nil)
			if err == nil {
				unix.Close(pidfd)
				t.Fatal("started")
			}
			if !errors.Is(err, c.is) {
				t.Errorf("got %v, want %v", err, c.is)
			}
			var se *StepError
			if c.step != "" && (!errors.As(err, &se) || se.Step != c.step) {
				t.Errorf("got %v, want a failure of step %q", err, c.step)
			}
			if pidfd != -1 {
				t.Errorf("pidfd %d on failure", pidfd)
			}
			noChildLeft(t)
		})
	}
}

// TestPidfd: the pidfd Start returns is the child's: it becomes readable
// when the child exits.
func TestPidfd(t *testing.T) {
	requireUserns(t)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	files := []int{int(null.Fd()), int(null.Fd()), int(null.Fd())}
	pid, pidfd, err := Start("/bin/sleep", []string{"sleep", "0.2"}, nil, "", files, nsAttr(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, 0); n != 0 {
		t.Fatal("pidfd readable while the child runs")
	}
	start := time.Now()
	if n, err := unix.Poll(fds, 5000); n != 1 || err != nil {
		t.Fatalf("poll: %d %v", n, err)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Error("pidfd readable before the child could have exited")
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("%v %v", ws, err)
	}
}

// TestSupported: every field of syscall.SysProcAttr is either done by Start
// or refused by Supported; a field added to it by a later Go must be
// looked at here.
func TestSupported(t *testing.T) {
	done := map[string]bool{"Credential": true, "Setsid": true, "Pdeathsig": true, "Cloneflags": true,
		"UidMappings": true, "GidMappings": true, "GidMappingsEnableSetgroups": true}
	refused := map[string]any{"Chroot": "/x", "Ptrace": true, "Setpgid": true, "Setctty": true, "Noctty": true,
		"Ctty": 1, "Foreground": true, "Pgid": 1, "Unshareflags": uintptr(syscall.CLONE_NEWNS),
		"AmbientCaps": []uintptr{1}, "UseCgroupFD": true, "CgroupFD": 3, "PidFD": new(int)}
	typ := reflect.TypeFor[syscall.SysProcAttr]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if done[name] {
			continue
		}
		v, ok := refused[name]
		if !ok {
			t.Errorf("SysProcAttr.%s is neither done by Start nor refused", name)
			continue
		}
		sys := nsAttr()
		reflect.ValueOf(sys).Elem().FieldByName(name).Set(reflect.ValueOf(v))
		if Supported(sys) {
			t.Errorf("Supported accepts %s", name)
		}
	}
	if !Supported(nsAttr()) {
		t.Error("the process tier's attributes are refused")
	}
	sys := nsAttr()
	sys.Cloneflags |= syscall.CLONE_FILES
	if Supported(sys) {
		t.Error("Supported accepts CLONE_FILES")
	}
}

// BenchmarkStart: a process into new namespaces, /bin/true, started and
// waited for, by Start and by syscall.ForkExec. This process holds 32 MB,
// as a host serving sandboxes does: ForkExec's cost grows with it.
func BenchmarkStart(b *testing.B) {
	requireUserns(b)
	held := bytes.Repeat([]byte{1}, 32<<20)
	defer func() { _ = held[0] }()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	files := []int{int(null.Fd()), int(null.Fd()), int(null.Fd())}
	fds := []uintptr{null.Fd(), null.Fd(), null.Fd()}
	nofile, err := OriginalNofile("/proc/self/exe")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		start func() (int, error)
	}{
		{"Start", func() (int, error) {
			pid, pidfd, err := Start("/bin/true", []string{"true"}, nil, "", files, nsAttr(), &nofile, nil)
			if err == nil {
				unix.Close(pidfd)
			}
			return pid, err
		}},
		{"ForkExec", func() (int, error) {
			return syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Files: fds, Sys: nsAttr()})
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				pid, err := c.start()
				if err != nil {
					b.Fatal(err)
				}
				var ws unix.WaitStatus
				if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			testutil.ReportPercentiles(b, "start-to-exit", d)
		})
	}
}

// TestNofileRestored: a process that started with a soft RLIMIT_NOFILE below
// its hard one (which the Go runtime raised) gives its children the
// original, through Start given OriginalNofile as through
// syscall.ForkExec. The test runs itself again with such a limit.
func TestNofileRestored(t *testing.T) {
	requireUserns(t)
	if os.Getenv("CLONEXEC_NOFILE_CHILD") == "" {
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		if lim.Max < 1024 {
			t.Skipf("hard RLIMIT_NOFILE %d", lim.Max)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestNofileRestored$", "-test.v")
		cmd.Env = append(os.Environ(), "CLONEXEC_NOFILE_CHILD=1")
		// syscall.Setrlimit also tells this process's ForkExec to pass the
		// lowered limit on as it is.
		low := unix.Rlimit{Cur: 512, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, (*syscall.Rlimit)(&low)); err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, (*syscall.Rlimit)(&lim)); err != nil {
			t.Fatal(err)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestNofileRestored") {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	sh := testutil.Requires(t, "sh")[0]
	argv := []string{"sh", "-c", "ulimit -Sn"}
	limit := func(start func(files []int) (int, error)) string {
		out, _ := run(t, start, os.Stdin)
		return strings.TrimSpace(out)
	}
	nofile, err := OriginalNofile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if nofile.Cur != 512 {
		t.Fatalf("OriginalNofile: soft %d, want 512", nofile.Cur)
	}
	// It was read at start-up, before the runtime's raise: a traced child
	// of this process's reads the same.
	if traced, err := tracedNofile("/proc/self/exe"); err != nil || traced != nofile {
		t.Fatalf("read at start-up %+v, from a traced child %+v (%v)", nofile, traced, err)
	}
	start := func(nofile *unix.Rlimit) func(files []int) (int, error) {
		return func(files []int) (int, error) {
			pid, pidfd, err := Start(sh, argv, nil, "/", files, nsAttr(), nofile, nil)
			if err == nil {
				unix.Close(pidfd)
			}
			return pid, err
		}
	}
	forkExec := limit(func(files []int) (int, error) {
		fds := make([]uintptr, len(files))
		for i, f := range files {
			fds[i] = uintptr(f)
		}
		return syscall.ForkExec(sh, argv, &syscall.ProcAttr{Dir: "/", Files: fds, Sys: nsAttr()})
	})
	if got := limit(start(&nofile)); got != "512" || forkExec != "512" {
		t.Errorf("soft limit in the child: Start %s, ForkExec %s, want 512", got, forkExec)
	}
	// Without the original, the raised limit is what the child gets.
	if got := limit(start(nil)); got == "512" {
		t.Errorf("soft limit in the child without the original: %s, want the raised one", got)
	}
}

// TestCheck: Check succeeds for what the process tier asks, fails for a
// map the kernel refuses, and leaves no child either way.
func TestCheck(t *testing.T) {
	requireUserns(t)
	if err := Check(nsAttr()); err != nil {
		t.Fatal(err)
	}
	bad := nsAttr()
	bad.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 0}}
	if err := Check(bad); !errors.Is(err, unix.EINVAL) {
		t.Errorf("got %v, want EINVAL", err)
	}
	noChildLeft(t)
}

// noChildLeft fails t if this process has a child, exited or not.
func noChildLeft(t *testing.T) {
	t.Helper()
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); err != unix.ECHILD {
		t.Errorf("wait4: %d %v: a child was left", pid, err)
	}
}

// TestHelper: the helper runs its calls in the child's namespaces beside
// the child, passes a call's result on to a later call (From),
// tolerates the error it is told to, stops at the first other
// failure, which Err then names, and is the child's child (pid 2 in the
// child's PID namespace).
func TestHelper(t *testing.T) {
	requireUserns(t)
	for _, c := range []struct {
		name          string
		failing, late bool // late: the calls come from Fill, once the child exists
		none          bool // Fill says no helper
	}{{"succeeds", false, false, false}, {"fails", true, false, false}, {"filled", false, true, false}, {"none", false, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHelper()
			plan := func() {
				fdcwd := unix.AT_FDCWD
				atFDCWD := uintptr(fdcwd)
				text := func(s string) uintptr {
					b := []byte(s)
					h.Keep(b)
					return uintptr(unsafe.Pointer(&b[0]))
				}
				root, _ := syscall.BytePtrFromString("/")
				missing, _ := syscall.BytePtrFromString("/nonexistent-cordon-test/x")
				h.Keep(root)
				h.Keep(missing)
				h.Call("say hello", unix.SYS_WRITE, 1, text("helper\n"), 7)
				dup := h.Len()
				h.Call("duplicate the output", unix.SYS_DUP, 1)
				h.Add(HelperCall{Name: "write to the duplicate", Nr: unix.SYS_WRITE, Args: []uintptr{0, text("dup\n"), 4}, From: dup + 1})
				h.Add(HelperCall{Name: "close the duplicate", Nr: unix.SYS_CLOSE, Args: []uintptr{0}, From: dup + 1})
				h.Add(HelperCall{Name: "make / again", Nr: unix.SYS_MKDIRAT, Args: []uintptr{atFDCWD, uintptr(unsafe.Pointer(root)), 0o755}, Except: unix.EEXIST})
				if c.failing {
					h.Call("make a directory under a missing one", unix.SYS_MKDIRAT, atFDCWD, uintptr(unsafe.Pointer(missing)), 0o755)
				}
				h.Call("say goodbye", unix.SYS_WRITE, 1, text("after\n"), 6)
				h.Call("release the child", unix.SYS_WRITE, 4, text("\n"), 1)
			}
			if !c.late {
				plan()
			} else {
				planned := make(chan bool, 1)
				go func() { plan(); planned <- !c.none }()
				h.Fill = func() bool { return <-planned }
			}
			// The child waits for the helper's line on descriptor 3, or for
			// the end of file its exit makes: the helper dies with the child.
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			defer pw.Close()
			out, ws := run(t, func(files []int) (int, error) {
				files = append(files[:3], int(pr.Fd()), int(pw.Fd()))
				pid, pidfd, err := Start("/bin/sh", []string{"sh", "-c", "exec 4>&-; read x <&3; echo child"}, nil, "/", files, nsAttr(), nil, h)
				if err == nil {
					unix.Close(pidfd)
				}
				pw.Close()
				return pid, err
			}, nil)
			if !ws.Exited() || ws.ExitStatus() != 0 {
				t.Fatalf("child: %v", ws)
			}
			if c.none {
				if out != "child\n" || h.Pid() != 0 {
					t.Errorf("no helper, yet output %q, pid %d", out, h.Pid())
				}
				return
			}
			// The output's end of file came once the helper had exited too.
			if !strings.Contains(out, "helper\ndup\n") || !strings.Contains(out, "child\n") {
				t.Errorf("output %q", out)
			}
			if h.Pid() != 2 {
				t.Errorf("helper pid %d in the child's namespace, want 2", h.Pid())
			}
			err = h.Err()
			if !c.failing {
				if err != nil || !strings.Contains(out, "after\n") {
					t.Errorf("err %v, output %q", err, out)
				}
				return
			}
			var se *StepError
			if !errors.As(err, &se) || se.Step != "make a directory under a missing one" || !errors.Is(err, unix.ENOENT) {
				t.Errorf("err %v", err)
			}
			if strings.Contains(out, "after") {
				t.Errorf("the helper went on after its failure: %q", out)
			}
		})
	}
}

// TestHelperFoundFirst: with a helper, the program is found before the
// child is started, so nothing done to paths from then on (by the helper,
// which may enter another root, or by anyone) changes what the child
// executes. Here its file is removed after the clone, before the exec.
func TestHelperFoundFirst(t *testing.T) {
	requireUserns(t)
	dir, err := os.MkdirTemp("", "clonexec-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the child could find it by path
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "sh")
	b, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h := NewHelper()
	h.Call("nothing", unix.SYS_GETPID)
	h.Fill = func() bool {
		if err := os.Remove(prog); err != nil {
			t.Error(err)
		}
		return true
	}
	out, ws := run(t, func(files []int) (int, error) {
		pid, pidfd, err := Start(prog, []string{"sh", "-c", "echo child"}, nil, "/", files[:3], nsAttr(), nil, h)
		if err == nil {
			unix.Close(pidfd)
		}
		return pid, err
	}, nil)
	if !ws.Exited() || ws.ExitStatus() != 0 || out != "child\n" {
		t.Fatalf("child %v, output %q", ws, out)
	}
	if _, err := os.Stat(prog); !os.IsNotExist(err) {
		t.Fatalf("the program was not removed before the exec: %v", err)
	}
}

// TestHelperRefused: a helper needs the child in a new PID namespace.
func TestHelperRefused(t *testing.T) {
	attr := nsAttr()
	attr.Cloneflags &^= syscall.CLONE_NEWPID
	if _, _, err := Start("/bin/true", []string{"true"}, nil, "/", []int{0, 1, 2}, attr, nil, NewHelper()); err == nil {
		t.Fatal("started a helper outside a new PID namespace")
	}
}

// TestNamespaceOwner: as root, the child's user namespace is owned by the
// host id its root maps to, not by root (whose per-user counts every
// sandbox would otherwise share), and this process is as it was after:
// root, its securebits unchanged.
func TestNamespaceOwner(t *testing.T) {
	testutil.RequiresRoot(t)
	requireUserns(t)
	bits, _ := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	files := []int{int(null.Fd()), int(null.Fd()), int(null.Fd())}
	sys := nsAttr()
	pid, pidfd, err := Start("/bin/sleep", []string{"sleep", "5"}, nil, "", files, sys, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		unix.Wait4(pid, nil, 0, nil)
		unix.Close(pidfd)
	}()
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var owner uint32
	const nsGetOwnerUID = 0xb704 // NS_GET_OWNER_UID
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, ns.Fd(), nsGetOwnerUID, uintptr(unsafe.Pointer(&owner))); e != 0 {
		t.Fatal(e)
	}
	if want := uint32(sys.UidMappings[0].HostID); owner != want {
		t.Errorf("the namespace is owned by %d, want %d (its root's host id)", owner, want)
	}
	if after, _ := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0); os.Geteuid() != 0 || after != bits {
		t.Errorf("after the start: euid %d, securebits %#x (before %#x)", os.Geteuid(), after, bits)
	}
}
