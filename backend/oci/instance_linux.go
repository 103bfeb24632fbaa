package oci

// A started container: its wire, its end, its state for a later daemon,
// and the sweep of what a killed host left.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/sandbox"
)

type instance struct {
	b         *Backend
	id, dir   string
	logs      *logbuf.Buffer
	egress    net.Listener
	proc      *pidfd.Proc
	ep        client.Endpoint
	created   bool     // the runtime knows the container
	cgroup    string   // its cgroups path
	socketUID int      // the sandbox user's host uid (and gid)
	lifeline  *os.File // this process's end of the agent's lifeline (not detached)
	paused    atomic.Bool

	mu   sync.Mutex
	gone bool
}

func (i *instance) Endpoint() client.Endpoint { return i.ep }
func (i *instance) Diagnostics() string       { return strings.TrimSpace(i.logs.String()) }

// Exited is closed when the container's init (the agent) has exited.
func (i *instance) Exited() <-chan struct{} { return i.proc.Exited() }

// OOMKills counts OOM kills in the container's memory cgroup (cgroup v1
// memory.oom_control, or v2 memory.events).
func (i *instance) OOMKills() uint64 { return host.OOMKills(i.cgroup) }

// MemoryInUse is the memory of the container's cgroup: under gVisor, the
// sentry's, which holds the commands' memory and its own.
func (i *instance) MemoryInUse() (int64, bool) { return host.MemoryInUse(i.cgroup) }

// EgressListener is where the sandbox's egress arrives on the host.
func (i *instance) EgressListener() net.Listener { return i.egress }

// Destroy stops the agent (SIGTERM: it stops its commands), kills the
// container if it does not exit, deletes it through the runtime and
// confirms the runtime no longer knows it, then removes its directory.
func (i *instance) Destroy(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone {
		return nil
	}
	if i.egress != nil {
		i.egress.Close()
	}
	b := i.b
	if i.paused.Load() {
		// A frozen process cannot act on a signal.
		_ = i.runtimeVerb(context.WithoutCancel(ctx), "resume")
	}
	if i.proc != nil {
		_ = i.proc.Signal(syscall.SIGTERM)
		select {
		case <-i.proc.Exited():
		case <-time.After(7 * time.Second):
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", sandbox.ErrTeardown, ctx.Err())
		}
	}
	if i.created || i.proc != nil {
		// delete --force kills whatever is left (the whole cgroup) and
		// removes the runtime's state and cgroups.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		out, err := b.runtimeCmd(dctx, "delete", "--force", i.id).CombinedOutput()
		cancel()
		known, serr := b.knows(context.WithoutCancel(ctx), i.id)
		if serr != nil || known {
			return fmt.Errorf("%w: %s delete %s: %v: %s", sandbox.ErrTeardown, filepath.Base(b.runtime), i.id, errors.Join(err, serr), strings.TrimSpace(string(out)))
		}
	}
	if i.proc != nil {
		select {
		case <-i.proc.Exited():
		case <-time.After(5 * time.Second):
			return fmt.Errorf("%w: the container's init (pid %d) outlived its delete", sandbox.ErrTeardown, i.proc.Pid())
		}
	}
	// The layout mounts go first: removing the directory over them would
	// reach into the caller's own directories.
	if err := host.DetachLayout(i.dir); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
	}
	if err := os.RemoveAll(i.dir); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
	}
	// The disk's mount, if it has one, once nothing of it runs; the disk
	// itself is its keeper's.
	if mnt := host.DiskMountPoint(i.b.cfg.StateDir, i.id); isDir(mnt) {
		if err := host.UnmountDisk(mnt); err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
	}
	if i.lifeline != nil {
		i.lifeline.Close()
	}
	i.gone = true
	return nil
}

// The container tier's sandboxes outlive the process that created them
// (the runtime detaches the container), so a later process can adopt them
// (sandbox.Adopter), and sweep what no record explains.

var _ sandbox.Adopter = (*Backend)(nil)

type instanceState struct {
	ID        string `json:"id"`
	SocketUID int    `json:"socketUid"`
	SocketGID int    `json:"socketGid"`
	// StateDir and Runtime are the state directory and runtime that made
	// it: another configuration's sandbox is taken back by a sibling.
	StateDir string `json:"stateDir,omitempty"`
	Runtime  string `json:"runtime,omitempty"`
}

// State describes the sandbox for Adopt (sandbox.Persistent).
func (i *instance) State() ([]byte, error) {
	return json.Marshal(instanceState{ID: i.id, SocketUID: i.socketUID, SocketGID: i.socketUID, StateDir: i.b.cfg.StateDir, Runtime: i.b.runtime})
}

