package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/agentbin"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// Backend is the Docker Engine tier.
type Backend struct {
	cfg Config

	once sync.Once
	api  *engine
	err  error

	sweepOnce sync.Once

	parentMu     sync.Mutex
	parentKnown  bool
	cgroupParent string
}

// parent is the cgroup parent of this backend's containers: where the
// engine manages cgroups itself (its cgroupfs driver), the container
// tiers' shared one, bounded as a whole (host.BoundContainers); with the
// systemd driver, which takes only a slice, the engine's default (an
// operator bounds that slice: docs/security.md). It is asked once, until
// the engine answers.
func (b *Backend) parent(ctx context.Context, api *engine) (string, error) {
	b.parentMu.Lock()
	defer b.parentMu.Unlock()
	if b.parentKnown {
		return b.cgroupParent, nil
	}
	driver, err := api.cgroupDriver(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: docker: the engine's information: %v", sandbox.ErrUnavailable, err)
	}
	if driver == "cgroupfs" {
		b.cgroupParent = "/" + host.ContainersCgroup
		host.BoundContainers()
	}
	b.parentKnown = true
	return b.cgroupParent, nil
}

// sweepOrphans removes, once per process, the sandboxes of this state
// directory whose creator is gone: killed before it could remove them
// (their agent stopped when its lifeline closed; the stopped container
// and the directory remain). A failure is left for the next process.
func (b *Backend) sweepOrphans(ctx context.Context) {
	for _, dir := range host.Orphans(b.cfg.StateDir, 0) {
		// The directory is named as its container.
		name := filepath.Base(dir)
		_ = (&instance{b: b, name: name, id: name, dir: dir, exited: make(chan struct{})}).Destroy(ctx)
	}
}

var _ sandbox.Backend = (*Backend)(nil)

// The abilities the Docker tier has. Its agent is the container's
// entrypoint, which the engine runs: the host signals it and learns its
// exit status through the engine.
var (
	_ sandbox.Instance    = (*instance)(nil)
	_ sandbox.EgressPort  = (*instance)(nil)
	_ sandbox.Persistent  = (*instance)(nil)
	_ sandbox.ExitCoder   = (*instance)(nil)
	_ sandbox.Signaller   = (*instance)(nil)
	_ sandbox.OOMCounter  = (*instance)(nil)
	_ sandbox.MemoryGauge = (*instance)(nil)
	_ sandbox.Pauser      = (*instance)(nil)
	_ sandbox.Adopter     = (*Backend)(nil)
	_ sandbox.Closer      = (*Backend)(nil)
)

// New returns the backend.
func New(cfg Config) *Backend {
	if cfg.StateDir == "" {
		cfg.StateDir = "/run/cordon/docker"
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.Owner == "" {
		cfg.Owner = "cordon"
	}
	return &Backend{cfg: cfg}
}

func (b *Backend) Name() string { return Name }

// StateDir is where the backend keeps each sandbox's sockets.
func (b *Backend) StateDir() string { return b.cfg.StateDir }

// Capabilities: the engine enforces memory, pids and CPU limits and the
// writable space (sized tmpfs); images are the engine's own. Layout
// directories (id-mapped binds) and a root filesystem directory are not
// offered on this tier: without a user namespace of its own a bind would
// write as the sandbox's uid on the host.
func (b *Backend) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Isolated: true, MemoryLimit: true, PidsLimit: true, CPULimit: true, DiskLimit: true,
		EngineImages: true, User: true, Egress: true, Landlock: landlockABI() >= 1,
	}
}

// landlockABI is this kernel's Landlock ABI (the engine's, on this host).
var landlockABI = sync.OnceValue(func() int {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1) // LANDLOCK_CREATE_RULESET_VERSION
	if errno != 0 {
		return 0
	}
	return int(abi)
})

func (b *Backend) client() (*engine, error) {
	b.once.Do(func() { b.api, b.err = newEngine(b.cfg.Host) })
	return b.api, b.err
}

// Probe checks the engine answers, runs on this host, and that the agent
// is at hand.
func (b *Backend) Probe(ctx context.Context) error {
	api, err := b.client()
	if err != nil {
		return fmt.Errorf("%w: docker: %v", sandbox.ErrUnavailable, err)
	}
	if err := api.ping(ctx); err != nil {
		return fmt.Errorf("%w: docker: %v", sandbox.ErrUnavailable, err)
	}
	if _, err := agentbin.Find(b.cfg.AgentPath); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	return nil
}

