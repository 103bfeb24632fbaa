package process

// A slot is a sandbox's init started and waiting for its configuration:
// how one is started, and the root's plan made beside it.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/clonexec"
	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/agentproc"
	"github.com/cordon-sandbox/cordon/internal/spawner"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

// slot is a started sandbox init waiting for its configuration: all of a
// sandbox that does not depend on its spec.
type slot struct {
	id, dir, stage, sock string
	scratch              string // where the init mounts the scratch tmpfs (sandboxinit.Config.ScratchMount)
	onDisk               bool   // scratch is the sandbox's disk (sandbox.Launch.Disk), mounted here
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
	// early, for an init started for a known spec, is its cgroups, made
	// while the init starts (they do not need its pid until it is
	// configured); configure takes them.
	early *earlyCgroups
}

// earlyCgroups are a sandbox's cgroups in the making, and its init's joining
// them. Moving a process into a cgroup v1 hierarchy waits for an RCU grace
// period (some 0.3 ms each here): the init joins while it goes on to its
// exec (clonexec.Helper.Cloned), not once it has started.
type earlyCgroups struct {
	made    chan struct{} // closed once cg and err are set
	cg      *cgroups
	err     error
	joined  bool // join ran (before startInit returned)
	joinErr error
}

// makeCgroups starts making sl's cgroups for limits l.
func (sl *slot) makeCgroups(b *Backend, l sandbox.Limits) {
	e := &earlyCgroups{made: make(chan struct{})}
	sl.early = e
	go func() {
		defer close(e.made)
		e.cg, e.err = b.cgroups.create(sl.id, l)
	}()
}

// join puts process pid into the cgroups once they are made.
func (e *earlyCgroups) join(pid int) {
	<-e.made
	e.joined = true
	if e.cg != nil {
		e.joinErr = e.cg.add(pid)
	}
}

// takeCgroups returns sl's cgroups for limits l with its init (pid) in
// them: made and joined now, or taken from makeCgroups. err says why they
// could not be made, joinErr why the init is not in them; from here they
// are the caller's.
func (sl *slot) takeCgroups(b *Backend, l sandbox.Limits, pid int) (cg *cgroups, err, joinErr error) {
	e := sl.early
	if e == nil {
		if cg, err = b.cgroups.create(sl.id, l); err != nil {
			return nil, err, nil
		}
		return cg, nil, cg.add(pid)
	}
	sl.early = nil
	<-e.made
	if e.err != nil {
		return nil, e.err, nil
	}
	if !e.joined {
		return e.cg, nil, e.cg.add(pid)
	}
	return e.cg, nil, e.joinErr
}

// forSpec is what newSlot needs to start an init for one spec: the
// sandbox's root can then be built while the init starts.
type forSpec struct {
	l        sandbox.Launch
	layout   []host.LayoutMount
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
	if spec != nil && spec.l.Disk != "" {
		// Apart from the sandbox's directory, never in it: removing that
		// directory must not reach into the disk.
		sl.scratch, sl.onDisk = host.DiskMountPoint(b.cfg.StateDir, id), true
	}
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
		sl.root.Cloned = func(pid int) {
			if sl.early != nil {
				sl.early.join(pid)
			}
		}
		sl.root.Fill = func() bool {
			sl.built = <-planned
			return sl.built != nil
		}
	}
	if err := os.Mkdir(sl.dir, 0o711); err != nil {
		return nil, err
	}
	dirs := []string{sl.stage, sl.sock}
	if !sl.onDisk {
		dirs = append(dirs, sl.scratch)
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o700); err != nil {
			sl.discard()
			return nil, err
		}
	}
	if spec != nil && b.wantsCgroups(spec.l.Spec.Limits) {
		sl.makeCgroups(b, spec.l.Spec.Limits)
	}
	if sl.onDisk {
		// Mounted before the init starts, whose mount namespace is a copy
		// of this one; its root, the sandbox's root inside, makes the
		// scratch directories on it.
		_, size := b.sysProcAttr()
		if err := host.MountDisk(agent, spec.l.Disk, sl.scratch, sl.uidBase, sl.gidBase, size, nil); err != nil {
			sl.discard()
			return nil, err
		}
	}
	// The sandbox's only way out: the host's egress proxy listens here,
	// and the agent bridges 127.0.0.1:3128 to it. (The agent's socket
	// beside it has the shorter name.)
	egressPath := filepath.Join(sl.sock, "egress.sock")
	err := host.SocketPath(egressPath)
	if err == nil {
		sl.egress, err = net.Listen("unix", egressPath)
	}
	if err != nil {
		sl.discard()
		return nil, err
	}
	agentSock, err := listenAgent(filepath.Join(sl.sock, "agent.sock"))
	if err != nil {
		sl.discard()
		return nil, err
	}
	defer agentSock.Close() // the init's copy is the agent's
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
	// measured alternately); serving is mostly waiting on
	// sockets and pipes, and did no worse on one (BenchmarkWarmSandbox).
	// Commands get their environment from the configuration, not this.
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{cfgR, readyW, agentSock}
	cmd.SysProcAttr = attr
	if sl.root != nil {
		// The trees follow ListenFD, from sandboxinit.TreeFD on.
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

// listenAgent makes the agent's socket at path, listening, for the init
// (sandboxinit.ListenFD). It is this process's, mode 0600: the agent
// accepts on it, and, as root, nothing in the sandbox, its root included,
// may connect to it (root is not mapped there). Without root the
// sandbox's one user is this one, and the token guards the agent.
func listenAgent(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	if err == nil {
		// Nothing connects before the listen: the mode is right by then.
		err = os.Chmod(path, 0o600)
	}
	if err == nil {
		err = unix.Listen(fd, unix.SOMAXCONN)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	return f, nil
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
	if e := sl.early; e != nil {
		if <-e.made; e.cg != nil {
			e.cg.remove()
		}
	}
	if sl.egress != nil {
		sl.egress.Close()
	}
	os.RemoveAll(sl.dir)
	if sl.onDisk {
		_ = host.UnmountDisk(sl.scratch)
	}
}
