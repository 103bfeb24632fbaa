package microvm

// A daemon's VMs outlive it: the guest's agent serves a new session to
// whichever host rejoins its port (vminit.Rejoin), and a later daemon
// takes each VM back from its recorded state (Adopt), or, if it holds no
// record of it, tears it down (Sweep).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/vminit"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/hashicorp/yamux"
)

var (
	_ sandbox.Adopter    = (*Backend)(nil)
	_ sandbox.Persistent = (*instance)(nil)
)

// vmmRecord names a VM's VMM in its directory, for Sweep.
const vmmRecord = "vmm.pid"

// writeVMMRecord records the VMM's pid and start time in dir.
func writeVMMRecord(dir string, pid int, start string) error {
	return os.WriteFile(filepath.Join(dir, vmmRecord), []byte(strconv.Itoa(pid)+" "+start+"\n"), 0o600)
}

// vmState is a VM as a later process takes it back.
type vmState struct {
	ID       string `json:"id"`
	Pid      int    `json:"pid"`
	Start    string `json:"start"`
	Accel    string `json:"accel"`
	Restored bool   `json:"restored,omitempty"`
	Disk     bool   `json:"disk,omitempty"`
	Cgroup   string `json:"cgroup,omitempty"`
	Note     string `json:"note,omitempty"`
	Paused   bool   `json:"paused,omitempty"`
}

// State describes the VM for Adopt.
func (vm *instance) State() ([]byte, error) {
	return json.Marshal(vmState{ID: vm.id, Pid: vm.pid, Start: vm.start, Accel: vm.accel, Restored: vm.restored,
		Disk: vm.disk, Cgroup: vm.cgroup, Note: vm.note, Paused: vm.paused.Load()})
}

// Adopt takes back a VM a previous process of the host's started: its
// VMM still runs (the same process, by its start time), and its ports
// answer; the agent's port gets a new session (vminit.Rejoin), served
// on the VM's agent socket as before. A VMM that is gone is an error
// wrapping ErrAgent, its directory Sweep's.
func (b *Backend) Adopt(ctx context.Context, state []byte, token string) (sandbox.Instance, error) {
	var st vmState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%w: unreadable VM state: %v", sandbox.ErrAgent, err)
	}
	// The state names a VM directory of this backend's and nothing else.
	if !strings.HasPrefix(st.ID, "vm-") || filepath.Base(st.ID) != st.ID || st.Cgroup != "" && st.Cgroup != cgroupOf(st.ID) {
		return nil, fmt.Errorf("%w: VM state names %q", sandbox.ErrAgent, st.ID)
	}
	p, err := pidfd.Open(st.Pid, st.Start)
	if err != nil {
		return nil, fmt.Errorf("%w: the VM's VMM (pid %d) is gone", sandbox.ErrAgent, st.Pid)
	}
	dir := filepath.Join(b.cfg.StateDir, st.ID)
	vm := &instance{b: b, id: st.ID, dir: dir, accel: st.Accel, proc: p, pid: st.Pid, start: st.Start,
		exited: make(chan struct{}), logs: logbuf.New(64 << 10), note: st.Note, restored: st.Restored, disk: st.Disk, cgroup: st.Cgroup}
	vm.paused.Store(st.Paused)
	go func() {
		<-p.Exited()
		vm.ended.Store("the VMM ended (taken back from an earlier process, its status unknown)")
		close(vm.exited)
	}()
	fail := func(err error) (sandbox.Instance, error) {
		if vm.port != nil {
			vm.port.Close()
		}
		if vm.control != nil {
			vm.control.Close()
		}
		p.Close()
		return nil, fmt.Errorf("%w: %v", sandbox.ErrAgent, err)
	}
	if vm.port, err = vm.dialPort(ctx); err != nil {
		return fail(err)
	}
	if vm.control, err = dialUnix(ctx, vm, filepath.Join(dir, "control.sock")); err != nil {
		return fail(err)
	}
	if err := rejoin(ctx, vm.port); err != nil {
		return fail(fmt.Errorf("rejoin the guest's agent: %v", err))
	}
	if vm.session, err = yamux.Client(vm.port, vminit.MuxConfig()); err != nil {
		return fail(err)
	}
	// The old socket went with the process that listened on it.
	sock := filepath.Join(dir, "agent.sock")
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	if err := vm.serve(); err != nil {
		return fail(err)
	}
	vm.ep = client.Endpoint{Network: "unix", Address: sock, Token: token}
	return vm, nil
}

