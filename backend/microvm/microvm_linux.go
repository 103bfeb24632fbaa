//go:build linux

// Package microvm is the microvm tier: each sandbox a virtual machine with
// a kernel of its own (QEMU's microvm machine, KVM where the host can run
// a stock guest, software emulation where it cannot), whose init is
// cordon-agent. The host reaches the agent over a virtio-serial port,
// many connections multiplexed on it; the guest has no network device,
// and its egress rides the same port to the host's egress proxy.
package microvm

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/vminit"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/internal/agentbin"
	"github.com/cordon-sandbox/cordon/internal/connq"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/internal/spawnthread"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/hashicorp/yamux"
)

// Name is the tier's name.
const Name = "microvm"

// ExtraDir is where a guest's test run (RunInGuest) finds its files.
const ExtraDir = vminit.ExtraDir

// DefaultImageDir is where scripts/microvm-image puts the default guest
// ("current" in it).
const DefaultImageDir = "/usr/local/lib/cordon/microvm"

// DefaultMemory is a VM's memory without a limit.
const DefaultMemory = 512 << 20

// Overhead is what a VM has beyond a sandbox's memory limit: its kernel,
// its init and agent, which the limit does not count, as it does not on
// other tiers (a guest of this kernel does not boot in much less).
const Overhead = 128 << 20

// Config configures the tier.
type Config struct {
	// StateDir holds each VM's directory (its sockets, console log) and
	// the initramfs built for each agent binary.
	StateDir string
	// ImageDir holds the guest (vmlinuz, modules/, root.ext4); default
	// $CORDON_MICROVM_DIR/current or DefaultImageDir/current.
	ImageDir string
	// AgentPath is cordon-agent (a static build); default agentbin.Find.
	AgentPath string
	// QEMU is qemu-system-x86_64's path; default from PATH.
	QEMU string
	// Accel is "kvm", "tcg" or "" (CORDON_MICROVM_ACCEL, else probed:
	// KVM when a guest boots under it, else software emulation).
	Accel string
	// Detached: VMs are not killed when this process dies (the daemon's);
	// a VM whose host side goes powers off by itself all the same.
	Detached bool
	// BootTimeout bounds a boot to the agent's port (default 2 minutes:
	// software emulation boots in seconds, and slower when loaded).
	BootTimeout time.Duration
	// ColdBoot turns snapshots off: every VM boots its kernel (by
	// default a VM is restored from a saved, booted guest of its size,
	// saved once; CORDON_MICROVM_SNAPSHOTS=0 turns them off too).
	ColdBoot bool
}

// Backend is the microvm tier.
type Backend struct {
	cfg       Config
	probeOnce sync.Once
	probeErr  error
	accel     string
	initMu    sync.Mutex
	// initIDs names the inputs of initPath, the initramfs last made or
	// found for no extra files (initramfs), under initMu.
	initIDs, initPath string
}

var (
	_ sandbox.Backend    = (*Backend)(nil)
	_ sandbox.EgressPort = (*instance)(nil)
	_ sandbox.Pauser     = (*instance)(nil)
)

// New returns the tier.
func New(cfg Config) *Backend {
	if cfg.StateDir == "" {
		cfg.StateDir = "/run/cordon/microvm"
	}
	if cfg.ImageDir == "" {
		dir := os.Getenv("CORDON_MICROVM_DIR")
		if dir == "" {
			dir = DefaultImageDir
		}
		cfg.ImageDir = filepath.Join(dir, "current")
	}
	if cfg.Accel == "" {
		cfg.Accel = os.Getenv("CORDON_MICROVM_ACCEL")
	}
	if os.Getenv("CORDON_MICROVM_SNAPSHOTS") == "0" {
		cfg.ColdBoot = true
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 2 * time.Minute
	}
	return &Backend{cfg: cfg}
}

func (b *Backend) Name() string { return Name }