// Adopt takes over a container an earlier process started.
func (b *Backend) Adopt(ctx context.Context, state []byte, token string) (sandbox.Instance, error) {
	if err := b.probeOnce(ctx); err != nil {
		return nil, err
	}
	var st instanceState
	if err := json.Unmarshal(state, &st); err != nil || !strings.HasPrefix(st.ID, "cordon-") || strings.ContainsAny(st.ID, "/.") {
		return nil, fmt.Errorf("%w: unreadable container state", sandbox.ErrAgent)
	}
	if st.StateDir != "" && st.StateDir != b.cfg.StateDir {
		return b.sibling(st.StateDir, st.Runtime).Adopt(ctx, state, token)
	}
	inst := &instance{b: b, id: st.ID, dir: filepath.Join(b.cfg.StateDir, st.ID), logs: logbuf.New(64 << 10),
		cgroup: "/" + ociCgroupParent + "/" + st.ID, created: true, socketUID: st.SocketUID}
	pid, err := b.statePid(ctx, st.ID)
	if err == nil {
		inst.proc, err = pidfd.Open(pid, "")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: container %s is gone: %v", sandbox.ErrAgent, st.ID, err)
	}
	sock := filepath.Join(inst.dir, "sock")
	if inst.egress, err = host.ListenEgress(sock, st.SocketUID, st.SocketGID); err != nil {
		inst.proc.Close()
		return nil, fmt.Errorf("%w: egress socket: %v", sandbox.ErrAgent, err)
	}
	inst.ep = client.Endpoint{Network: "unix", Address: filepath.Join(sock, "agent.sock"), Token: token}
	return inst, nil
}

// Sweep deletes every container under this backend's runtime state that
// keep does not hold (a create cut short, a sandbox no record explains),
// and removes their directories.
func (b *Backend) Sweep(ctx context.Context, keep []sandbox.Instance) error {
	return errors.Join(b.sweep(ctx, keep), b.sweepSiblings(ctx, keep))
}

// sweep is Sweep for b's own state directory.
func (b *Backend) sweep(ctx context.Context, keep []sandbox.Instance) error {
	if err := b.probeOnce(ctx); err != nil {
		if errors.Is(err, sandbox.ErrUnavailable) {
			// Without its runtime the tier started nothing here, and
			// could not delete what another install left.
			return nil
		}
		return err
	}
	if err := b.stateDir(); err != nil {
		return err
	}
	host.SweepSharedTemps(b.cfg.StateDir)
	kept := map[string]bool{}
	for _, i := range keep {
		if in, ok := i.(*instance); ok {
			kept[in.id] = true
		}
	}
	out, err := b.runtimeCmd(ctx, "list", "--quiet").Output()
	if err != nil {
		return fmt.Errorf("%s list: %v", filepath.Base(b.runtime), err)
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(string(out)) {
		ids[id] = true
	}
	if ents, err := os.ReadDir(b.cfg.StateDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "cordon-") {
				ids[e.Name()] = true
			}
		}
	}
	var errs []error
	for id := range ids {
		if kept[id] || !strings.HasPrefix(id, "cordon-") {
			continue
		}
		inst := &instance{b: b, id: id, dir: filepath.Join(b.cfg.StateDir, id), logs: logbuf.New(1), created: true}
		// A running agent is asked to stop its commands first; a container
		// created and never started has nobody to ask.
		if st, ok, err := b.state(ctx, id); err == nil && ok && st.Status == "running" && st.Pid > 0 {
			inst.proc, _ = pidfd.Open(st.Pid, "")
		}
		errs = append(errs, inst.Destroy(ctx))
	}
	errs = append(errs, host.SweepDisks(b.cfg.StateDir, func(id string) bool {
		_, err := os.Stat(filepath.Join(b.cfg.StateDir, id))
		return kept[id] || err == nil
	}))
	return errors.Join(errs...)
}

// CanPause: both runtimes freeze a container's cgroup.
func (i *instance) CanPause() bool { return i.created }

// Pause freezes every process of the container, the agent included.
func (i *instance) Pause(ctx context.Context) error { return i.runtimeVerb(ctx, "pause") }

// Resume thaws a paused container; resuming one that runs is no error.
func (i *instance) Resume(ctx context.Context) error { return i.runtimeVerb(ctx, "resume") }

func (i *instance) runtimeVerb(ctx context.Context, verb string) error {
	out, err := i.b.runtimeCmd(ctx, verb, i.id).CombinedOutput()
	if err != nil && verb == "resume" && (strings.Contains(string(out), "not paused") || strings.Contains(string(out), "in state running")) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", filepath.Base(i.b.runtime), verb, err, strings.TrimSpace(string(out)))
	}
	i.paused.Store(verb == "pause")
	return nil
}
