package vminit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/agent/startup"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// Modules lists, in load order, the kernel modules the initramfs carries
// under /lib/modules (NAME.ko): what the guest kernel builds as modules
// and the guest needs before its root disk and port exist.
var Modules = []string{"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console"}

// Main brings the guest up and serves the agent, with serve (agent.Start).
// It never returns: when the agent ends (on its own, or ended by the
// host's PowerOff on the control port), the guest flushes its file
// systems and powers off. The host's going does not end it: the agent
// serves the next host that rejoins.
func Main(serve func(env []string, opts startup.Options) (func() int, int)) int {
	err := run(serve)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon-agent (vm init): %v\n", err)
	}
	if os.Getenv(envAgent) == "1" {
		return 1 // the agent's process: the init powers the guest off
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	return 1
}

func run(serve func(env []string, opts startup.Options) (func() int, int)) error {
	if os.Getenv(envAgent) == "1" {
		return agentMain(serve)
	}
	if err := early(); err != nil {
		return err
	}
	port, err := openPort(PortName)
	if err != nil {
		return err
	}
	control, err := openPort(ControlPortName)
	if err != nil {
		return err
	}
	// All that needs nothing of the host's configuration comes before it
	// is asked for: a guest saved while it waits (the host's saved guest)
	// starts from there, its root built and its agent's process started.
	if err := buildRoot(baseline.DefaultUID); err != nil {
		return err
	}
	agent, err := spawnAgent(port)
	if err != nil {
		return err
	}
	cfg, err := handshake(port)
	if err != nil {
		return err
	}
	if err := seed(cfg); err != nil {
		return err
	}
	if len(cfg.Run) > 0 {
		_ = agent.cmd.Process.Kill()
		_ = agent.cmd.Wait()
		return testRun(port, cfg)
	}
	if err := sizeScratch(cfg.ScratchBytes); err != nil {
		return err
	}
	if cfg.DiskBytes > 0 {
		if err := attachDisk(cfg.DiskBytes, baseline.DefaultUID); err != nil {
			return fmt.Errorf("the workspace's disk: %w", err)
		}
	}
	go serveControl(control, agent, cfg.DiskBytes > 0)
	return agent.run(cfg)
}

// testRun runs cfg.Run as the guest's root (Config.Run), its output on
// the port, then its exit status.
func testRun(port *os.File, cfg Config) error {
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+cpu +memory +pids"), 0); err != nil {
		return fmt.Errorf("delegate the cgroup controllers: %w", err)
	}
	cmd := exec.Command(cfg.Run[0], cfg.Run[1:]...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "TMPDIR=/tmp"}, cfg.RunEnv...)
	cmd.Dir = "/tmp"
	cmd.Stdout, cmd.Stderr = port, port
	code := 0
	if err := cmd.Run(); err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			fmt.Fprintf(port, "cordon-agent (vm init): %v\n", err)
		}
	}
	fmt.Fprintf(port, "%s%d\n", ExitMarker, code)
	return nil
}

// sandboxCgroup is the agent's process's cgroup under a pids limit: the
// threaded domain of the cgroup its commands run in.
const sandboxCgroup = "/sys/fs/cgroup/sandbox"

// holdCommands moves the agent's process (pid, in the guest's namespace)
// into a cgroup of its own and the thread it forks commands from into a
// threaded child of it whose pids.max is the workload's limit (and the
// thread itself), as the process tier does on cgroup2: every command and
// all it starts count there, and a fork bomb cannot take the agent's
// threads. The init does it, as root, before the agent is configured.
func holdCommands(pid int, limit int64) error {
	commands := filepath.Join(sandboxCgroup, "commands")
	for _, w := range []struct{ path, value string }{
		{"/sys/fs/cgroup/cgroup.subtree_control", "+pids"},
		{sandboxCgroup, ""},
		{commands, ""},
		{filepath.Join(commands, "cgroup.type"), "threaded"},
		{filepath.Join(sandboxCgroup, "cgroup.subtree_control"), "+pids"},
		{filepath.Join(commands, "pids.max"), fmt.Sprint(limit + 1)},
		{filepath.Join(sandboxCgroup, "cgroup.procs"), fmt.Sprint(pid)},
	} {
		var err error
		if w.value == "" {
			err = os.Mkdir(w.path, 0o755)
		} else {
			err = os.WriteFile(w.path, []byte(w.value), 0)
		}
		if err != nil {
			return err
		}
	}
	// The thread named for it, else the first.
	tid := strconv.Itoa(pid)
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, t.Name())); err == nil && strings.TrimSpace(string(comm)) == sandboxinit.CommandThreadName {
			tid = t.Name()
		}
	}
	return os.WriteFile(filepath.Join(commands, "cgroup.threads"), []byte(tid), 0)
}

