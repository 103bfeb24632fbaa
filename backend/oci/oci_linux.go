// Package oci is the container tier: each sandbox is an OCI runtime bundle
// run by crun or runc, with cordon-agent bound in read-only as the
// container's init. The bundle carries the same baseline as the process
// tier (user namespace, no capabilities, no_new_privs, a read-only root of
// the host's system directories with secrets masked, or of a given root
// filesystem, masked and read-only /proc paths, seccomp, cgroup limits);
// the agent is reached on a unix socket in a host directory bound in, and
// its token arrives on a descriptor, so it is never in the bundle on disk.
package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/agentbin"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// CurrentRunsc is where scripts/setup.sh puts a current gVisor build.
const CurrentRunsc = "/usr/local/lib/cordon/runsc"

// Backend is the container tier.
type Backend struct {
	cfg      Config
	once     sync.Once
	runtime  string // resolved path
	platform string // gVisor's platform
	// ownCgroups: this gVisor has cgroups of its own to mount in the
	// sandbox (current builds; Debian's 2022 build does not), where the
	// workload's pids limit is held.
	ownCgroups bool
	err        error

	probeMu sync.Mutex
	probed  bool

	sweepOnce sync.Once

	sibMu sync.Mutex
	sibs  map[string]*Backend // siblings by state directory
}

var _ sandbox.Backend = (*Backend)(nil)

// The abilities the OCI tiers have (sandbox's optional interfaces). Their
// agent is the container's init, which the runtime detached: the host can
// neither signal it directly nor read its exit status.
var (
	_ sandbox.Instance    = (*instance)(nil)
	_ sandbox.Pauser      = (*instance)(nil)
	_ sandbox.Persistent  = (*instance)(nil)
	_ sandbox.EgressPort  = (*instance)(nil)
	_ sandbox.OOMCounter  = (*instance)(nil)
	_ sandbox.MemoryGauge = (*instance)(nil)
)

// New returns the backend.
func New(cfg Config) *Backend {
	if cfg.Tier == "" {
		cfg.Tier = Name
	}
	if cfg.StateDir == "" {
		cfg.StateDir = "/run/cordon/" + StateName(cfg.Tier, cfg.Runtime)
	}
	return &Backend{cfg: cfg}
}

func (b *Backend) Name() string { return b.cfg.Tier }

// gvisor reports whether the runtime is runsc.
func (b *Backend) gvisor() bool { return b.cfg.Tier == GVisor }

// StateDir is where the backend keeps its bundles and its runtime's state
// (under "runtime").
func (b *Backend) StateDir() string { return b.cfg.StateDir }

// Runtime is the resolved runtime binary ("" if none was found).
func (b *Backend) Runtime() string {
	b.resolve()
	return b.runtime
}

// Detail names the runtime the tier runs (and gVisor's platform), for a
// listing of tiers.
func (b *Backend) Detail() string {
	if b.resolve(); b.err != nil {
		return ""
	}
	if b.gvisor() {
		return b.runtime + ", " + b.platform + " platform"
	}
	return b.runtime
}

func (b *Backend) resolve() {
	b.once.Do(func() {
		names := []string{"crun", "runc"}
		if b.gvisor() {
			// The current runsc scripts/setup.sh builds, else the system's.
			names = []string{CurrentRunsc, "runsc"}
		}
		if b.cfg.Runtime != "" {
			names = []string{b.cfg.Runtime}
			if !b.gvisor() && strings.HasPrefix(filepath.Base(b.cfg.Runtime), "runsc") {
				b.err = fmt.Errorf("%w: %s is gVisor, which the gvisor tier runs (--tier gvisor); the container tier takes crun or runc", sandbox.ErrUnavailable, b.cfg.Runtime)
				return
			}
		}
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				b.runtime = p
				if b.gvisor() {
					b.platform, b.ownCgroups = b.probePlatform()
				}
				return
			}
		}
		b.err = fmt.Errorf("%w: no OCI runtime (%s) found", sandbox.ErrUnavailable, strings.Join(names, ", "))
	})
}