// Capabilities: the VM's memory is the memory limit, its tmpfs the
// writable space, its VMM's cgroup's bandwidth the CPU limit, and a
// cgroup of the guest's the commands' pids limit. A root directory (an
// image's, which the provider unpacks) becomes the guest's root disk.
// Layout directories and a chosen user are not built yet, and are
// refused.
func (b *Backend) Capabilities() sandbox.Capabilities {
	root, _ := cpuRoot()
	return sandbox.Capabilities{Isolated: true, MemoryLimit: true, PidsLimit: true, CPULimit: root != "", DiskLimit: true, OwnMemory: true, Egress: true, RootFS: true, Disk: true}
}

// Accel is the acceleration VMs run under ("kvm" or "tcg"), once probed.
func (b *Backend) Accel() string {
	b.probe()
	return b.accel
}

// Probe checks for QEMU, the guest image and a static agent, and decides
// the acceleration.
func (b *Backend) Probe(ctx context.Context) error {
	b.probe()
	return b.probeErr
}

func (b *Backend) probe() {
	b.probeOnce.Do(func() {
		b.probeErr = b.check()
		if b.probeErr != nil {
			b.probeErr = fmt.Errorf("%w: %v", sandbox.ErrUnavailable, b.probeErr)
		}
	})
}

func (b *Backend) check() error {
	if os.Geteuid() != 0 {
		return errors.New("the microvm tier runs as root")
	}
	if b.cfg.QEMU == "" {
		p, err := exec.LookPath("qemu-system-x86_64")
		if err != nil {
			return errors.New("qemu-system-x86_64 is not installed (Debian: apt-get install qemu-system-x86)")
		}
		b.cfg.QEMU = p
	}
	for _, f := range []string{"vmlinuz", "root.ext4"} {
		if _, err := os.Stat(filepath.Join(b.cfg.ImageDir, f)); err != nil {
			return fmt.Errorf("no guest image in %s (scripts/microvm-image builds it): %v", b.cfg.ImageDir, err)
		}
	}
	agent, err := agentbin.Find(b.cfg.AgentPath)
	if err != nil {
		return err
	}
	if err := static(agent); err != nil {
		return err
	}
	b.cfg.AgentPath = agent
	switch b.cfg.Accel {
	case "kvm", "tcg":
		b.accel = b.cfg.Accel
	case "":
		b.accel = b.probeAccel()
	default:
		return fmt.Errorf("CORDON_MICROVM_ACCEL=%q: want kvm or tcg", b.cfg.Accel)
	}
	if err := os.MkdirAll(b.cfg.StateDir, 0o700); err != nil {
		return err
	}
	b.sweepStale()
	return nil
}

// static refuses an agent a guest cannot run from its initramfs (a cgo
// build, which needs the host's dynamic loader).
func static(agent string) error {
	f, err := elf.Open(agent)
	if err != nil {
		return fmt.Errorf("cordon-agent %s: %v", agent, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("cordon-agent %s is dynamically linked; a guest runs it before it has a root: build it with CGO_ENABLED=0", agent)
		}
	}
	return nil
}

// accelFile caches the probe's answer, keyed by what decides it.
func (b *Backend) accelFile() string {
	h := sha256.New()
	for _, p := range []string{b.cfg.QEMU, filepath.Join(b.cfg.ImageDir, "vmlinuz")} {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(h, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
		}
	}
	cpu, _ := os.ReadFile("/proc/cpuinfo")
	h.Write(cpu[:min(len(cpu), 4096)])
	return filepath.Join(b.cfg.StateDir, "accel-"+hex.EncodeToString(h.Sum(nil)[:8]))
}

// probeAccel is "kvm" where /dev/kvm boots the guest to its agent's port
// within a few seconds, else "tcg": a nested hypervisor may open /dev/kvm
// and then hang a stock kernel. The answer is kept beside the VMs.
func (b *Backend) probeAccel() string {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return "tcg"
	}
	if os.MkdirAll(b.cfg.StateDir, 0o700) == nil {
		if a, err := os.ReadFile(b.accelFile()); err == nil && (string(a) == "kvm" || string(a) == "tcg") {
			return string(a)
		}
	}
	accel := "tcg"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if vm, err := b.boot(ctx, bootOptions{accel: "kvm", mem: 256 << 20, probing: true}); err == nil {
		accel = "kvm"
		vm.kill()
	}
	_ = os.WriteFile(b.accelFile(), []byte(accel), 0o600)
	return accel
}

