// Package process is the process tier: native Linux sandboxes built from
// user, mount, PID, network, IPC, UTS and cgroup namespaces, pivot_root,
// seccomp, Landlock and cgroup limits, with no external binary. cordon-agent
// starts as the sandbox's init (agent/sandboxinit), builds the sandbox
// around itself, and becomes its PID 1.
package process

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/clonexec"
	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/agentbin"
	"github.com/cordon-sandbox/cordon/internal/agentproc"
	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/internal/spawner"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// Paths inside every process-tier sandbox.
const (
	Workspace = "/workspace"
	Home      = "/home/sandbox"
	SocketDir = "/run/cordon"
	agentSock = SocketDir + "/agent.sock"
)

// DefaultUID is the sandbox user's uid and gid inside.
const DefaultUID = 1000

// Backend is the process tier.
type Backend struct {
	cfg      Config
	poolMu   sync.Mutex
	pool     []*slot
	filling  int
	refill   *time.Timer    // re-armed by every create: refills wait for a pause
	fills    sync.WaitGroup // refills under way
	closed   bool
	once     sync.Once
	stateErr error // why StateDir may not hold sandboxes (checkStateDir), if it may not
	cgroups  cgroupSupport
	landlock int
	heavy    atomic.Bool  // this process outgrew SpawnerRSS
	inits    atomic.Int64 // inits started, not counting those useSpawner sent to the spawner
	noClone  bool         // tests: start inits as where clonexec is unavailable
	// helperRoots counts the sandboxes whose root a helper built beside
	// their init's start (tests ask: the fallback must not hide its loss).
	helperRoots atomic.Int64
}

// originalNofile is this process's original RLIMIT_NOFILE, which inits
// started with clonexec get back; where it cannot be learnt they are
// started as before. Learnt once, in the background from the first New on.
var originalNofile = sync.OnceValues(func() (unix.Rlimit, error) {
	return clonexec.OriginalNofile("/proc/self/exe")
})

// SpawnerRSS is the resident size past which a host that cannot use
// clonexec starts sandbox inits through the spawner whether or not
// Config.Spawner asks: a fork that makes
// a user namespace copies its parent's page tables, and holding 100 MB made
// a create 6–9 ms slower than through the helper (create → first result
// 27.1–27.6 against 18.4–21.6 ms p50, BenchmarkLifecycle).
const SpawnerRSS = 64 << 20

// useSpawner: configured, or this process has outgrown SpawnerRSS (and so
// it stays, rather than switch back and forth).
func (b *Backend) useSpawner() bool {
	if b.cfg.Spawner || b.heavy.Load() {
		return true
	}
	if residentBytes() > SpawnerRSS {
		b.heavy.Store(true)
		return true
	}
	return false
}

// residentBytes is this process's resident size (0 if unknown).
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns the process backend.
func New(cfg Config) *Backend {
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir()
	}
	if clonexec.Available {
		go originalNofile()
	}
	return &Backend{cfg: cfg}
}

func (b *Backend) Name() string { return Name }

// StateDir is where the backend keeps its sandboxes' host directories.
func (b *Backend) StateDir() string { return b.cfg.StateDir }

func (b *Backend) probe() {
	b.once.Do(func() {
		b.cgroups = probeCgroups()
		b.landlock = sandboxinit.LandlockABI()
		// Leftovers are swept only from a directory that nobody else
		// could have planted them in.
		if b.stateErr = checkStateDir(b.cfg.StateDir); b.stateErr == nil {
			b.sweepStale()
		}
	})
}

func (b *Backend) Capabilities() sandbox.Capabilities {
	b.probe()
	lim := b.cgroups.limits()
	return sandbox.Capabilities{
		Isolated: true, MemoryLimit: lim, PidsLimit: lim, CPULimit: lim,
		Landlock: b.landlock >= 1, RootFS: true, User: true, Egress: true,
		// Layout directories are id-mapped mounts, which need root.
		Layout: os.Geteuid() == 0,
	}
}