func (b *Backend) Capabilities() sandbox.Capabilities {
	// Under gVisor the host cgroup holds the sentry, not the workload: a
	// memory limit there kills the whole sandbox (agent included) instead
	// of the hog, and the sentry's memory cgroup only counts, so the gvisor
	// tier refuses memory limits; its pids limit is the sentry's own task
	// limit (taskLimit). Layout directories are id-mapped mounts for the
	// sandbox user; gVisor's gofer creates files with its own ids, which
	// such a mount does not map (EOVERFLOW), so gvisor refuses them too.
	// The sentry has no Landlock; under runc and crun the agent applies it
	// to its commands where the host kernel has it.
	userKernel := b.gvisor()
	return sandbox.Capabilities{
		Isolated: true, MemoryLimit: !userKernel, PidsLimit: true, CPULimit: true, DiskLimit: true,
		RootFS: true, User: true, Egress: true, Layout: !userKernel,
		Landlock: !userKernel && landlockABI() >= 1,
		// A disk is a loop mount (id-mapped but under gVisor, whose
		// gofer's own ids such a mount does not map).
		Disk: os.Geteuid() == 0,
	}
}

// landlockABI is the host kernel's Landlock ABI, asked once.
var landlockABI = sync.OnceValue(sandboxinit.LandlockABI)

// landlock is how the agent is to confine its commands: always where the
// tier can (runc and crun on a kernel with Landlock), "require" when the
// spec insists (Capabilities has refused it where the tier cannot).
func (b *Backend) landlock(spec sandbox.Spec) string {
	switch {
	case spec.RequireLandlock:
		return "require"
	case b.Capabilities().Landlock:
		return "auto"
	}
	return ""
}

// Probe checks for root, a runtime and the agent.
func (b *Backend) Probe(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the container tier runs bundles as root", sandbox.ErrUnavailable)
	}
	b.resolve()
	if b.err != nil {
		return b.err
	}
	if _, err := agentbin.Find(b.cfg.AgentPath); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if out, err := exec.CommandContext(ctx, b.runtime, "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s --version: %v: %s", sandbox.ErrUnavailable, b.runtime, err, out)
	}
	return nil
}

// probeOnce is Probe, remembered once it succeeded (it runs the runtime,
// which costs a create a dozen milliseconds).
func (b *Backend) probeOnce(ctx context.Context) error {
	b.probeMu.Lock()
	defer b.probeMu.Unlock()
	if b.probed {
		return nil
	}
	if err := b.Probe(ctx); err != nil {
		return err
	}
	b.probed = true
	if b.stateDir() == nil {
		b.recordRuntime()
		host.SweepCgroups(b.cfg.StateDir, ociCgroupParents(), "cordon-", time.Minute)
	}
	host.BoundContainers()
	return nil
}

// ociCgroupParent is the cgroup, at the root of each hierarchy, that every
// OCI sandbox's cgroupsPath is below.
const ociCgroupParent = host.ContainersCgroup

// ociCgroupParents are the OCI tiers' cgroup parent ("/cordon-oci", what
// every sandbox's cgroupsPath names) in each mounted hierarchy.
func ociCgroupParents() []string {
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/" + ociCgroupParent)
	return append(parents, "/sys/fs/cgroup/"+ociCgroupParent)
}

// runtimeCmd runs the runtime with its state under the backend's own
// directory, so cordon's containers never mix with others'.
func (b *Backend) runtimeCmd(ctx context.Context, args ...string) *exec.Cmd {
	global := []string{"--root", filepath.Join(b.cfg.StateDir, "runtime")}
	if b.gvisor() {
		// No network stack at all (the egress boundary is the agent's
		// bridge), host sockets only in the bound socket directory (the
		// agent's listener and the egress socket; both generations of runsc
		// know --host-uds), the bundle's seccomp filter applied inside the
		// sandbox (off by default in runsc), and the platform that works
		// here.
		global = append(global, "--network=none", "--host-uds=all", "--oci-seccomp", "--platform="+b.platform)
	}
	return exec.CommandContext(ctx, b.runtime, append(global, args...)...)
}