// sizeScratch bounds the scratch directories' tmpfs (they share bytes as
// on the container tiers); 0 leaves the kernel's default.
func sizeScratch(bytes int64) error {
	if bytes <= 0 {
		return nil
	}
	for _, d := range baseline.ScratchDirs {
		data := strings.Join(baseline.TmpfsLimits(d.Size(bytes)), ",")
		if err := unix.Mount("", d.Path, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, data); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("size %s: %w", d.Path, err)
		}
	}
	return nil
}

// envAgent marks the agent's own process, which the guest's init starts
// as the first of a PID namespace of its own: the sandbox sees its own
// processes, not the guest kernel's threads, and the init, unconfined,
// powers the guest off when the agent ends.
const envAgent = "cordon_vm_agent"

// spawnAgent starts the agent (this binary again) in a PID and mount
// namespace of its own, handing it the port, with no CAP_SYS_PTRACE in
// its bounding set (it inspects commands with no more than on other
// tiers). It waits for its configuration (spawned.run).
func spawnAgent(port *os.File) (*spawned, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_PTRACE, 0, 0, 0); err != nil {
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args[0] = "cordon-agent"
	cmd.Env = []string{envAgent + "=1"}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r, port, readyW} // 3, 4 and 5
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the agent: %w", err)
	}
	r.Close()
	readyW.Close()
	// It says when it has made itself the agent, all but its
	// configuration: a guest saved after that starts from there.
	if _, err := io.ReadFull(readyR, make([]byte, 1)); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("the agent did not start: %w", err)
	}
	return &spawned{cmd: cmd, config: w}, nil
}

// spawned is the agent's process, waiting for its configuration.
type spawned struct {
	cmd    *exec.Cmd
	config *os.File
}

// run hands the agent its configuration and waits for its end. Under a
// pids limit, its commands' pids are held apart first.
func (a *spawned) run(cfg Config) error {
	if cfg.Pids > 0 {
		if err := holdCommands(a.cmd.Process.Pid, cfg.Pids); err != nil {
			_ = a.cmd.Process.Kill()
			return fmt.Errorf("the workload's pids limit: %w", err)
		}
	}
	err := json.NewEncoder(a.config).Encode(cfg)
	a.config.Close()
	if err != nil {
		_ = a.cmd.Process.Kill()
	}
	return fmt.Errorf("the agent ended: %v", a.cmd.Wait())
}

// agentMain is the agent's process: pid 1 of its namespace, with its own
// /proc, serving on the port.
func agentMain(serve func(env []string, opts startup.Options) (func() int, int)) error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := maskProc("/proc", "/run"); err != nil {
		return err
	}
	// PID 1 is the agent, by name as on every tier.
	_ = os.WriteFile("/proc/self/task/1/comm", []byte("cordon-agent"), 0)
	// What needs nothing of the host's configuration is done before it is
	// read (a saved guest waits there): the egress socket, and the
	// agent's own confinement and identity.
	uid := baseline.DefaultUID
	egress, err := listenEgress(uid)
	if err != nil {
		return err
	}
	workload := sandboxinit.EnvWorkload + "=" + fmt.Sprintf("%d:%d", uid, uid)
	// Every thread, the agent's own among them, takes no_new_privs (no
	// setuid file of the image gives a command anything) and the filter
	// commands run under, as a container runtime would have given them.
	if err := sandboxinit.ConfineProcess(); err != nil {
		return fmt.Errorf("confine the agent: %w", err)
	}
	opts, err := sandboxinit.ContainerOptions([]string{workload})
	if err != nil {
		return err
	}
	ready := os.NewFile(5, "ready")
	_, err = ready.Write([]byte{1})
	ready.Close()
	if err != nil {
		return err
	}
	var cfg Config
	cf := os.NewFile(3, "config")
	err = json.NewDecoder(io.LimitReader(cf, MaxConfigBytes)).Decode(&cfg)
	cf.Close()
	if err != nil {
		return fmt.Errorf("the init's configuration: %w", err)
	}
	unix.CloseOnExec(4)
	port := &sessionPort{File: os.NewFile(4, "port")}
	sessions := newSessions(port)
	go ServeStreamsTo(egress, sessions.current) // each a stream to the host's egress proxy
	// The token goes to the agent in the environment it is handed, never
	// this process's: the agent takes it out before any command starts.
	env := append(cfg.Env,
		baseline.EnvPrefix+"TOKEN="+cfg.Token,
		baseline.EnvPrefix+"COUNT_OOM=kernel",
		workload)
	opts.Listener = sessions.streams
	wait, code := serve(env, opts)
	if wait == nil {
		return fmt.Errorf("the agent did not start (exit %d)", code)
	}
	done := make(chan int, 1)
	go func() { done <- wait() }()
	go sessions.serve()
	code = <-done
	return fmt.Errorf("the agent exited (%d)", code)
}