// Probe checks that user namespaces can be created here.
func (b *Backend) Probe(ctx context.Context) error {
	if _, err := agentbin.Find(b.cfg.AgentPath); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if b.probe(); b.stateErr != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, b.stateErr)
	}
	attr, _ := b.sysProcAttr()
	var err error
	if !b.noClone && clonexec.Supported(attr) {
		err = clonexec.Check(attr)
	} else {
		cmd := exec.CommandContext(ctx, "/bin/true")
		cmd.SysProcAttr = attr
		err = cmd.Run()
	}
	if err != nil {
		return fmt.Errorf("%w: cannot create the sandbox namespaces (user namespaces disabled?): %v", sandbox.ErrUnavailable, err)
	}
	return nil
}

// idRange is the block of host ids the sandbox's ids 0-65535 map to. As
// root every sandbox gets its own block, from a range no ordinary account
// uses; without privilege only the caller's own id can be mapped, to the
// sandbox's root (which holds no capabilities once the sandbox is built).
func idRange() (hostBase, size int) { return IDRange() }

// IDRange picks the block of host ids a sandbox's ids 0-65535 map to (see
// idRange).
func IDRange() (hostBase, size int) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), 1
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return 1<<30 + int(binary.BigEndian.Uint32(b[:])%(1<<14))<<16, 1 << 16
}

// sysProcAttr creates the namespaces. The init starts as root of its user
// namespace so that it keeps the capabilities it needs to build the
// sandbox; it drops them all before the agent runs.
func (b *Backend) sysProcAttr() (*syscall.SysProcAttr, int) {
	attr, size := sysProcAttr()
	if b.cfg.Detached {
		attr.Pdeathsig = 0
	}
	return attr, size
}

func sysProcAttr() (*syscall.SysProcAttr, int) {
	base, size := idRange()
	gbase := base
	root := os.Geteuid() == 0
	if !root {
		gbase = os.Getegid()
	}
	// As root, setgroups stays allowed so the child drops this process's
	// supplementary groups before it runs: they are host groups, and would
	// otherwise grant the sandbox whatever they grant on the host (they
	// show as 65534 inside). Without root the kernel requires setgroups
	// denied, and the caller's groups stay, as under any unprivileged
	// user namespace.
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: size}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gbase, Size: size}},
		GidMappingsEnableSetgroups: root,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Pdeathsig:                  syscall.SIGKILL,
		Setsid:                     true,
	}, size
}

func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	b.probe()
	spec := l.Spec
	agent, err := agentbin.Find(b.cfg.AgentPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if b.stateErr != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, b.stateErr)
	}
	// As root, the sandbox's init runs as an unprivileged mapped user: it
	// must be able to reach its state directory and the agent binary.
	// (Without root it runs as this user.)
	if os.Geteuid() == 0 {
		for _, p := range []string{b.cfg.StateDir, filepath.Dir(agent)} {
			if err := traversable(p); err != nil {
				return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
			}
		}
	}
	if spec.RequireLandlock && b.landlock < 1 {
		return nil, &sandbox.UnsupportedError{Tier: Name, What: "Landlock (the kernel does not provide it)"}
	}
	uid, gid := DefaultUID, DefaultUID
	if spec.User != nil {
		uid, gid = *spec.User, *spec.User
	}
	if os.Geteuid() != 0 {
		// Unprivileged: only one id exists inside.
		if spec.User != nil && *spec.User != 0 {
			return nil, &sandbox.UnsupportedError{Tier: Name, What: fmt.Sprintf("user %d without root (only the caller's own id can be mapped)", *spec.User)}
		}
		uid, gid = 0, 0
	}
	layout, err := LayoutMounts(spec.Layout)
	if err != nil {
		return nil, err
	}
	// A started init waiting for its configuration is most of a sandbox's
	// start-up: take one from the pool if it has one. The layout trees
	// are mapped for the init's ids, and sent with its configuration (or,
	// to an init started here for this spec, given at its start).
	var trees []*os.File
	defer func() {
		for _, f := range trees {
			f.Close()
		}
	}()
	sl := b.takeSlot(agent)
	if sl == nil {
		attr, _ := b.sysProcAttr()
		if trees, err = IdmappedTrees(agent, layout, attr.UidMappings[0].HostID+uid, attr.GidMappings[0].HostID+gid); err != nil {
			return nil, err
		}
		if sl, err = b.newSlot(agent, attr, &forSpec{l: l, layout: layout, trees: trees, uid: uid, gid: gid}); err != nil {
			return nil, err
		}
	} else if trees, err = IdmappedTrees(agent, layout, sl.uidBase+uid, sl.gidBase+gid); err != nil {
		sl.discard()
		return nil, err
	}
	inst, err := b.configure(sl, l, layout, trees, uid, gid)
	if err != nil {
		sl.discard()
		return nil, err
	}
	return inst, nil
}