// probePlatform picks gVisor's platform: the configured one, else systrap
// where this runsc has it (current builds), else ptrace (2022 builds). A
// build with systrap also has cgroups of its own (current).
func (b *Backend) probePlatform() (platform string, current bool) {
	// The -platform flag's help names the platforms this build has.
	out, _ := exec.Command(b.runtime, "flags").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "specifies which platform to use") && strings.Contains(line, "systrap") {
			current = true
		}
	}
	switch {
	case b.cfg.Platform != "":
		return b.cfg.Platform, current
	case current:
		return "systrap", true
	}
	return "ptrace", false
}

// tokenFD is where the agent reads its token: the first descriptor
// --preserve-fds passes, or standard input under runsc, which has no such
// option.
func (b *Backend) tokenFD() int {
	if b.gvisor() {
		return 0
	}
	return 3
}

func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	if err := b.probeOnce(ctx); err != nil {
		return nil, err
	}
	agentPath, _ := agentbin.Find(b.cfg.AgentPath)

	spec := l.Spec
	uid := baseline.DefaultUID
	if spec.User != nil {
		uid = *spec.User
	}
	base, size := host.IDRange()
	if l.Disk != "" && b.gvisor() {
		// gVisor's gofer writes the disk with the sandbox's host ids:
		// they must be the same at every start.
		base = host.DiskIDBase(l.Disk)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	id := "cordon-" + hex.EncodeToString(rnd[:])
	if err := b.stateDir(); err != nil {
		return nil, err
	}
	// The sandbox's mount table names a bind's source path: the agent is
	// bound from a copy of cordon's own, not from wherever it is installed
	// (a home directory, say).
	agentPath, err := host.AgentCopy(b.cfg.StateDir, agentPath)
	if err != nil {
		return nil, err
	}
	if !b.cfg.Detached {
		b.sweepOnce.Do(func() {
			b.sweepOrphans(ctx)
			b.sweepSiblingOrphans(ctx)
		})
	}
	// The sandbox's user namespace is its own root's, not root's, as on
	// the process tier (host.OwnedUserns); its holder starts beside the
	// bundle's making. gVisor's users are its sentry's own.
	type holder struct {
		path    string
		release func()
		err     error
	}
	held := make(chan holder, 1)
	if b.gvisor() {
		held <- holder{}
	} else {
		go func() {
			path, release, err := host.OwnedUserns(agentPath, base, size)
			held <- holder{path, release, err}
		}()
	}
	userns := sync.OnceValue(func() holder { return <-held })
	defer func() {
		if h := userns(); h.release != nil {
			h.release()
		}
	}()
	inst := &instance{b: b, id: id, dir: filepath.Join(b.cfg.StateDir, id), logs: logbuf.New(64 << 10), cgroup: "/" + ociCgroupParent + "/" + id}
	fail := func(err error) (sandbox.Instance, error) {
		return nil, errors.Join(err, inst.Destroy(context.WithoutCancel(ctx)))
	}
	if err := os.Mkdir(inst.dir, 0o711); err != nil {
		return nil, err
	}
	if !b.cfg.Detached {
		// Who made it, for the sweep of a later process (sweepOrphans).
		if err := host.MarkOwner(inst.dir); err != nil {
			return fail(err)
		}
	}
	sock := filepath.Join(inst.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return fail(err)
	}
	hu := base + uid
	inst.socketUID = hu
	// The agent makes its socket here as root of the sandbox (which has no
	// capability to write where it does not own), then gives it to its own
	// id; the directory goes back to the host's root once it listens.
	if err := os.Chown(sock, base, base); err != nil {
		return fail(err)
	}
	ln, err := host.ListenEgress(sock, hu, hu)
	if err != nil {
		return fail(err)
	}
	inst.egress = ln
	rootSrc, hostRoot := "/", true
	if spec.RootFS != "" {
		if rootSrc, err = host.RootFS(spec.RootFS); err != nil {
			return fail(err)
		}
		hostRoot = false
	}
	idFiles, err := host.IdentityFiles(b.cfg.StateDir, uid, hostRoot)
	if err != nil {
		return fail(err)
	}
	layout, err := host.LayoutMounts(spec.Layout)
	if err != nil {
		return fail(err)
	}
	binds, err := attachLayout(inst.dir, agentPath, layout, hu)
	if err != nil {
		return fail(err)
	}
	var diskMount string
	if l.Disk != "" {
		// Apart from the sandbox's directory, which a sweep removes whole.
		diskMount = host.DiskMountPoint(b.cfg.StateDir, id)
		var dirs []host.DiskDir
		for _, d := range baseline.ScratchDirs {
			dd := host.DiskDir{Name: baseline.ScratchName(d.Path), Mode: d.Mode}
			if d.Owned {
				dd.UID, dd.GID = uid, uid
			}
			dirs = append(dirs, dd)
		}
		mapper := agentPath
		if b.gvisor() {
			mapper = "" // mounted as it is (host.DiskIDBase)
		}
		if err := host.MountDisk(mapper, l.Disk, diskMount, base, base, size, dirs); err != nil {
			return fail(err)
		}
	}
	if err := userns().err; err != nil {
		return fail(err)
	}
	bundle := filepath.Join(inst.dir, "bundle")
	bs, err := buildSpec(bundleInput{
		Disk:   diskMount,
		Bundle: bundle, Skeletons: b.cfg.StateDir, RootSrc: rootSrc, HostRoot: hostRoot, SocketDir: sock, AgentPath: agentPath,
		Identity: idFiles, Layout: binds, Env: host.AgentEnv(l, uid, layout, host.AgentEnvOptions{TokenOnFD: true, TokenFD: b.tokenFD(), OwnKernel: b.gvisor()}), UID: uid, IDBase: base, IDSize: size, UserNS: userns().path,
		Limits: spec.Limits, ScratchBudget: ScratchBudget(), CgroupsPath: inst.cgroup, UserSpaceKernel: b.gvisor(), OwnCgroups: b.ownCgroups, Landlock: b.landlock(spec),
		Lifeline: !b.cfg.Detached, CommandsApart: b.commandsApart(spec.Limits),
	})
	if err != nil {
		return fail(err)
	}
	cfg, err := json.MarshalIndent(bs, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600); err != nil {
		return fail(err)
	}
	// The token goes down a pipe the runtime passes to the agent as
	// descriptor 3: it is in no file, environment block or argv. Unless
	// the sandbox is detached, the pipe stays open after it, as the
	// agent's lifeline: this process's end closes with it.
	tr, tw, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	token := l.Token
	if !b.cfg.Detached {
		token += "\n"
	}
	_, werr := io.WriteString(tw, token)
	if b.cfg.Detached || werr != nil {
		tw.Close()
	} else {
		inst.lifeline = tw
	}
	if werr != nil {
		tr.Close()
		return fail(werr)
	}
	// The container keeps the runtime's standard output and error: a pipe
	// whose reader copies into the bounded log.
	lr, lw, err := os.Pipe()
	if err != nil {
		tr.Close()
		return fail(err)
	}
	go func() { _, _ = io.Copy(inst.logs, lr); lr.Close() }()
	pidFile := filepath.Join(inst.dir, "pid")
	var cmd *exec.Cmd
	if b.gvisor() {
		// runsc passes no extra descriptor: the token comes on stdin.
		cmd = b.runtimeCmd(ctx, "run", "--detach", "--pid-file", pidFile, "--bundle", bundle, id)
		cmd.Stdin = tr
	} else {
		cmd = b.runtimeCmd(ctx, "run", "--detach", "--preserve-fds", "1", "--pid-file", pidFile, "--bundle", bundle, id)
		cmd.ExtraFiles = []*os.File{tr}
	}
	cmd.Stdout, cmd.Stderr = lw, lw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Run()
	tr.Close()
	lw.Close()
	if err != nil {
		return fail(fmt.Errorf("%w: %s run: %v: %s", sandbox.ErrAgent, filepath.Base(b.runtime), err, strings.TrimSpace(inst.logs.String())))
	}
	inst.created = true
	pidText, err := os.ReadFile(pidFile)
	if err != nil {
		return fail(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil || pid <= 0 {
		return fail(fmt.Errorf("%w: the runtime wrote pid %q", sandbox.ErrAgent, pidText))
	}
	if inst.proc, err = pidfd.Open(pid, ""); err != nil {
		return fail(fmt.Errorf("%w: the container's init exited at once: %s", sandbox.ErrAgent, strings.TrimSpace(inst.logs.String())))
	}
	inst.ep = client.Endpoint{Network: "unix", Address: filepath.Join(sock, "agent.sock"), Token: l.Token}
	// Once the agent has made its socket, the directory goes back to the
	// host's root: commands run as the agent's user, and must not be able
	// to leave files beside the sockets.
	if err := sealSocketDir(ctx, sock, inst.proc); err != nil {
		return fail(fmt.Errorf("%w: %v: %s", sandbox.ErrAgent, err, strings.TrimSpace(inst.logs.String())))
	}
	if b.commandsApart(spec.Limits) {
		if err := host.HoldCommands(inst.cgroup, pid, spec.Limits.Pids); err != nil {
			return fail(fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err))
		}
	}
	if !b.gvisor() {
		// Before the sandbox's first command, whichever runtime: runc
		// does not take the bundle's kernelTCP. (gVisor's TCP is its
		// sentry's own, in the sandbox's memory.)
		if err := host.BoundTCP(inst.cgroup); err != nil {
			return fail(fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err))
		}
	}
	return inst, nil
}