// muxConfig is the port's multiplexer's: keepalives off (the host holds
// the guest's deadlines), windows large enough for file transfers.
func muxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.LogOutput = io.Discard
	c.MaxStreamWindowSize = 1 << 20
	c.StreamOpenTimeout = 30 * time.Second
	return c
}

// MuxConfig is the host's side of the same multiplexer.
func MuxConfig() *yamux.Config { return muxConfig() }

// early mounts what the initramfs needs and loads the modules.
func early() error {
	for _, m := range []struct{ src, dst, typ string }{
		{"devtmpfs", "/dev", "devtmpfs"},
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.typ, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	// Memory is overcommitted as on a host: a workload past its VM's
	// memory meets the OOM killer (reported as an OOM kill), as past a
	// container's limit, rather than failing its allocations up front.
	if err := os.WriteFile("/proc/sys/vm/overcommit_memory", []byte("1"), 0); err != nil {
		return fmt.Errorf("overcommit: %w", err)
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	for _, name := range Modules {
		// Parameters the kernel's command line gives a module that is not
		// built in are the loader's to pass (virtio_mmio.device=...).
		var params []string
		for _, w := range strings.Fields(string(cmdline)) {
			if p, ok := strings.CutPrefix(w, name+"."); ok {
				params = append(params, p)
			}
		}
		f, err := os.Open("/lib/modules/" + name + ".ko")
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		err = unix.FinitModule(int(f.Fd()), strings.Join(params, " "), 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load module %s: %w", name, err)
		}
	}
	return nil
}

// openPort finds the host's port named name among the virtio-serial
// ports.
func openPort(name string) (*os.File, error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(n))
			if f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
				return f, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio-serial port named %s", name)
		}
	}
}

// handshake tells the host the guest is up and reads its configuration.
func handshake(port *os.File) (Config, error) {
	var cfg Config
	if _, err := io.WriteString(port, Ready); err != nil {
		return cfg, err
	}
	// One byte at a time: nothing past the line may be taken from the
	// port, which the multiplexer reads next.
	var line []byte
	var b [1]byte
	for {
		if _, err := port.Read(b[:]); err != nil {
			return cfg, fmt.Errorf("the host's configuration: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		if line = append(line, b[0]); len(line) > MaxConfigBytes {
			return cfg, errors.New("the host's configuration is too long")
		}
	}
	if err := json.Unmarshal(line, &cfg); err != nil {
		return cfg, fmt.Errorf("the host's configuration: %w", err)
	}
	if cfg.Token == "" || cfg.UID != baseline.DefaultUID {
		return cfg, fmt.Errorf("the host's configuration lacks a token, or names a workload uid other than %d", baseline.DefaultUID)
	}
	return cfg, nil
}

// seed sets the guest's clock and mixes the host's seed into its random
// pool, crediting it (RNDADDENTROPY).
func seed(cfg Config) error {
	if cfg.TimeNs > 0 {
		tv := unix.NsecToTimeval(cfg.TimeNs)
		_ = unix.Settimeofday(&tv)
	}
	if len(cfg.Seed) == 0 {
		return nil
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 8+len(cfg.Seed))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(len(cfg.Seed) * 8)
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(cfg.Seed))
	copy(buf[8:], cfg.Seed)
	const rndAddEntropy = 0x40085203
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return fmt.Errorf("seed the random pool: %w", e)
	}
	// The kernel draws on its pool only when it reseeds its generator,
	// which a guest restored from a saved one would do on the saved
	// one's schedule: every restored guest's random stream would be the
	// same until then. It reseeds now.
	const rndReseedCRNG = 0x5207
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return fmt.Errorf("reseed the random generator: %w", e)
	}
	return nil
}

// newRoot is where the guest's root is assembled.
const newRoot = "/newroot"