// Load loads a `docker save` tarball into the engine's store, as docker
// load does, and returns what the engine said it loaded ("Loaded image:
// NAME").
func (b *Backend) Load(ctx context.Context, tarball io.Reader) ([]string, error) {
	if err := b.Probe(ctx); err != nil {
		return nil, err
	}
	api, _ := b.client()
	return api.load(ctx, tarball)
}

// Close releases the engine's client.
func (b *Backend) Close() error {
	if b.api != nil {
		b.api.close()
	}
	return nil
}

// ensureImage has the engine hold ref, pulling it as docker pull would
// when it is missing.
func (b *Backend) ensureImage(ctx context.Context, api *engine, ref string) (string, error) {
	id, err := api.imageID(ctx, ref)
	if errors.Is(err, errNotFound) {
		if err := api.pull(ctx, ref); err != nil {
			return "", fmt.Errorf("%w: image %s is not in the engine and cannot be pulled: %v", sandbox.ErrInvalidSpec, ref, err)
		}
		id, err = api.imageID(ctx, ref)
	}
	if err != nil {
		return "", fmt.Errorf("%w: docker: image %s: %v", sandbox.ErrUnavailable, ref, err)
	}
	return id, nil
}

func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	if err := b.Probe(ctx); err != nil {
		return nil, err
	}
	api, _ := b.client()
	spec := l.Spec
	ref := spec.Image
	if ref == "" {
		ref = b.cfg.Image
	}
	imageID, err := b.ensureImage(ctx, api, ref)
	if err != nil {
		return nil, err
	}
	uid := baseline.DefaultUID
	if spec.User != nil {
		uid = *spec.User
	}
	if uid == 0 {
		// Without a user namespace of its own, root in the container is the
		// host's root: even without a capability it owns what root owns.
		return nil, &sandbox.UnsupportedError{Tier: Name, What: "commands as root (uid 0 in a docker sandbox is the host's root: the engine gives it no user namespace of its own)"}
	}
	agentPath, _ := agentbin.Find(b.cfg.AgentPath)
	if err := os.MkdirAll(b.cfg.StateDir, 0o711); err != nil {
		return nil, err
	}
	agentPath, err = host.AgentCopy(b.cfg.StateDir, agentPath)
	if err != nil {
		return nil, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := "cordon-" + hex.EncodeToString(rnd[:])
	inst := &instance{b: b, name: name, uid: uid, dir: filepath.Join(b.cfg.StateDir, name), exited: make(chan struct{})}
	fail := func(err error) (sandbox.Instance, error) {
		return nil, errors.Join(err, inst.Destroy(context.WithoutCancel(ctx)))
	}
	if !b.cfg.Detached {
		b.sweepOnce.Do(func() { b.sweepOrphans(ctx) })
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
	// The agent makes its socket here as the container's root, then gives
	// it to its own id; the directory is opened to be read once it listens.
	if inst.egress, err = host.ListenEgress(sock, uid, uid); err != nil {
		return fail(err)
	}
	identity, err := b.identity(ctx, api, imageID, uid)
	if err != nil {
		return fail(err)
	}
	env := host.AgentEnv(l, uid, nil, host.AgentEnvOptions{TokenOnFD: true, TokenFD: 0})
	if !b.cfg.Detached {
		env = append(env, baseline.EnvPrefix+"LIFELINE=1")
	}
	landlock := ""
	switch {
	case spec.RequireLandlock:
		landlock = "require"
	case landlockABI() >= 1:
		landlock = "auto"
	}
	// Under a pids limit the workload's tasks are held apart from the
	// agent's (holdCommands), where the host's pids cgroups are v1.
	apart := spec.Limits.Pids > 0 && host.PidsV1() != ""
	parent, err := b.parent(ctx, api)
	if err != nil {
		return fail(err)
	}
	req, err := render(renderInput{
		Image: ref, UID: uid, Env: env, AgentPath: agentPath, SocketDir: sock, Identity: identity,
		Limits: spec.Limits, Budget: scratchBudget(), Landlock: landlock, CommandsApart: apart, CgroupParent: parent,
		Labels: map[string]string{LabelTier: Name, LabelOwner: b.cfg.Owner, LabelSandbox: name},
	})
	if err != nil {
		return fail(err)
	}
	inst.id, err = api.create(ctx, name, req)
	if err != nil {
		if invalid(err) {
			return fail(fmt.Errorf("%w: docker: %v", sandbox.ErrInvalidSpec, err))
		}
		return fail(fmt.Errorf("%w: docker: create: %v", sandbox.ErrAgent, err))
	}
	// The token goes down the container's standard input, attached before
	// it starts: it is in no configuration the engine keeps.
	att, err := api.attachStdin(ctx, inst.id)
	if err != nil {
		return fail(fmt.Errorf("%w: docker: attach: %v", sandbox.ErrAgent, err))
	}
	inst.stdin = att
	// The wait is in place before the start, so that no exit is missed.
	waiting := make(chan struct{})
	go inst.watch(context.WithoutCancel(ctx), "next-exit", waiting)
	<-waiting
	if err := api.start(ctx, inst.id); err != nil {
		return fail(fmt.Errorf("%w: docker: start: %v", sandbox.ErrAgent, err))
	}
	token := l.Token
	if !b.cfg.Detached {
		token += "\n"
	}
	if _, err := io.WriteString(att, token); err != nil {
		return fail(fmt.Errorf("%w: docker: the token: %v", sandbox.ErrAgent, err))
	}
	if b.cfg.Detached {
		// The sandbox outlives this process: no lifeline.
		if cw, ok := att.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		att.Close()
		inst.stdin = nil
	}
	inst.ep = client.Endpoint{Network: "unix", Address: filepath.Join(sock, "agent.sock"), Token: l.Token}
	if err := inst.sealSocketDir(ctx, sock); err != nil {
		return fail(fmt.Errorf("%w: %v: %s", sandbox.ErrAgent, err, inst.Diagnostics()))
	}
	c, err := api.inspect(ctx, inst.id)
	if err != nil || c.State == nil || c.State.Pid <= 0 {
		return fail(fmt.Errorf("%w: docker: the agent's pid: %v", sandbox.ErrAgent, err))
	}
	inst.memcg, _ = host.CgroupOf(c.State.Pid, "memory")
	// Before the sandbox's first command: Docker sets no TCP bound.
	if err := host.BoundTCP(inst.memcg); err != nil {
		return fail(fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err))
	}
	if apart {
		if err := holdCommands(c.State.Pid, spec.Limits.Pids); err != nil {
			return fail(fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err))
		}
	}
	return inst, nil
}