// attachLayout makes the layout directories id-mapped mounts (their owner
// on the host is the sandbox user, hostUID, inside) attached under dir, and
// returns them as the bundle's bind sources: an OCI runtime binds host
// paths, it takes no mount descriptors.
func attachLayout(dir, agentPath string, layout []host.LayoutMount, hostUID int) ([]host.LayoutMount, error) {
	if len(layout) == 0 {
		return nil, nil
	}
	trees, err := host.IdmappedTrees(agentPath, layout, hostUID, hostUID)
	if err != nil {
		return nil, err
	}
	paths, err := host.AttachLayout(dir, layout, trees)
	for _, f := range trees {
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	binds := slices.Clone(layout)
	for i := range binds {
		binds[i].Host = paths[i]
	}
	return binds, nil
}

// sealSocketDir waits until the agent accepts connections on its socket
// (not merely until the file exists: a user-space kernel may still be
// setting the listener up) and makes the directory root's and read-only to
// everyone else.
func sealSocketDir(ctx context.Context, dir string, p *pidfd.Proc) error {
	sock := filepath.Join(dir, "agent.sock")
	deadline := time.Now().Add(30 * time.Second)
	for wait := 200 * time.Microsecond; ; wait = min(wait*2, time.Millisecond) {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			break
		}
		select {
		case <-p.Exited():
			return errors.New("the agent exited before it listened")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			return errors.New("the agent did not listen within 30s")
		}
	}
	if err := os.Chown(dir, 0, 0); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// state is the part of `runtime state` cordon reads.
type state struct {
	Pid    int    `json:"pid"`
	Status string `json:"status"`
}

func (b *Backend) state(ctx context.Context, id string) (*state, bool, error) {
	out, err := b.runtimeCmd(ctx, "state", id).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && isNotExist(string(ee.Stderr)) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("%s state %s: %v", filepath.Base(b.runtime), id, err)
	}
	var st state
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, false, err
	}
	return &st, true, nil
}

// isNotExist recognises the runtimes' "no such container" (runc: "container
// does not exist"; crun: its status file missing).
func isNotExist(stderr string) bool {
	return strings.Contains(stderr, "does not exist") || strings.Contains(stderr, "No such file or directory")
}

// knows reports whether the runtime still has state for id. Both runtimes
// keep a directory per container under their root: when it is gone, so is
// the container; while it exists, the runtime is asked.
func (b *Backend) knows(ctx context.Context, id string) (bool, error) {
	// (runsc keeps its state in files of another shape: it is asked.)
	if _, err := os.Stat(filepath.Join(b.cfg.StateDir, "runtime", id)); errors.Is(err, os.ErrNotExist) && !b.gvisor() {
		return false, nil
	}
	_, known, err := b.state(ctx, id)
	return known, err
}

func (b *Backend) statePid(ctx context.Context, id string) (int, error) {
	st, ok, err := b.state(ctx, id)
	switch {
	case err != nil:
		return 0, err
	case !ok || st.Pid <= 0:
		return 0, fmt.Errorf("%w: the runtime has no running container %s", sandbox.ErrAgent, id)
	}
	return st.Pid, nil
}