// buildRoot mounts the root disk read-only with the sandbox's writable
// space (tmpfs), devices, /proc, /sys and cgroup2 on it, gives the
// sandbox user its account, and makes it the root.
func buildRoot(uid int) error {
	if err := os.MkdirAll(newRoot, 0o755); err != nil {
		return err
	}
	root := diskBySerial(RootSerial)
	if root == "" {
		return fmt.Errorf("no root disk (a virtio disk with serial %s)", RootSerial)
	}
	if err := unix.Mount(root, newRoot, "ext4", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount the root disk: %w", err)
	}
	at := func(p string) string { return filepath.Join(newRoot, p) }
	mount := func(src, dst, typ string, flags uintptr, data string) error {
		if err := unix.Mount(src, at(dst), typ, flags, data); err != nil {
			return fmt.Errorf("mount %s: %w", dst, err)
		}
		return nil
	}
	if err := writableSpace(at, uid); err != nil {
		return err
	}
	if err := mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=4m"); err != nil {
		return err
	}
	if err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := maskProc(at("/proc"), at("/run")); err != nil {
		return err
	}
	if err := mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
		return err
	}
	if err := mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := devices(at("/dev")); err != nil {
		return err
	}
	// Who and where the sandbox is (its user's account, its hosts,
	// hostname and resolver), over the image's files, as on every tier.
	ids := at("/run/cordon-identity")
	if err := os.Mkdir(ids, 0o755); err != nil {
		return err
	}
	files := baseline.IdentityFiles(uid, false)
	passwd, _ := os.ReadFile(at("/etc/passwd"))
	group, _ := os.ReadFile(at("/etc/group"))
	files["/etc/passwd"], files["/etc/group"] = baseline.MergeAccounts(string(passwd), string(group), uid)
	for target, content := range files {
		src := filepath.Join(ids, filepath.Base(target))
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return err
		}
		if _, err := os.Stat(at(target)); err != nil {
			continue
		}
		if err := unix.Mount(src, at(target), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", target, err)
		}
	}
	if err := os.MkdirAll(at(baseline.SocketDir), 0o755); err != nil {
		return err
	}
	// A test run's files (Config.Run), from the initramfs.
	if st, err := os.Stat("/extra"); err == nil && st.IsDir() {
		if err := os.Mkdir(at(ExtraDir), 0o755); err != nil {
			return err
		}
		if err := unix.Mount("/extra", at(ExtraDir), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the extra files: %w", err)
		}
	}
	if err := unix.Sethostname([]byte(baseline.Hostname)); err != nil {
		return err
	}
	// System V IPC bounded as on the other tiers (baseline.SysVIPC).
	for _, c := range baseline.SysVIPC {
		if err := os.WriteFile(filepath.Join("/proc/sys", c[0]), []byte(c[1]), 0); err != nil {
			return err
		}
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	// The guest's devices stay reachable to the init alone, for a disk
	// attached later (attachDisk): the new root's /dev has none of them.
	var err error
	if guestDev, err = os.OpenFile("/dev", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return err
	}
	// switch_root: the initramfs stays under the new root, unreachable.
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	return unix.Chdir("/")
}

// maskProc hides the /proc entries no sandbox reads (baseline.ProcMasked)
// under an empty file or directory, as on every tier: a guest's are its
// own, but what a sandbox sees is the same everywhere.
func maskProc(proc, run string) error {
	empty := filepath.Join(run, ".empty")
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		return err
	}
	emptyDir := filepath.Join(run, ".emptydir")
	if err := os.Mkdir(emptyDir, 0o555); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	for _, name := range baseline.ProcMasked {
		p := filepath.Join(proc, name)
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		src := empty
		if st.IsDir() {
			src = emptyDir
		}
		if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
		_ = unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
	}
	return nil
}

// devices makes the sandbox's /dev: the usual character devices, a
// private devpts and /dev/shm; nothing of the guest's hardware.
func devices(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		p := filepath.Join(dev, d.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, strings.Join(baseline.DevptsOptions, ",")); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, strings.Join(baseline.ShmOptions(), ",")); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	for _, l := range [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}} {
		if err := os.Symlink(l[0], filepath.Join(dev, l[1])); err != nil {
			return err
		}
	}
	return nil
}

// loopbackUp brings lo up: the agent's egress bridge listens on it.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// listenEgress makes the agent's egress socket. It is the workload
// user's, as on the container tiers (the agent's bridge dials it with
// that user's file-system identity), and leads nowhere the bridge on
// 127.0.0.1:3128 does not: to the proxy, under the sandbox's policy.
func listenEgress(uid int) (net.Listener, error) {
	ln, err := net.Listen("unix", baseline.EgressSocket)
	if err != nil {
		return nil, err
	}
	if err := os.Chown(baseline.EgressSocket, uid, uid); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Chmod(baseline.EgressSocket, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// IsGuest reports whether this process is a microVM's init, or the
// agent's process it starts.
func IsGuest() bool {
	return os.Getpid() == 1 && (os.Getenv(EnvMarker) == "1" || os.Getenv(envAgent) == "1")
}