// identity is the sandbox's identity files, bound read-only: hosts,
// hostname and a resolver configuration naming none (baseline), and the
// image's own accounts with the sandbox user's (baseline.MergeAccounts).
// They are made once per image and user, in a shared directory.
func (b *Backend) identity(ctx context.Context, api *engine, imageID string, uid int) ([]bindMount, error) {
	files := baseline.IdentityFiles(uid, false)
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %d", imageID, uid))
	dir, err := host.SharedSource(b.cfg.StateDir, "accounts", hex.EncodeToString(sum[:8]), func(tmp string) error {
		passwd, group, err := imageAccounts(ctx, api, imageID)
		if err != nil {
			return err
		}
		files["/etc/passwd"], files["/etc/group"] = baseline.MergeAccounts(passwd, group, uid)
		for target, content := range files {
			if err := os.WriteFile(filepath.Join(tmp, filepath.Base(target)), []byte(content), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: docker: the sandbox's identity files: %v", sandbox.ErrUnavailable, err)
	}
	targets := append(slices.Sorted(maps.Keys(baseline.IdentityFiles(uid, false))), "/etc/passwd", "/etc/group")
	var out []bindMount
	for _, target := range targets {
		out = append(out, bind(filepath.Join(dir, filepath.Base(target)), target, true))
	}
	return out, nil
}

// imageAccounts reads an image's /etc/passwd and /etc/group (empty where
// it has none) from a container made for that and never started.
func imageAccounts(ctx context.Context, api *engine, imageID string) (passwd, group string, err error) {
	id, err := api.create(ctx, "", &createRequest{Image: imageID, Entrypoint: []string{"/nonexistent"}, NetworkDisabled: true,
		Labels: map[string]string{LabelTier: Name}, HostConfig: hostConfig{NetworkMode: "none"}})
	if err != nil {
		return "", "", err
	}
	defer api.remove(context.WithoutCancel(ctx), id)
	read := func(path string) (string, error) {
		b, err := api.readFile(ctx, id, path, 1<<20)
		if errors.Is(err, errNotFound) {
			return "", nil
		}
		return string(b), err
	}
	if passwd, err = read("/etc/passwd"); err != nil {
		return "", "", err
	}
	group, err = read("/etc/group")
	return passwd, group, err
}

// holdCommands puts every command of the container's agent in a pids
// cgroup of limit below the container's (host.HoldCommands), so that the
// workload has exactly its limit and the agent keeps its headroom.
func holdCommands(pid int, limit int64) error {
	cg, err := host.CgroupOf(pid, "pids")
	if err != nil {
		return err
	}
	return host.HoldCommands(cg, pid, limit)
}

// CanPause: the engine freezes a container.
func (i *instance) CanPause() bool { return true }

// Pause freezes every process of the sandbox, agent included.
func (i *instance) Pause(ctx context.Context) error { return i.setPaused(ctx, true) }

// Resume thaws it.
func (i *instance) Resume(ctx context.Context) error { return i.setPaused(ctx, false) }

func (i *instance) setPaused(ctx context.Context, pause bool) error {
	api, err := i.b.client()
	if err != nil {
		return err
	}
	if err := api.pause(ctx, i.id, pause); err != nil {
		var ee *engineError
		if !pause && errors.As(err, &ee) && strings.Contains(ee.Message, "is not paused") {
			return nil // resuming one that runs is no error
		}
		return fmt.Errorf("docker: %w", err)
	}
	i.paused.Store(pause)
	return nil
}

// OOMKills counts the OOM kills in the container's memory cgroup.
func (i *instance) OOMKills() uint64 {
	if i.memcg == "" {
		return 0
	}
	return host.OOMKills(i.memcg)
}

// MemoryInUse is the container's memory, from its memory cgroup.
func (i *instance) MemoryInUse() (int64, bool) {
	if i.memcg == "" {
		return 0, false
	}
	return host.MemoryInUse(i.memcg)
}

// scratchBudget is the writable space of a sandbox whose limits set none:
// half the host's memory, as on the OCI tiers.
func scratchBudget() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit) / 2
}

// instance is one container.
type instance struct {
	b      *Backend
	name   string // the container's name, and its directory's
	id     string
	uid    int    // the sandbox user's
	memcg  string // its memory cgroup, once known
	dir    string
	ep     client.Endpoint
	egress net.Listener
	// stdin is the attached standard input: the agent's lifeline.
	stdin net.Conn

	exited   chan struct{}
	exitOnce sync.Once
	exitCode atomic.Int64 // valid once exited is closed; -1 unknown
	paused   atomic.Bool

	mu   sync.Mutex
	gone bool
}

// watch closes exited once the engine reports the container meets
// condition (or can no longer say); waiting is closed once the wait is in
// place.
func (i *instance) watch(ctx context.Context, condition string, waiting chan<- struct{}) {
	api, err := i.b.client()
	code := int64(-1)
	if err == nil {
		code, _ = api.waitFrom(ctx, i.id, condition, waiting)
	} else {
		close(waiting)
	}
	i.exit(code)
}

// exit records the agent's exit status, once.
func (i *instance) exit(code int64) {
	i.exitOnce.Do(func() {
		i.exitCode.Store(code)
		close(i.exited)
	})
}

// ExitCode is the agent's exit status as the engine reported it, once
// Exited has closed (-1 where it could not say).
func (i *instance) ExitCode() int { return int(i.exitCode.Load()) }

// Signal sends sig to the agent, through the engine.
func (i *instance) Signal(sig os.Signal) error {
	api, err := i.b.client()
	if err != nil {
		return err
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("docker: cannot send %v", sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return api.kill(ctx, i.id, strconv.Itoa(int(s)))
}

func (i *instance) Endpoint() client.Endpoint    { return i.ep }
func (i *instance) Exited() <-chan struct{}      { return i.exited }
func (i *instance) EgressListener() net.Listener { return i.egress }

// Diagnostics is the tail of the agent's own log, as the engine kept it.
func (i *instance) Diagnostics() string {
	api, err := i.b.client()
	if err != nil || i.id == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := api.logs(ctx, i.id, 100)
	return strings.TrimSpace(out)
}

// sealSocketDir waits for the agent's socket, then gives the directory
// back to the host's root, so commands cannot leave files beside it.
func (i *instance) sealSocketDir(ctx context.Context, dir string) error {
	sock := filepath.Join(dir, "agent.sock")
	deadline := time.Now().Add(30 * time.Second)
	for wait := 200 * time.Microsecond; ; wait = min(wait*2, 5*time.Millisecond) {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			break
		}
		select {
		case <-i.exited:
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

// state is what a later process needs to take the sandbox back.
type state struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	UID  int    `json:"uid"`
}

// State describes the instance for Adopt (no secret).
func (i *instance) State() ([]byte, error) {
	return json.Marshal(state{Name: i.name, ID: i.id, UID: i.uid})
}

// Adopt takes back a running container this backend made.
func (b *Backend) Adopt(ctx context.Context, raw []byte, token string) (sandbox.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || st.ID == "" || st.Name == "" || strings.ContainsAny(st.Name, "/.") {
		return nil, fmt.Errorf("%w: docker: a state that names no container", sandbox.ErrAgent)
	}
	if err := b.Probe(ctx); err != nil {
		return nil, err
	}
	api, _ := b.client()
	c, err := api.inspect(ctx, st.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: docker: %v", sandbox.ErrAgent, err)
	}
	if c.labels()[LabelOwner] != b.cfg.Owner || !c.running() {
		return nil, fmt.Errorf("%w: docker: container %s is not a running sandbox of this backend", sandbox.ErrAgent, st.Name)
	}
	inst := &instance{b: b, name: st.Name, id: st.ID, uid: st.UID, dir: filepath.Join(b.cfg.StateDir, st.Name), exited: make(chan struct{})}
	if c.State.Pid > 0 {
		inst.memcg, _ = host.CgroupOf(c.State.Pid, "memory")
	}
	sock := filepath.Join(inst.dir, "sock")
	// The egress socket is this process's to serve again.
	if inst.egress, err = host.ListenEgress(sock, st.UID, st.UID); err != nil {
		return nil, fmt.Errorf("%w: docker: %v", sandbox.ErrAgent, err)
	}
	waiting := make(chan struct{})
	go inst.watch(context.WithoutCancel(ctx), "not-running", waiting)
	<-waiting
	inst.ep = client.Endpoint{Network: "unix", Address: filepath.Join(sock, "agent.sock"), Token: token}
	return inst, nil
}

// Sweep removes, with confirmation, every container of this backend's
// owner that keep does not hold, and the directories of sandboxes gone.
func (b *Backend) Sweep(ctx context.Context, keep []sandbox.Instance) error {
	if err := b.Probe(ctx); err != nil {
		return err
	}
	api, _ := b.client()
	held := map[string]bool{}
	for _, k := range keep {
		if i, ok := k.(*instance); ok {
			held[i.name] = true
		}
	}
	list, err := api.list(ctx, LabelTier+"="+Name, LabelOwner+"="+b.cfg.Owner)
	if err != nil {
		return fmt.Errorf("%w: docker: %v", sandbox.ErrTeardown, err)
	}
	var errs []error
	for _, c := range list {
		name := c.Labels[LabelSandbox]
		if held[name] {
			continue
		}
		i := &instance{b: b, name: name, id: c.ID, dir: filepath.Join(b.cfg.StateDir, name), exited: make(chan struct{})}
		errs = append(errs, i.Destroy(ctx))
		held[name] = true // its directory is gone with it
	}
	ents, _ := os.ReadDir(b.cfg.StateDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "cordon-") && !held[e.Name()] {
			errs = append(errs, os.RemoveAll(filepath.Join(b.cfg.StateDir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// Destroy removes the container (the engine kills what runs in it) and
// confirms the engine no longer knows it, then removes its directory. A
// removal that fails is an error wrapping ErrTeardown, and Destroy may be
// retried.
func (i *instance) Destroy(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone {
		return nil
	}
	if i.egress != nil {
		i.egress.Close()
	}
	if i.stdin != nil {
		i.stdin.Close()
	}
	if i.paused.Load() {
		// A frozen container is thawed first, to be killed.
		_ = i.setPaused(ctx, false)
	}
	if i.id != "" {
		api, err := i.b.client()
		if err != nil {
			return fmt.Errorf("%w: docker: %v", sandbox.ErrTeardown, err)
		}
		if err := api.remove(ctx, i.id); err != nil && !errors.Is(err, errNotFound) {
			return fmt.Errorf("%w: docker: remove %s: %v", sandbox.ErrTeardown, i.name, err)
		}
		if _, err := api.inspect(ctx, i.id); err == nil {
			return fmt.Errorf("%w: docker: %s is still there after its removal", sandbox.ErrTeardown, i.name)
		} else if !errors.Is(err, errNotFound) {
			return fmt.Errorf("%w: docker: confirming %s is gone: %v", sandbox.ErrTeardown, i.name, err)
		}
	}
	i.exit(-1)
	if err := os.RemoveAll(i.dir); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
	}
	i.gone = true
	return nil
}
