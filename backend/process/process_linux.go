// Package process is the process tier: native Linux sandboxes built from
// user, mount, PID, network, IPC, UTS and cgroup namespaces, pivot_root,
// seccomp, Landlock and cgroup limits, with no external binary. cordon-agent
// starts as the sandbox's init (agent/sandboxinit), builds the sandbox
// around itself, and becomes its PID 1.
package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/agentbin"
	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

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
// started as before. Read at this process's start where clonexec runs
// (clonexec.OriginalNofile); elsewhere learnt once, in the background from
// the first New on.
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

// The abilities the process tier has (sandbox's optional interfaces).
var (
	_ sandbox.Closer        = (*Backend)(nil)
	_ sandbox.Instance      = (*instance)(nil)
	_ sandbox.Pauser        = (*instance)(nil)
	_ sandbox.Persistent    = (*instance)(nil)
	_ sandbox.EgressPort    = (*instance)(nil)
	_ sandbox.OOMCounter    = (*instance)(nil)
	_ sandbox.MemoryGauge   = (*instance)(nil)
	_ sandbox.ReadyReporter = (*instance)(nil)
	_ sandbox.Signaller     = (*instance)(nil)
	_ sandbox.ExitCoder     = (*instance)(nil)
)

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
		Isolated: true, MemoryLimit: lim, PidsLimit: lim, CPULimit: lim, DiskLimit: true,
		Landlock: b.landlock >= 1, RootFS: true, User: true, Egress: true,
		// Layout directories are id-mapped mounts, and a disk a loop
		// mount: both need root.
		Layout: os.Geteuid() == 0, Disk: os.Geteuid() == 0,
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
	base, size := host.IDRange()
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
			if err := host.Traversable(p); err != nil {
				return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
			}
		}
	}
	if spec.RequireLandlock && b.landlock < 1 {
		return nil, &sandbox.UnsupportedError{Tier: Name, What: "Landlock (the kernel does not provide it)"}
	}
	uid, gid := baseline.DefaultUID, baseline.DefaultUID
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
	layout, err := host.LayoutMounts(spec.Layout)
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
	var sl *slot
	if l.Disk == "" {
		// (A pool's inits started before their disks were mounted.)
		sl = b.takeSlot(agent)
	}
	if sl == nil {
		attr, _ := b.sysProcAttr()
		if trees, err = host.IdmappedTrees(agent, layout, attr.UidMappings[0].HostID+uid, attr.GidMappings[0].HostID+gid); err != nil {
			return nil, err
		}
		if sl, err = b.newSlot(agent, attr, &forSpec{l: l, layout: layout, trees: trees, uid: uid, gid: gid}); err != nil {
			return nil, err
		}
	} else if trees, err = host.IdmappedTrees(agent, layout, sl.uidBase+uid, sl.gidBase+gid); err != nil {
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

// configure turns a slot into the sandbox spec describes: ownership of its
// sockets, cgroups, identity files, then the configuration the init waits
// for.
func (b *Backend) configure(sl *slot, l sandbox.Launch, layout []host.LayoutMount, trees []*os.File, uid, gid int) (*instance, error) {
	spec := l.Spec
	inst := &instance{proc: sl.proc, egress: sl.egress, dir: sl.dir, ready: sl.ready}
	sl.proc.SetEndpoint(client.Endpoint{Network: "unix", Address: filepath.Join(sl.sock, "agent.sock"), Token: l.Token})
	// The agent (the mapped sandbox user) connects to the egress socket
	// here.
	hu, hg := sl.uidBase+uid, sl.gidBase+gid
	inst.state = instanceState{ID: sl.id, Dir: sl.dir, Pid: sl.proc.Pid(), Start: procid.StartTime(sl.proc.Pid()), SocketUID: hu, SocketGID: hg, Disk: sl.onDisk}
	egressPath := filepath.Join(sl.sock, "egress.sock")
	for _, p := range []string{sl.sock, egressPath} {
		if err := os.Chown(p, hu, hg); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(egressPath, 0o600); err != nil {
		return nil, err
	}
	// A pids limit is the workload's: the agent's own threads come on top
	// (create), so a fork bomb cannot starve it.
	cgLimits := spec.Limits
	if b.wantsCgroups(cgLimits) {
		cg, err, joinErr := sl.takeCgroups(b, cgLimits, sl.proc.Pid())
		if err != nil && !cgLimits.IsZero() {
			return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
		}
		if err == nil {
			inst.cg = cg
			// The init waits for its configuration, so it has started
			// nothing yet when it joins its cgroups (or joined, as it
			// started: see earlyCgroups).
			if joinErr != nil {
				cg.remove()
				return nil, joinErr
			}
			if cg.commands != "" {
				inst.ready = inst.holdCommands(sl.ready)
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
func (b *Backend) initConfig(sl *slot, l sandbox.Launch, layout []host.LayoutMount, uid, gid int) (sandboxinit.Config, error) {
	spec := l.Spec
	rootfs, hostRoot := "/", true
	if spec.RootFS != "" {
		var err error
		if rootfs, err = host.RootFS(spec.RootFS); err != nil {
			return sandboxinit.Config{}, err
		}
		hostRoot = false
	}
	landlock := "auto"
	if spec.RequireLandlock {
		landlock = "require"
	}
	icfg := sandboxinit.Config{
		Stage: sl.stage, RootFS: rootfs, HostRoot: hostRoot, ScratchMount: sl.scratch, ScratchOnDisk: sl.onDisk,
		Tmpfs: scratchDirs(),
		// The host's sockets (the agent's, egress): nothing the sandbox
		// makes there lands on the host's disk.
		Binds: []sandboxinit.Bind{{Source: sl.sock, Target: baseline.SocketDir, ReadOnly: true}},
		UID:   uid, GID: gid,
		Hostname: baseline.Hostname,
		Landlock: landlock,
		Workdir:  baseline.Workspace,
		Env:      host.AgentEnv(l, uid, layout, host.AgentEnvOptions{}),
		Detached: b.cfg.Detached,
		// On v1 under a pids limit the commands get a pids cgroup of
		// their own (cgroups.commands).
		CommandsApart: b.cgroups.commandsApart(spec.Limits),
	}
	if spec.Limits.Pids == 0 {
		icfg.Tasks = b.taskCeiling()
	}
	if os.Geteuid() == 0 {
		// The sandbox maps 65536 ids: the agent has its own.
		icfg.AgentUID = baseline.AgentID
	}
	// Scratch space is memory charged to the sandbox, bounded apart
	// (Limits.Disk): full, it is ENOSPC for the workload, below its memory
	// limit, and the agent serves on.
	// On a disk, the disk's size is the bound.
	if !sl.onDisk {
		icfg.ScratchBytes = spec.Limits.Disk()
	}
	// The identity files are the same for every sandbox of a kind: bound
	// from one shared copy, not written into each sandbox's root.
	identity, err := host.IdentityFiles(b.cfg.StateDir, uid, hostRoot)
	if err != nil {
		return sandboxinit.Config{}, err
	}
	icfg.Binds = append(icfg.Binds, identity...)
	for i, m := range layout {
		icfg.Binds = append(icfg.Binds, sandboxinit.Bind{Target: m.Target, ReadOnly: m.ReadOnly, Tree: i + 1})
	}
	return icfg, nil
}

// scratchDirs renders the baseline's scratch directories for the init,
// which mounts them all on one filesystem.
func scratchDirs() []sandboxinit.Tmpfs {
	var out []sandboxinit.Tmpfs
	for _, s := range baseline.ScratchDirs {
		out = append(out, sandboxinit.Tmpfs{Path: s.Path, Mode: s.Mode, Owned: s.Owned})
	}
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
	// holdErr is why the command thread could not be held apart.
	holdErr error
	// mayBeFrozen: Pause was called, or the sandbox was adopted and may
	// have been paused by an earlier host. Only then does a teardown thaw
	// it first (nothing else freezes its cgroup: the sandbox cannot).
	mayBeFrozen atomic.Bool
	mu          sync.Mutex
	gone        bool
}

// Diagnostics is what the init and agent said, after the step of the
// root's builder that failed, if one did.
func (i *instance) Diagnostics() string {
	d := i.proc.Diagnostics()
	if i.ready != nil { // nil for an adopted sandbox
		select {
		case <-i.ready.done:
			if i.holdErr != nil {
				return fmt.Sprintf("holding the commands' pids apart: %v; %s", i.holdErr, d)
			}
		default:
		}
	}
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

// holdCommands is r, once the thread the agent forks commands from is in
// the commands' pids cgroup (cgroups.commands): the ready record names it,
// and it is moved before the host is told the agent is ready, before any
// command. It is moved after the agent's start, not at the init's: a
// thread the init's first thread made before (the runtime's template
// thread, which makes its later ones) would be in that cgroup too. An
// agent that became the init in place (and made no spare threads,
// sandboxinit.Config.CommandsApart) names the init's first thread; one the
// init executed (a cgo build) names the thread its command goroutine
// landed on, the first or, on a loaded machine, another (which, left out,
// gave a 16-pid sandbox the agent's headroom: 40 forks). A move that fails
// ends the sandbox: the commands would otherwise not be held to the limit.
func (i *instance) holdCommands(r *readiness) *readiness {
	held := &readiness{done: make(chan struct{})}
	go func() {
		defer close(held.done)
		<-r.done
		var rec wire.ReadyRecord
		if json.Unmarshal(r.record, &rec) != nil || rec.CommandThread == 0 {
			held.record = r.record
			return
		}
		tid := i.Pid()
		var err error
		if rec.CommandThread != 1 {
			tid, err = host.ThreadOf(i.Pid(), rec.CommandThread)
		}
		if err == nil {
			err = i.cg.holdCommands(tid)
		}
		if err != nil {
			i.holdErr = err
			_ = i.Kill()
			return
		}
		held.record = r.record
	}()
	return held
}

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

// MemoryInUse is the sandbox's memory, where it has a memory cgroup (a
// memory limit, or v2).
func (i *instance) MemoryInUse() (int64, bool) {
	if i.cg == nil {
		return 0, false
	}
	return i.cg.memoryInUse()
}

// CanPause reports whether the sandbox's cgroups can be frozen.
func (i *instance) CanPause() bool { return i.cg != nil && i.cg.canFreeze() }

// Pause freezes every process of the sandbox, the agent included.
func (i *instance) Pause(ctx context.Context) error {
	if !i.CanPause() {
		return &sandbox.UnsupportedError{Tier: Name, What: "pause (no cgroup freezer on this host)"}
	}
	i.mayBeFrozen.Store(true)
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
func (i *instance) Destroy(ctx context.Context) error { return i.destroy(ctx, false) }

// Discard is Destroy that kills the PID namespace at once.
func (i *instance) Discard(ctx context.Context) error { return i.destroy(ctx, true) }

func (i *instance) destroy(ctx context.Context, now bool) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone {
		return nil
	}
	i.egress.Close()
	if i.mayBeFrozen.Load() && i.CanPause() {
		// A frozen process cannot act on a signal, not even SIGKILL.
		thaw, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := i.cg.freeze(thaw, false)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
	}
	// How long the agent has to stop its commands and exit on SIGTERM.
	stopWait := 7 * time.Second
	if now {
		stopWait = 0
	} else {
		_ = i.Signal(syscall.SIGTERM)
	}
	select {
	case <-i.Exited():
	case <-time.After(stopWait):
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
	if i.state.Disk {
		if err := host.UnmountDisk(host.DiskMountPoint(filepath.Dir(i.dir), filepath.Base(i.dir))); err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
	}
	i.gone = true
	return nil
}

// wantsCgroups: a sandbox with limits l gets cgroups. Even without limits
// a cgroup tracks every process for teardown, where this host lets one be
// made.
func (b *Backend) wantsCgroups(l sandbox.Limits) bool {
	return !l.IsZero() || b.cgroups.writeable
}

// taskCeiling is the RLIMIT_NPROC a sandbox without a pids limit gets; 0
// for none.
func (b *Backend) taskCeiling() uint64 {
	switch {
	case b.cfg.Tasks < 0:
		return 0
	case b.cfg.Tasks == 0:
		return baseline.DefaultTasks
	}
	return uint64(b.cfg.Tasks)
}
