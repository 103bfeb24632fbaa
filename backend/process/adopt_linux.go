package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// A detached sandbox (Config.Detached) outlives the process that created
// it. Its instance state says how to find it again: the host directory,
// the init's pid and start time (one process across pid reuse), and the
// owner of its sockets. A later process adopts it through a pidfd, which
// names the init for good once opened, and listens anew on its egress
// socket path, which the agent dials for every connection.

var _ sandbox.Adopter = (*Backend)(nil)

type instanceState struct {
	ID        string `json:"id"`
	Dir       string `json:"dir"`
	Pid       int    `json:"pid"`
	Start     string `json:"start"`
	SocketUID int    `json:"socketUid"`
	SocketGID int    `json:"socketGid"`
	// Disk: the sandbox's scratch is its disk (host.DiskMountPoint).
	Disk bool `json:"disk,omitempty"`
}

// State describes the sandbox for Adopt (sandbox.Persistent).
func (i *instance) State() ([]byte, error) { return json.Marshal(i.state) }

// Adopt takes over a detached sandbox an earlier process started.
func (b *Backend) Adopt(ctx context.Context, state []byte, token string) (sandbox.Instance, error) {
	if b.probe(); b.stateErr != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, b.stateErr)
	}
	var st instanceState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%w: unreadable sandbox state: %v", sandbox.ErrAgent, err)
	}
	// The state names a directory of this backend's and nothing else.
	if filepath.Dir(st.Dir) != filepath.Clean(b.cfg.StateDir) || filepath.Base(st.Dir) != st.ID || !strings.HasPrefix(st.ID, "sb-") {
		return nil, fmt.Errorf("%w: sandbox state names %s, outside %s", sandbox.ErrAgent, st.Dir, b.cfg.StateDir)
	}
	sock := filepath.Join(st.Dir, "sock")
	p, err := adoptProc(st.Pid, st.Start, client.Endpoint{Network: "unix", Address: filepath.Join(sock, "agent.sock"), Token: token})
	if err != nil {
		return nil, err
	}
	inst := &instance{proc: p, state: st, dir: st.Dir, cg: b.cgroups.existing(st.ID)}
	inst.mayBeFrozen.Store(true)
	// The old listener died with its process; a new one at the same path
	// is what the agent reaches next time it dials.
	ln, err := host.ListenEgress(sock, st.SocketUID, st.SocketGID)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("%w: egress socket: %v", sandbox.ErrAgent, err)
	}
	inst.egress = ln
	return inst, nil
}

// adoptedProc is an init this process did not start: it is watched and
// signalled through a pidfd.
type adoptedProc struct {
	*pidfd.Proc
	ep client.Endpoint
}

func adoptProc(pid int, start string, ep client.Endpoint) (*adoptedProc, error) {
	p, err := pidfd.Open(pid, start)
	if err != nil {
		return nil, fmt.Errorf("%w: the sandbox's init (pid %d) is gone", sandbox.ErrAgent, pid)
	}
	return &adoptedProc{Proc: p, ep: ep}, nil
}

func (p *adoptedProc) Endpoint() client.Endpoint { return p.ep }

// ExitCode is unknown for a process that is not this one's child.
func (p *adoptedProc) ExitCode() int { return -1 }

// Diagnostics: the agent's log went to the process that started it.
func (p *adoptedProc) Diagnostics() string { return "" }

// Sweep tears down every sandbox in the state directory that keep does not
// hold: live ones (a daemon's records did not explain them) and what dead
// ones left.
func (b *Backend) Sweep(ctx context.Context, keep []sandbox.Instance) error {
	if b.probe(); b.stateErr != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, b.stateErr)
	}
	kept := map[string]bool{}
	for _, i := range keep {
		if in, ok := i.(*instance); ok {
			kept[filepath.Base(in.dir)] = true
		}
	}
	b.poolMu.Lock()
	for _, sl := range b.pool {
		kept[sl.id] = true
	}
	b.poolMu.Unlock()
	unkept, err := host.Unkept(b.cfg.StateDir, "sb-", kept)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range unkept {
		if err := b.removeSandbox(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	// A disk outlives its sandbox: only its mount goes, once nothing of
	// the sandbox runs.
	errs = append(errs, host.SweepDisks(b.cfg.StateDir, func(id string) bool {
		_, err := os.Stat(filepath.Join(b.cfg.StateDir, id))
		return kept[id] || err == nil
	}))
	return errors.Join(errs...)
}

// removeSandbox ends whatever runs of sandbox id (its init, then every
// process in its cgroups) and removes its cgroups and host directory.
func (b *Backend) removeSandbox(ctx context.Context, id string) error {
	dir := filepath.Join(b.cfg.StateDir, id)
	cg := b.cgroups.existing(id)
	if cg != nil && cg.canFreeze() {
		// A frozen process cannot act on a signal, not even SIGKILL.
		_ = cg.freeze(ctx, false)
	}
	if rec, err := os.ReadFile(filepath.Join(dir, initRecord)); err == nil {
		if f := strings.Fields(string(rec)); len(f) == 2 {
			pid, _ := strconv.Atoi(f[0])
			if p, err := adoptProc(pid, f[1], client.Endpoint{}); err == nil {
				// SIGKILL to PID 1 of the namespace ends every process in it.
				_ = p.Kill()
				select {
				case <-p.Exited():
				case <-time.After(5 * time.Second):
					p.Close()
					return fmt.Errorf("%w: sandbox %s's init (pid %d) did not exit after SIGKILL", sandbox.ErrTeardown, id, pid)
				case <-ctx.Done():
					p.Close()
					return fmt.Errorf("%w: %w", sandbox.ErrTeardown, ctx.Err())
				}
			}
		}
	}
	if cg != nil {
		if err := cg.killAll(time.Now().Add(5 * time.Second)); err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
		if err := cg.remove(); err != nil {
			return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
	}
	return nil
}
