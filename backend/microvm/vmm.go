package microvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/vminit"
)

// PortName is the guest's agent port.
const PortName = vminit.PortName

// Machine is one microVM as a VMM is asked to run it: what boots, with
// what, and how the host reaches it. It names no VMM's own options, so
// that QEMU, Firecracker and Cloud Hypervisor drivers all take it.
type Machine struct {
	// Kernel is the guest kernel (an uncompressed or bzImage vmlinuz),
	// booted directly: no firmware, no boot loader.
	Kernel string
	// Initramfs holds the guest's init (cordon-agent) and the modules it
	// loads; Cmdline is the kernel's command line.
	Initramfs string
	Cmdline   string
	// RootDisk is the read-only root file system's image (raw ext4); the
	// guest finds it by its serial, vminit.RootSerial.
	RootDisk string
	// Disk, when set, is a persistent workspace's image (raw ext4),
	// attached read-write with serial vminit.DiskSerial.
	Disk string
	// MemoryMiB and VCPUs size the VM.
	MemoryMiB int
	VCPUs     int
	// Port is a unix socket path the VMM listens on for the host's side
	// of the guest's agent port (a virtio-serial port named PortName, or
	// a vsock port where a driver uses vsock).
	Port string
	// Control is a unix socket path the VMM listens on for the host's
	// side of the guest's control port (vminit.ControlPortName), by which
	// the host asks the guest to flush its disks and power off.
	Control string
	// Console is a file the guest's console is written to.
	Console string
	// Accel is "kvm" or "tcg" (software emulation).
	Accel string
	// Monitor, when set, is a unix socket path the VMM serves its
	// monitor on (to save the VM's state).
	Monitor string
	// Restore, when set, is a saved state (Save) the VM starts from
	// instead of booting; the rest of the Machine must be as it was saved.
	Restore string
}

// VMM is a virtual machine monitor driver: the command that runs one
// Machine until the guest powers off.
type VMM interface {
	// Name is the driver's name ("qemu").
	Name() string
	// Command is the process that runs m; it exits when the guest powers
	// off or is killed.
	Command(m Machine) (*exec.Cmd, error)
	// Save writes the running VM's state, through its monitor, to path,
	// and stops it.
	Save(ctx context.Context, monitor, path string) error
	// Pause stops the VM's vCPUs in place, through its monitor; Resume
	// runs them again.
	Pause(ctx context.Context, monitor string) error
	Resume(ctx context.Context, monitor string) error
	// SetDiskSize tells a VM restored with another image as its Disk than
	// it was saved with that image's size, once the VM runs: the guest is
	// told its disk changed (a virtio config change).
	SetDiskSize(ctx context.Context, monitor string, bytes int64) error
}

// QEMU drives qemu-system-x86_64's microvm machine: virtio-mmio devices,
// direct kernel boot, no firmware, no network device.
type QEMU struct {
	// Binary is qemu-system-x86_64's path.
	Binary string
}

func (q QEMU) Name() string { return "qemu" }

// tcgCmdline is what the kernel needs under software emulation on the
// microvm machine, which has no PIT to calibrate against: without it the
// guest hangs in timer calibration (shared/MACHINE.md).
const tcgCmdline = "lpj=4000000 no_timer_check tsc_early_khz=2000000 tsc=reliable"

func (q QEMU) Command(m Machine) (*exec.Cmd, error) {
	if m.MemoryMiB <= 0 || m.VCPUs <= 0 {
		return nil, fmt.Errorf("a machine of %d MiB and %d vCPUs", m.MemoryMiB, m.VCPUs)
	}
	if m.Port == "" || m.Control == "" {
		return nil, errors.New("a machine without its agent's or its control port")
	}
	for _, p := range []string{m.Kernel, m.Initramfs, m.RootDisk, m.Disk, m.Port, m.Control, m.Console, m.Monitor, m.Restore} {
		// QEMU's option syntax splits on commas.
		if strings.ContainsAny(p, ",\n") {
			return nil, fmt.Errorf("a path QEMU cannot take: %q", p)
		}
	}
	cpu, accel := "max", "tcg,thread=single"
	cmdline := m.Cmdline
	if m.Accel == "kvm" {
		cpu, accel = "host", "kvm"
	} else {
		cmdline += " " + tcgCmdline
	}
	args := []string{
		"-M", "microvm,x-option-roms=off,rtc=on",
		"-accel", accel,
		"-cpu", cpu,
		"-m", strconv.Itoa(m.MemoryMiB),
		"-smp", strconv.Itoa(m.VCPUs),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-display", "none",
		"-kernel", m.Kernel,
		"-initrd", m.Initramfs,
		"-append", cmdline,
		"-serial", "file:" + m.Console,
		"-drive", "id=root,file=" + m.RootDisk + ",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=root,serial=" + vminit.RootSerial,
		"-device", "virtio-serial-device,max_ports=3",
		"-chardev", "socket,id=agent,path=" + m.Port + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=" + PortName,
		"-chardev", "socket,id=control,path=" + m.Control + ",server=on,wait=off",
		"-device", "virtserialport,chardev=control,name=" + vminit.ControlPortName,
	}
	if m.Disk != "" {
		args = append(args,
			"-drive", "id=disk,file="+m.Disk+",format=raw,if=none",
			"-device", "virtio-blk-device,drive=disk,serial="+vminit.DiskSerial)
	}
	if m.Monitor != "" {
		args = append(args, "-monitor", "unix:"+m.Monitor+",server=on,wait=off")
	}
	if m.Restore != "" {
		// (QEMU 7.2 has no file: migration; cat reads the file.)
		if strings.ContainsAny(m.Restore, "'\"\\ $`") {
			return nil, fmt.Errorf("a saved state's path QEMU's shell cannot take: %q", m.Restore)
		}
		args = append(args, "-incoming", "exec:cat "+m.Restore)
	}
	return exec.Command(q.Binary, args...), nil
}