// Start boots a VM and hands its agent its configuration; it returns once
// the agent's port is multiplexed (the agent itself may still be
// starting).
func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	if b.probe(); b.probeErr != nil {
		return nil, b.probeErr
	}
	spec := l.Spec
	// The limit is the workload's: the guest out of memory, its kernel
	// kills a command (reported as an OOM kill), and the agent serves on.
	mem := int64(DefaultMemory)
	if spec.Limits.MemoryBytes > 0 {
		mem = spec.Limits.MemoryBytes + Overhead
	} else if l.Disk == "" {
		// The writable space is the guest's memory: without a limit the
		// guest has twice the space asked for, so that a full one is
		// ENOSPC, as on the other tiers, not the guest out of memory.
		mem = max(mem, 2*spec.Limits.DiskBytes)
	}
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	uid := baseline.DefaultUID
	cfg := vminit.Config{
		Token:  l.Token,
		Env:    host.AgentEnv(sandbox.Launch{Spec: spec, AgentEnv: l.AgentEnv}, uid, nil, host.AgentEnvOptions{TokenOnFD: true, OwnKernel: true}),
		Seed:   seed[:],
		TimeNs: time.Now().UnixNano(),
		UID:    uid,
		Pids:   spec.Limits.Pids,
	}
	if l.Disk == "" {
		// (On a disk, the disk's size is the bound.)
		cfg.ScratchBytes = spec.Limits.Disk()
	}
	// The token is the guest's to hand its agent, which serves on the
	// port, not on a socket.
	cfg.Env = slices.DeleteFunc(cfg.Env, func(kv string) bool {
		return strings.HasPrefix(kv, baseline.EnvPrefix+"TOKEN") || strings.HasPrefix(kv, baseline.EnvPrefix+"SOCKET=")
	})
	bctx, cancel := context.WithTimeout(ctx, b.cfg.BootTimeout)
	defer cancel()
	opts := bootOptions{accel: b.accel, cfg: cfg, mem: mem, cpus: spec.Limits.CPUs, root: filepath.Join(b.cfg.ImageDir, "root.ext4"), disk: l.Disk}
	if spec.RootFS != "" {
		var err error
		if opts.root, err = b.rootDisk(bctx, spec.RootFS); err != nil {
			return nil, fmt.Errorf("%w: the guest's root disk from %s: %v", sandbox.ErrUnavailable, spec.RootFS, err)
		}
	}
	if l.Disk != "" {
		// The guest binds its writable directories from the disk once it
		// is configured (vminit.Config.DiskBytes).
		st, err := os.Stat(l.Disk)
		if err != nil {
			return nil, fmt.Errorf("%w: the sandbox's disk: %v", sandbox.ErrUnavailable, err)
		}
		opts.cfg.DiskBytes = st.Size()
		if err := awaitUnlocked(bctx, l.Disk); err != nil {
			return nil, fmt.Errorf("%w: the sandbox's disk: %v", sandbox.ErrUnavailable, err)
		}
	}
	if !b.cfg.ColdBoot {
		// A saved guest of this size (with a disk attached, for a
		// persistent workspace's VM), made once; without one (it could
		// not be made), the VM boots cold and says why.
		var err error
		if opts.restore, err = b.saved(bctx, b.accel, mem, opts.root, l.Disk != ""); err != nil {
			opts.note = "booted cold: no saved guest: " + err.Error()
		}
	}
	return b.boot(bctx, opts)
}