// Sweep tears down every VM of this backend's that keep does not hold:
// its VMM killed (if it is the recorded process), its cgroup and its
// directory removed.
func (b *Backend) Sweep(ctx context.Context, keep []sandbox.Instance) error {
	kept := map[string]bool{}
	for _, i := range keep {
		if vm, ok := i.(*instance); ok {
			kept[vm.id] = true
		}
	}
	unkept, err := host.Unkept(b.cfg.StateDir, "vm-", kept)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range unkept {
		dir := filepath.Join(b.cfg.StateDir, name)
		rec, _ := os.ReadFile(filepath.Join(dir, vmmRecord))
		if pid, start, ok := strings.Cut(strings.TrimSpace(string(rec)), " "); ok {
			n, _ := strconv.Atoi(pid)
			if p, err := pidfd.Open(n, start); err == nil {
				_ = p.Kill()
				select {
				case <-p.Exited():
				case <-ctx.Done():
					p.Close()
					errs = append(errs, fmt.Errorf("%w: the VMM of %s (pid %d) outlived SIGKILL", sandbox.ErrTeardown, name, n))
					continue
				}
				p.Close()
			}
		}
		if procid.Named(strings.TrimSpace(string(rec))) {
			continue // (killed above, or not ours to kill)
		}
		if err := b.removeVM(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sweepStale removes what VMs whose VMM is gone left: a creator killed
// before it could tear its VMs down takes their VMMs with it (their
// parent-death signal), not their directories and cgroups. Run once per
// process, at the tier's probe; VMs that still run are left to whoever
// holds them (a daemon's Sweep for its own).
func (b *Backend) sweepStale() {
	for _, name := range host.Stale(b.cfg.StateDir, "vm-", vmmRecord) {
		_ = b.removeVM(name)
	}
	if root, _ := cpuRoot(); root != "" {
		host.SweepCgroups(b.cfg.StateDir, []string{filepath.Join(root, cgroupDir)}, "vm-", time.Minute)
	}
}

// removeVM removes VM directory name and its cgroup, its VMM gone.
func (b *Backend) removeVM(name string) error {
	return errors.Join(removeCgroup(cgroupOf(name)), os.RemoveAll(filepath.Join(b.cfg.StateDir, name)))
}

// rejoin asks the guest's agent for a new session on port (vminit.Rejoin)
// until it answers, each ask given rejoinWait, within ctx. What the guest
// wrote before its answer (its old session's last frames) is passed over.
func rejoin(ctx context.Context, port net.Conn) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	nonce := hex.EncodeToString(rnd[:])
	ack := vminit.RejoinAck + nonce + "\n"
	defer port.SetDeadline(time.Time{})
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := port.Write([]byte(string(rune(vminit.Rejoin)) + nonce + "\n")); err != nil {
			return err
		}
		_ = port.SetReadDeadline(time.Now().Add(rejoinWait))
		// One byte at a time: nothing past the answer is taken.
		var seen []byte
		var b [1]byte
		for {
			if _, err := port.Read(b[:]); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break // asked again
				}
				return err
			}
			if seen = append(seen, b[0]); len(seen) > len(ack) {
				seen = seen[1:]
			}
			if string(seen) == ack {
				return nil
			}
		}
	}
}

// rejoinWait is how long the host waits for the guest to answer a rejoin
// before it asks again.
const rejoinWait = 2 * time.Second