// monitor is a connection to QEMU's human monitor.
type monitor struct {
	c net.Conn
	r *bufio.Reader
}

// openMonitor connects to the monitor at path and reads its greeting.
// A VMM just started may not have made it yet: it is dialled again
// until ctx ends.
func openMonitor(ctx context.Context, path string) (*monitor, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	for err != nil && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
		c, err = d.DialContext(ctx, "unix", path)
	}
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	m := &monitor{c: c, r: bufio.NewReader(c)}
	if _, err := m.prompt(); err != nil {
		c.Close()
		return nil, fmt.Errorf("the monitor: %w", err)
	}
	return m, nil
}

// prompt reads up to the monitor's next prompt.
func (m *monitor) prompt() (string, error) {
	var out strings.Builder
	for !strings.HasSuffix(out.String(), "(qemu) ") {
		b, err := m.r.ReadByte()
		if err != nil {
			return out.String(), err
		}
		out.WriteByte(b)
	}
	return out.String(), nil
}

// do runs one command and returns what it printed.
func (m *monitor) do(cmd string) (string, error) {
	if _, err := io.WriteString(m.c, cmd+"\n"); err != nil {
		return "", err
	}
	return m.prompt()
}

func (q QEMU) Pause(ctx context.Context, path string) error {
	return q.run(ctx, path, "stop", "paused")
}
func (q QEMU) Resume(ctx context.Context, path string) error {
	return q.run(ctx, path, "cont", "running")
}

func (q QEMU) SetDiskSize(ctx context.Context, path string, bytes int64) error {
	m, err := openMonitor(ctx, path)
	if err != nil {
		return err
	}
	defer m.c.Close()
	for {
		out, err := m.do("info status")
		if err != nil {
			return err
		}
		if strings.Contains(out, "status: running") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the restored VM did not run: %s (%w)", strings.TrimSpace(out), ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	// (A raw image's size is its file's: this resizes it to what it is.)
	out, err := m.do(fmt.Sprintf("block_resize disk %dB", bytes))
	if err != nil {
		return err
	}
	if _, msg, failed := strings.Cut(out, "Error: "); failed {
		return fmt.Errorf("block_resize: %s", strings.TrimSuffix(strings.TrimSpace(msg), "(qemu)"))
	}
	return nil
}

// run runs cmd, then confirms the VM's status is want.
func (q QEMU) run(ctx context.Context, path, cmd, want string) error {
	m, err := openMonitor(ctx, path)
	if err != nil {
		return err
	}
	defer m.c.Close()
	if _, err := m.do(cmd); err != nil {
		return err
	}
	out, err := m.do("info status")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "status: "+want) {
		return fmt.Errorf("after %s the VM is not %s: %s", cmd, want, strings.TrimSpace(out))
	}
	return nil
}

// Save migrates the VM's state into path through QEMU's human monitor,
// waits for the migration to complete, and quits the VM.
func (q QEMU) Save(ctx context.Context, path, to string) error {
	if strings.ContainsAny(to, "'\"\\ $`") {
		return fmt.Errorf("a path QEMU's shell cannot take: %q", to)
	}
	m, err := openMonitor(ctx, path)
	if err != nil {
		return err
	}
	c, r := m.c, m.r
	defer c.Close()
	prompt := m.prompt
	if _, err := m.do(fmt.Sprintf("migrate \"exec:cat > %s\"", to)); err != nil {
		return err
	}
	for {
		if _, err := io.WriteString(c, "info migrate\n"); err != nil {
			return err
		}
		out, err := prompt()
		if err != nil {
			return fmt.Errorf("%w (monitor said %q)", err, out)
		}
		switch {
		case strings.Contains(out, "Migration status: completed"):
			// The monitor closes as QEMU exits.
			if _, err := io.WriteString(c, "quit\n"); err != nil {
				return err
			}
			_, err := io.Copy(io.Discard, r)
			return err
		case strings.Contains(out, "Migration status: failed"), strings.Contains(out, "Migration status: cancelled"):
			return fmt.Errorf("saving the VM: %s", strings.TrimSpace(out))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