// bootOptions say how boot starts a VM.
type bootOptions struct {
	accel string
	cfg   vminit.Config
	mem   int64
	// restore is a saved guest to start from, "" to boot.
	restore string
	// saving: the VM is booted to be saved (a monitor, no configuration).
	saving bool
	// probing: the VM only shows that it boots.
	probing bool
	// note joins the VM's diagnostics.
	note string
	// cpus, when set, is the VM's CPU bandwidth, in cores.
	cpus float64
	// extra are files the initramfs carries for a test run.
	extra []initramfsFile
	// root is the guest's root disk (default: the guest image's).
	root string
	// disk, when set, is a persistent workspace's image (Machine.Disk).
	disk string
}

// boot starts a VM (booted, or restored from a saved guest) and, unless
// it is probing or being saved, configures its agent.
func (b *Backend) boot(ctx context.Context, o bootOptions) (*instance, error) {
	accel, cfg, mem, probing := o.accel, o.cfg, o.mem, o.probing || o.saving
	initrd, err := b.initramfs(o.extra...)
	if err != nil {
		return nil, fmt.Errorf("%w: the guest's initramfs: %v", sandbox.ErrUnavailable, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	id := "vm-" + hex.EncodeToString(rnd[:])
	dir := filepath.Join(b.cfg.StateDir, id)
	// (monitor.sock is the longest of the VM's sockets' names.)
	if err := host.SocketPath(filepath.Join(dir, "monitor.sock")); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	vm := &instance{b: b, id: id, dir: dir, accel: accel, exited: make(chan struct{}), logs: logbuf.New(64 << 10), note: o.note, restored: o.restore != "", disk: o.disk != ""}
	fail := func(err error) (*instance, error) {
		if vm.proc != nil {
			_ = vm.proc.Kill()
			<-vm.exited
		}
		if d := vm.Diagnostics(); d != "" && !probing {
			err = fmt.Errorf("%w; the guest said: %s", err, lastLines(d, 8))
		}
		vm.kill()
		return nil, err
	}
	m := Machine{
		Kernel:    filepath.Join(b.cfg.ImageDir, "vmlinuz"),
		Initramfs: initrd,
		Cmdline:   "console=ttyS0 quiet panic=-1 rdinit=/init " + vminit.EnvMarker + "=1",
		RootDisk:  cmp.Or(o.root, filepath.Join(b.cfg.ImageDir, "root.ext4")),
		Disk:      o.disk,
		MemoryMiB: int(mem >> 20),
		VCPUs:     1,
		Port:      filepath.Join(dir, "port.sock"),
		Control:   filepath.Join(dir, "control.sock"),
		Console:   filepath.Join(dir, "console.log"),
		Accel:     accel,
		Restore:   o.restore,
	}
	if !probing || o.saving {
		// (The saved guest's state is taken through it; a sandbox's VM
		// is paused and resumed through it.)
		m.Monitor = filepath.Join(dir, "monitor.sock")
	}
	cmd, err := QEMU{Binary: b.cfg.QEMU}.Command(m)
	if err != nil {
		return fail(err)
	}
	// The VMM's own output goes to a file of the VM's, which a later
	// process that takes the VM back reads as well.
	out, err := os.OpenFile(filepath.Join(dir, vmmLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !b.cfg.Detached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// Forked from the thread that lives as long as this process: the
	// parent-death signal fires when the forking thread ends, which Go
	// does to a thread a goroutine locked and never unlocked.
	if spawnthread.Do(func() { err = cmd.Start() }); err != nil {
		return fail(fmt.Errorf("%w: start %s: %v", sandbox.ErrUnavailable, b.cfg.QEMU, err))
	}
	vm.proc, vm.pid, vm.start = cmd.Process, cmd.Process.Pid, procid.StartTime(cmd.Process.Pid)
	if err := writeVMMRecord(dir, vm.pid, vm.start); err != nil {
		_ = cmd.Process.Kill()
		go func() { _ = cmd.Wait(); close(vm.exited) }()
		return fail(err)
	}
	if o.cpus > 0 {
		if vm.cgroup, err = limitCPU(id, cmd.Process.Pid, o.cpus); err != nil {
			go func() { _ = cmd.Wait(); close(vm.exited) }()
			return fail(fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err))
		}
	}
	go func() {
		err := cmd.Wait()
		if err != nil {
			vm.ended.Store(err.Error())
		}
		close(vm.exited)
	}()
	port, err := vm.dialPort(ctx)
	if err != nil {
		return fail(err)
	}
	vm.port = port
	if !probing || o.saving {
		if vm.control, err = dialUnix(ctx, vm, filepath.Join(dir, "control.sock")); err != nil {
			return fail(err)
		}
	}
	// A restored guest said it was ready before it was saved: it waits
	// for its configuration.
	if o.restore == "" {
		if err := vm.awaitReady(ctx); err != nil {
			return fail(err)
		}
	}
	if probing {
		return vm, nil
	}
	if o.restore != "" && o.disk != "" {
		// Saved with a stand-in disk: the guest learns this one's size.
		if err := (QEMU{Binary: b.cfg.QEMU}).SetDiskSize(ctx, m.Monitor, cfg.DiskBytes); err != nil {
			return fail(fmt.Errorf("%w: the sandbox's disk: %v", sandbox.ErrUnavailable, err))
		}
	}
	line, err := json.Marshal(cfg)
	if err != nil {
		return fail(err)
	}
	if _, err := port.Write(append(line, '\n')); err != nil {
		return fail(fmt.Errorf("%w: configure the guest: %v", sandbox.ErrAgent, err))
	}
	if vm.session, err = yamux.Client(port, vminit.MuxConfig()); err != nil {
		return fail(err)
	}
	if err := vm.serve(); err != nil {
		return fail(err)
	}
	vm.ep = client.Endpoint{Network: "unix", Address: filepath.Join(dir, "agent.sock"), Token: cfg.Token}
	return vm, nil
}

// vmmLog is the VMM's own output, in its VM's directory.
const vmmLog = "vmm.log"

// instance is one VM.
type instance struct {
	b       *Backend
	id, dir string
	accel   string
	// proc is the VMM's process, pid its pid and start its start time
	// (procid), which name it for a later process.
	proc   interface{ Kill() error }
	pid    int
	start  string
	exited chan struct{}
	logs   *logbuf.Buffer // the host's own notes
	port   net.Conn
	// control is the host's side of the guest's control port; one
	// request at a time (controlMu).
	control   net.Conn
	controlMu sync.Mutex
	session   *yamux.Session
	agentLn   net.Listener
	egress    *connq.Listener
	ep        client.Endpoint
	// note says how the VM started where that is worth saying;
	// restored: it started from a saved guest.
	note     string
	restored bool
	// disk: a persistent workspace's disk is attached, which the guest
	// must flush before it goes (Destroy).
	disk   bool
	paused atomic.Bool
	cgroup string // limitCPU's, if any
	// ended says how the VMM ended, if it did on its own terms or was
	// killed from outside.
	ended atomic.Value
	// kept is the guest's console and the VMM's output as Destroy kept
	// them before it removed the VM's directory ([2]string, outputs).
	kept atomic.Value

	mu   sync.Mutex
	gone bool
}

// dialPort connects to the VMM's side of the agent port, once the VMM
// has made it.
func (vm *instance) dialPort(ctx context.Context) (net.Conn, error) {
	return dialUnix(ctx, vm, filepath.Join(vm.dir, "port.sock"))
}

// dialUnix connects to a socket of vm's VMM at path, once the VMM has
// made it.
func dialUnix(ctx context.Context, vm *instance, path string) (net.Conn, error) {
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c, nil
		}
		select {
		case <-vm.exited:
			return nil, fmt.Errorf("%w: the VMM exited before it listened: %s", sandbox.ErrUnavailable, vm.vmmOutput())
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: the VMM did not listen: %v", sandbox.ErrUnavailable, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// awaitReady reads the guest's ready line, held to ctx.
func (vm *instance) awaitReady(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, len(vminit.Ready))
		_, err := io.ReadFull(vm.port, buf)
		if err == nil && string(buf) != vminit.Ready {
			err = fmt.Errorf("the guest said %q", buf)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%w: the guest's port: %v", sandbox.ErrAgent, err)
		}
		return nil
	case <-vm.exited:
		return fmt.Errorf("%w: the VM stopped while it booted", sandbox.ErrAgent)
	case <-ctx.Done():
		vm.port.Close()
		return fmt.Errorf("%w: the guest did not come up (%s): %v", sandbox.ErrAgent, vm.accel, ctx.Err())
	}
}

// serve relays the host's connections to the agent as streams on the
// port, and takes the guest's streams as its egress.
func (vm *instance) serve() error {
	ln, err := net.Listen("unix", filepath.Join(vm.dir, "agent.sock"))
	if err != nil {
		return err
	}
	vm.agentLn = ln
	vm.egress = connq.New(ln.Addr())
	go vminit.ServeStreams(ln, vm.session)
	go func() {
		for {
			s, err := vm.session.Accept()
			if err != nil {
				vm.egress.Close()
				return
			}
			if !vm.egress.Push(s) {
				return
			}
		}
	}()
	return nil
}

// CanPause: every sandbox's VM has a monitor.
func (vm *instance) CanPause() bool { return true }

// Pause stops the VM's vCPUs: nothing in it runs, its agent included,
// until Resume.
func (vm *instance) Pause(ctx context.Context) error {
	err := QEMU{Binary: vm.b.cfg.QEMU}.Pause(ctx, filepath.Join(vm.dir, "monitor.sock"))
	if err == nil {
		vm.paused.Store(true)
	}
	return err
}

// Resume runs a paused VM's vCPUs again.
func (vm *instance) Resume(ctx context.Context) error {
	err := QEMU{Binary: vm.b.cfg.QEMU}.Resume(ctx, filepath.Join(vm.dir, "monitor.sock"))
	if err == nil {
		vm.paused.Store(false)
	}
	return err
}

func (vm *instance) Endpoint() client.Endpoint    { return vm.ep }
func (vm *instance) Exited() <-chan struct{}      { return vm.exited }
func (vm *instance) EgressListener() net.Listener { return vm.egress }

// Destroy kills the VMM (a VM with a disk is first asked to flush it and
// power off, for a bounded time) and removes the VM's directory once the
// VMM is confirmed gone.
func (vm *instance) Destroy(ctx context.Context) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.gone {
		return nil
	}
	if vm.session != nil {
		vm.session.Close()
	}
	if vm.agentLn != nil {
		vm.agentLn.Close()
	}
	if vm.egress != nil {
		vm.egress.Close()
	}
	if vm.port != nil {
		vm.port.Close()
	}
	if vm.proc != nil {
		// Nothing of a guest without a disk outlives it (its writable
		// space is memory): its VMM is killed rather than asked. A guest
		// with one is asked to flush it and power off, and given a
		// bounded time for that, running.
		if vm.disk && !vm.awaitPowerOff(ctx) {
			vm.logs.Write([]byte("cordon: the guest did not power off within " + powerOffGrace.String() + "; its disk holds what a crash would leave\n"))
		}
		_ = vm.proc.Kill()
		select {
		case <-vm.exited:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%w: the VMM (pid %d) outlived SIGKILL", sandbox.ErrTeardown, vm.pid)
		}
	}
	if vm.control != nil {
		vm.control.Close()
	}
	if err := removeCgroup(vm.cgroup); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
	}
	console, vmm := vm.outputs()
	vm.kept.Store([2]string{console, vmm})
	if err := os.RemoveAll(vm.dir); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrTeardown, err)
	}
	vm.gone = true
	return nil
}

// kill ends a VM that never became a sandbox.
func (vm *instance) kill() {
	if vm.proc != nil {
		_ = vm.proc.Kill()
		<-vm.exited
	}
	if vm.port != nil {
		vm.port.Close()
	}
	if vm.control != nil {
		vm.control.Close()
	}
	_ = removeCgroup(vm.cgroup)
	os.RemoveAll(vm.dir)
}