// slot is a started sandbox init waiting for its configuration: all of a
// sandbox that does not depend on its spec.
type slot struct {
	id, dir, stage, sock string
	scratch              string // where the init mounts the scratch tmpfs (sandboxinit.Config.ScratchMount)
	uidBase, gidBase     int    // host ids of the sandbox's ids 0
	egress               net.Listener
	proc                 *agentproc.Proc
	cfgW                 *os.File
	ready                *readiness
	// built, for an init started for a known spec, is its configuration,
	// already planned into root, the helper building its root beside the
	// init's start (sandboxinit.RootHelper). The helper shares this
	// process's memory: it is kept as long as the init may run.
	built  *sandboxinit.Config
	root   *clonexec.Helper
	placed int // layout trees given to the init at its start
}

// forSpec is what newSlot needs to start an init for one spec: the
// sandbox's root can then be built while the init starts.
type forSpec struct {
	l        sandbox.Launch
	layout   []LayoutMount
	trees    []*os.File
	uid, gid int
}

// readiness is the agent's readiness pipe as the host reads it.
type readiness struct {
	done   chan struct{} // closed at the end of file: the agent listens, or the init ended
	record []byte        // what the agent wrote first (wire.ReadyRecord), set before done closes
}

// newSlot makes a sandbox's host directory and egress socket and starts its
// init, which waits on its configuration socket. With spec (a create's
// own init, not a pool's), and where clonexec starts the init, the root is
// planned now and built by a helper while the init starts.
func (b *Backend) newSlot(agent string, attr *syscall.SysProcAttr, spec *forSpec) (*slot, error) {
	if err := os.MkdirAll(b.cfg.StateDir, 0o711); err != nil {
		return nil, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	id := "sb-" + hex.EncodeToString(rnd[:])
	sl := &slot{id: id, dir: filepath.Join(b.cfg.StateDir, id), uidBase: attr.UidMappings[0].HostID, gidBase: attr.GidMappings[0].HostID}
	sl.stage, sl.sock, sl.scratch = filepath.Join(sl.dir, "root"), filepath.Join(sl.dir, "sock"), filepath.Join(sl.dir, "scratch")
	if spec != nil && b.clones(attr) {
		// The root is planned from here on, while this makes the slot and
		// the clone makes the init, and built by the init's helper while
		// the init starts. A plan that fails (or that only the init can
		// make) leaves the root to the init, which then says why if it
		// cannot make it either.
		sl.root = clonexec.NewHelper()
		planned := make(chan *sandboxinit.Config, 1)
		go func() {
			cfg, err := b.initConfig(sl, spec.l, spec.layout, spec.uid, spec.gid)
			if err == nil {
				err = sandboxinit.RootHelper(sl.root, &cfg, func(i int) int { return sandboxinit.TreeFD + i - 1 })
			}
			if err != nil {
				planned <- nil
				return
			}
			planned <- &cfg
		}()
		sl.root.Fill = func() bool {
			sl.built = <-planned
			return sl.built != nil
		}
	}
	if err := os.Mkdir(sl.dir, 0o711); err != nil {
		return nil, err
	}
	for _, d := range []string{sl.stage, sl.sock, sl.scratch} {
		if err := os.Mkdir(d, 0o700); err != nil {
			sl.discard()
			return nil, err
		}
	}
	// The sandbox's only way out: the host's egress proxy listens here,
	// and the agent bridges 127.0.0.1:3128 to it.
	var err error
	if sl.egress, err = net.Listen("unix", filepath.Join(sl.sock, "egress.sock")); err != nil {
		sl.discard()
		return nil, err
	}
	cfgR, cfgW, err := socketPair()
	if err != nil {
		sl.discard()
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		sl.discard()
		return nil, err
	}
	cmd := exec.Command(agent, sandboxinit.Arg)
	cmd.Args[0] = "cordon-agent"
	// The init, and the agent it becomes, run on one P. Its start is
	// serial work on one locked thread, and every further P costs it
	// threads and page faults as it starts (0.8 ms of a create here,
	// docs/benchmarks.md, tenth session); serving is mostly waiting on
	// sockets and pipes, and did no worse on one (BenchmarkWarmSandbox).
	// Commands get their environment from the configuration, not this.
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{cfgR, readyW}
	cmd.SysProcAttr = attr
	if sl.root != nil {
		// The trees follow ReadyFD, from sandboxinit.TreeFD on.
		cmd.ExtraFiles = append(cmd.ExtraFiles, spec.trees...)
		sl.placed = len(spec.trees)
	}
	sl.proc, err = b.startInit(agent, cmd, client.Endpoint{Network: "unix", Address: filepath.Join(sl.sock, "agent.sock")}, sl.root)
	cfgR.Close()
	readyW.Close()
	if err != nil {
		cfgW.Close()
		readyR.Close()
		sl.discard()
		return nil, fmt.Errorf("%w: start the sandbox: %v", sandbox.ErrUnavailable, err)
	}
	sl.cfgW = cfgW
	sl.ready = &readiness{done: make(chan struct{})}
	go func() {
		// The end of file is the signal; a record longer than the bound is
		// no record, and the pipe is drained to its end regardless.
		rec, err := io.ReadAll(io.LimitReader(readyR, wire.MaxReadyRecordBytes+1))
		if err == nil && len(rec) <= wire.MaxReadyRecordBytes {
			sl.ready.record = rec
		}
		_, _ = io.Copy(io.Discard, readyR)
		readyR.Close()
		close(sl.ready.done)
	}()
	_ = writeInitRecord(sl.dir, sl.proc.Pid())
	return sl, nil
}

// startInit starts a sandbox's init. Where clonexec can start it, this
// process does, without copying its own memory, whatever its size. Else
// it goes through the spawner when that is to be used (useSpawner) and
// can be started, or is forked from this process. A backend
// not asked for the spawner forks its first init itself (a one-shot
// `cordon run` creates one sandbox, and the helper's start would cost it
// more than the fork); a second create starts the helper in the background
// and later ones use it once it runs. (A spawner that fails mid-request is
// an error: it may have started the init already.)
func (b *Backend) startInit(agent string, cmd *exec.Cmd, ep client.Endpoint, root *clonexec.Helper) (*agentproc.Proc, error) {
	if b.clones(cmd.SysProcAttr) {
		nofile, _ := originalNofile()
		return agentproc.StartCloned(cmd, &nofile, ep, root)
	}
	if root != nil {
		return nil, errors.New("a root builder without clonexec")
	}
	var sp *spawner.Spawner
	if b.useSpawner() {
		sp, _ = spawner.Shared(agent)
	} else if b.inits.Add(1) > 1 {
		sp = spawner.Running(agent)
	}
	if sp != nil {
		return agentproc.StartSpawned(sp, cmd, ep)
	}
	return agentproc.Start(cmd, ep)
}

// clones reports whether startInit starts an init with attr through
// clonexec.
func (b *Backend) clones(attr *syscall.SysProcAttr) bool {
	if b.noClone || !clonexec.Supported(attr) {
		return false
	}
	_, err := originalNofile()
	return err == nil
}

// socketPair is a connected unix stream pair: the init's end and the host's.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "config"), os.NewFile(uintptr(fds[1]), "config"), nil
}

