package microvm

// What a VM says of itself: how VMs run here, the guest's console and the
// VMM's output (kept past the VM's teardown), and the guest's state
// written on the host's ask before a teardown past a deadline.

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/vminit"
)

// Detail says how VMs run here, for a listing of tiers.
func (b *Backend) Detail() string {
	if b.probe(); b.probeErr != nil {
		return ""
	}
	return "qemu microvm, " + accelWords(b.accel)
}

func accelWords(accel string) string {
	if accel == "kvm" {
		return "KVM"
	}
	return "TCG (software emulation: /dev/kvm cannot run a stock guest here)"
}

// Diagnostics is how the VM runs, the guest's console and the VMM's own
// output (once the VM is destroyed, what was kept of them).
func (vm *instance) Diagnostics() string {
	console, vmm := vm.outputs()
	how := "booted"
	if vm.restored {
		how = "restored from a saved guest"
	}
	out := "microvm: qemu microvm, " + accelWords(vm.accel) + ", " + how + "\n"
	if vm.note != "" {
		out += vm.note + "\n"
	}
	out += console
	if e, _ := vm.ended.Load().(string); e != "" {
		out += "\nthe VMM ended: " + e
	}
	if vmm != "" {
		out += "\n" + vmm
	}
	if l := strings.TrimSpace(vm.logs.String()); l != "" {
		out += "\n" + l
	}
	return out
}

// outputs are the end of the guest's console (64 KiB) and of the VMM's
// own output (16 KiB): read from the VM's directory, or, once Destroy has
// removed it, as Destroy kept them.
func (vm *instance) outputs() (console, vmm string) {
	if k, ok := vm.kept.Load().([2]string); ok {
		return k[0], k[1]
	}
	return tail(filepath.Join(vm.dir, "console.log"), 64<<10), vm.vmmOutput()
}

// vmmOutput is the end of the VMM's own output.
func (vm *instance) vmmOutput() string {
	return tail(filepath.Join(vm.dir, vmmLog), 16<<10)
}

// tail is the last n bytes of the file at path, trimmed.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(b))
}

// Dump has the guest write what its processes are doing to its console
// (vminit.Dump: each process's state, the kernel stacks of those that
// cannot be woken, the agent's goroutines, after which the agent ends),
// for a host about to tear down a guest whose agent stopped answering:
// the guest's last words then stay in the sandbox's diagnostics. It waits
// for the console to settle, for at most a few seconds in all.
func (vm *instance) Dump(ctx context.Context) {
	if vm.control == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := vm.ask(ctx, vminit.Dump); err != nil {
		vm.logs.Write([]byte("cordon: the guest's init did not write its state: " + err.Error() + "\n"))
		return
	}
	console := filepath.Join(vm.dir, "console.log")
	var last int64 = -1
	for {
		st, err := os.Stat(console)
		if err != nil || st.Size() == last {
			return
		}
		last = st.Size()
		select {
		case <-ctx.Done():
			return
		case <-vm.exited:
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