// sendConfig writes the init's configuration on w, the layout trees going
// as SCM_RIGHTS with its first bytes.
func sendConfig(w *os.File, cfg []byte, trees []*os.File) error {
	if len(trees) > sandboxinit.MaxTrees {
		return fmt.Errorf("%d layout trees, at most %d", len(trees), sandboxinit.MaxTrees)
	}
	var oob []byte
	if len(trees) > 0 {
		fds := make([]int, len(trees))
		for i, f := range trees {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, err := unix.SendmsgN(int(w.Fd()), cfg, oob, nil, 0)
	if err != nil {
		return err
	}
	_, err = w.Write(cfg[n:])
	return err
}

// discard ends a slot that did not become a sandbox.
func (sl *slot) discard() {
	if sl.cfgW != nil {
		sl.cfgW.Close()
	}
	if sl.proc != nil {
		_ = sl.proc.Kill()
		<-sl.proc.Exited()
	}
	if sl.egress != nil {
		sl.egress.Close()
	}
	os.RemoveAll(sl.dir)
}

// configure turns a slot into the sandbox spec describes: ownership of its
// sockets, cgroups, identity files, then the configuration the init waits
// for.
func (b *Backend) configure(sl *slot, l sandbox.Launch, layout []LayoutMount, trees []*os.File, uid, gid int) (*instance, error) {
	spec := l.Spec
	inst := &instance{proc: sl.proc, egress: sl.egress, dir: sl.dir, ready: sl.ready}
	sl.proc.SetEndpoint(client.Endpoint{Network: "unix", Address: filepath.Join(sl.sock, "agent.sock"), Token: l.Token})
	// The agent (the mapped sandbox user) creates its socket here and
	// connects to the egress socket.
	hu, hg := sl.uidBase+uid, sl.gidBase+gid
	inst.state = instanceState{ID: sl.id, Dir: sl.dir, Pid: sl.proc.Pid(), Start: procid.StartTime(sl.proc.Pid()), SocketUID: hu, SocketGID: hg}
	egressPath := filepath.Join(sl.sock, "egress.sock")
	for _, p := range []string{sl.sock, egressPath} {
		if err := os.Chown(p, hu, hg); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(egressPath, 0o600); err != nil {
		return nil, err
	}
	cgLimits := spec.Limits
	if cgLimits.Pids > 0 {
		// The limit is the workload's: the agent's own threads (its reserve
		// and the runtime's) come on top, so a fork bomb cannot starve it.
		cgLimits.Pids += AgentPids
	}
	if !cgLimits.IsZero() || b.cgroups.writeable {
		// Even without limits a cgroup tracks every process for teardown.
		cg, err := b.cgroups.create(sl.id, cgLimits)
		if err != nil && !cgLimits.IsZero() {
			return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
		}
		if err == nil {
			inst.cg = cg
			// The init waits for its configuration, so it has started
			// nothing yet when it joins its cgroups.
			if err := cg.add(sl.proc.Pid()); err != nil {
				cg.remove()
				return nil, err
			}
		}
	}
	fail := func(err error) (*instance, error) {
		if inst.cg != nil {
			_ = sl.proc.Kill()
			<-sl.proc.Exited()
			inst.cg.killAll(time.Now().Add(5 * time.Second))
			inst.cg.remove()
		}
		return nil, err
	}
	var icfg sandboxinit.Config
	if sl.built != nil {
		// The root planned from this configuration is being built.
		icfg = *sl.built
		icfg.RootBuilder = sl.root.Pid()
		inst.root = sl.root
		b.helperRoots.Add(1)
	} else {
		var err error
		if icfg, err = b.initConfig(sl, l, layout, uid, gid); err != nil {
			return fail(err)
		}
	}
	if sl.placed > 0 {
		icfg.PlacedTrees, trees = sl.placed, nil
	}
	cfgJSON, err := json.Marshal(icfg)
	if err != nil {
		return fail(err)
	}
	err = sendConfig(sl.cfgW, cfgJSON, trees)
	sl.cfgW.Close()
	sl.cfgW = nil
	if err != nil {
		return fail(fmt.Errorf("%w: configure the sandbox: %v; it said: %s", sandbox.ErrAgent, err, inst.Diagnostics()))
	}
	return inst, nil
}

// initConfig is the configuration of slot sl's init for l.
func (b *Backend) initConfig(sl *slot, l sandbox.Launch, layout []LayoutMount, uid, gid int) (sandboxinit.Config, error) {
	spec := l.Spec
	rootfs, hostRoot := "/", true
	if spec.RootFS != "" {
		var err error
		if rootfs, err = filepath.Abs(spec.RootFS); err != nil {
			return sandboxinit.Config{}, err
		}
		hostRoot = false
	}
	landlock := "auto"
	if spec.RequireLandlock {
		landlock = "require"
	}
	icfg := sandboxinit.Config{
		Stage: sl.stage, RootFS: rootfs, HostRoot: hostRoot, ScratchMount: sl.scratch,
		Tmpfs: []sandboxinit.Tmpfs{
			{Path: "/tmp", Mode: 0o1777}, {Path: "/var/tmp", Mode: 0o1777},
			{Path: Workspace, Mode: 0o755, Owned: true}, {Path: Home, Mode: 0o700, Owned: true},
		},
		Binds:     []sandboxinit.Bind{{Source: sl.sock, Target: SocketDir}},
		SocketDir: SocketDir,
		UID:       uid, GID: gid,
		Hostname: "cordon",
		Landlock: landlock,
		Workdir:  Workspace,
		Env:      agentEnv(l, uid, layout),
		Detached: b.cfg.Detached,
	}
	if spec.Limits.Pids == 0 {
		icfg.Tasks = b.taskCeiling()
	}
	// Scratch space is memory charged to the sandbox: with a memory limit
	// it can hold no more anyway, and its size (what df shows) says so.
	icfg.ScratchBytes = spec.Limits.MemoryBytes
	// The identity files are the same for every sandbox of a kind: bound
	// from one shared copy, not written into each sandbox's root.
	identity, err := IdentityFiles(b.cfg.StateDir, uid, hostRoot)
	if err != nil {
		return sandboxinit.Config{}, err
	}
	icfg.Binds = append(icfg.Binds, identity...)
	for i, m := range layout {
		icfg.Binds = append(icfg.Binds, sandboxinit.Bind{Target: m.Target, ReadOnly: m.ReadOnly, Tree: i + 1})
	}
	return icfg, nil
}

// AgentEnv is the environment of an agent whose token arrives on
// descriptor tokenFD rather than in the environment (a tier whose
// configuration is written to disk), with the layout's directories among
// its read and write roots.
func AgentEnv(l sandbox.Launch, uid, tokenFD int, layout []LayoutMount) []string {
	l.Token = ""
	env := agentEnv(l, uid, layout)
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CORDON_AGENT_TOKEN=") {
			out = append(out, kv)
		}
	}
	return append(out, "CORDON_AGENT_TOKEN_FD="+strconv.Itoa(tokenFD))
}

// agentEnv is the agent's environment: its settings and what commands inherit.
func agentEnv(l sandbox.Launch, uid int, layout []LayoutMount) []string {
	user := "sandbox"
	if uid == 0 {
		user = "root"
	}
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": Home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", "TERM": "xterm-256color",
	}
	for k, v := range l.Spec.Env {
		env[k] = v
	}
	for k, v := range l.AgentEnv {
		env["CORDON_AGENT_"+k] = v
	}
	env["CORDON_AGENT_TOKEN"] = l.Token
	env["CORDON_AGENT_SOCKET"] = agentSock
	env["CORDON_AGENT_EGRESS_SOCKET"] = SocketDir + "/egress.sock"
	env["CORDON_AGENT_WORKSPACE"] = Workspace
	write, read := []string{"/tmp", "/var/tmp", Home}, []string{"/tmp", "/var/tmp", Home}
	for _, m := range layout {
		read = append(read, m.Target)
		if !m.ReadOnly {
			write = append(write, m.Target)
		}
	}
	env["CORDON_AGENT_WRITE_ROOTS"] = strings.Join(write, ":")
	env["CORDON_AGENT_READ_ROOTS"] = strings.Join(read, ":")
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// proc is the sandbox's init as the host sees it: started here
// (agentproc.Proc) or adopted from an earlier process (adoptedProc).
type proc interface {
	Pid() int
	Endpoint() client.Endpoint
	Exited() <-chan struct{}
	ExitCode() int
	Signal(os.Signal) error
	Kill() error
	Diagnostics() string
}

type instance struct {
	proc
	state  instanceState
	egress net.Listener
	dir    string
	cg     *cgroups
	ready  *readiness
	// root, when a helper built the root, is it: kept while the init may
	// run (it shares this process's memory), and asked which step failed.
	root *clonexec.Helper
	mu   sync.Mutex
	gone bool
}

// Diagnostics is what the init and agent said, after the step of the
// root's builder that failed, if one did.
func (i *instance) Diagnostics() string {
	d := i.proc.Diagnostics()
	if i.root == nil {
		return d
	}
	select {
	case <-i.proc.Exited(): // and with it the builder: its steps are final
		if err := i.root.Err(); err != nil {
			return fmt.Sprintf("building the root: %v; %s", err, d)
		}
	default:
	}
	return d
}

// Ready is closed once the agent listens (sandbox.Readier).
func (i *instance) Ready() <-chan struct{} { return i.ready.done }

// ReadyRecord is what the agent handed over as it became ready
// (sandbox.ReadyReporter); nil before Ready closes, or if it wrote none.
func (i *instance) ReadyRecord() []byte {
	select {
	case <-i.ready.done:
		return i.ready.record
	default:
		return nil
	}
}

// EgressListener is where the sandbox's egress arrives on the host.
func (i *instance) EgressListener() net.Listener { return i.egress }

// OOMKills counts OOM kills inside the sandbox so far.
func (i *instance) OOMKills() uint64 {
	if i.cg == nil {
		return 0
	}
	return i.cg.oomKills()
}

// CanPause reports whether the sandbox's cgroups can be frozen.
func (i *instance) CanPause() bool { return i.cg != nil && i.cg.canFreeze() }

// Pause freezes every process of the sandbox, the agent included.
func (i *instance) Pause(ctx context.Context) error {
	if !i.CanPause() {
		return &sandbox.UnsupportedError{Tier: Name, What: "pause (no cgroup freezer on this host)"}
	}
	return i.cg.freeze(ctx, true)
}

// Resume thaws a paused sandbox.
func (i *instance) Resume(ctx context.Context) error {
	if !i.CanPause() {
		return &sandbox.UnsupportedError{Tier: Name, What: "resume (no cgroup freezer on this host)"}
	}
	return i.cg.freeze(ctx, false)
}

// Destroy stops the agent (it stops its commands first), kills the PID
// namespace if it does not exit in time, confirms that no process of the
// sandbox remains, and removes its cgroups and host directory.
func (i *instance) Destroy(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone {
		return nil
	}
	i.egress.Close()
	if i.CanPause() {
		// A frozen process cannot act on a signal, not even SIGKILL.
		thaw, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := i.cg.freeze(thaw, false)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
	}
	_ = i.Signal(syscall.SIGTERM)
	select {
	case <-i.Exited():
	case <-time.After(7 * time.Second):
		// SIGKILL to PID 1 of the namespace ends every process in it.
		_ = i.Kill()
		select {
		case <-i.Exited():
		case <-time.After(5 * time.Second):
			return fmt.Errorf("%w: sandbox init (pid %d) did not exit after SIGKILL", sandbox.ErrTeardown, i.Pid())
		}
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", sandbox.ErrTeardown, ctx.Err())
	}
	if i.cg != nil {
		if err := i.cg.killAll(time.Now().Add(5 * time.Second)); err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
		if err := i.cg.remove(); err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
	}
	if err := os.RemoveAll(i.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", sandbox.ErrTeardown, i.dir, err)
	}
	i.gone = true
	return nil
}

// taskCeiling is the RLIMIT_NPROC a sandbox without a pids limit gets; 0
// for none.
func (b *Backend) taskCeiling() uint64 {
	switch {
	case b.cfg.Tasks < 0:
		return 0
	case b.cfg.Tasks == 0:
		return DefaultTasks
	}
	return uint64(b.cfg.Tasks)
}

// traversable checks that every directory from p up to / lets anyone pass.
func traversable(p string) error {
	for dir := p; ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err == nil && st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v); sandboxes run as unprivileged mapped users and must pass through it", dir, st.Mode().Perm())
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}
