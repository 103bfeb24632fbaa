package microvm_test

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/vminit"
	"github.com/cordon-sandbox/cordon/backend/microvm"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
)

// BenchmarkMicroVM: a sandbox's cold boot to its first command's result,
// its restore from the saved guest to the first result, a warm exec (and
// the guest kernel's own spawn of true, its floor), an idle VM's memory
// (the VMM's resident set), and a persistent workspace's create, stop and
// start; beside them, in the same
// run, QEMU itself restoring the same saved guest to a running VM (its
// monitor says so), and booting the same kernel to an init that powers
// off. Under TCG here (software emulation): figures are TCG's.
func BenchmarkMicroVM(b *testing.B) {
	cold := microvm.New(microvm.Config{AgentPath: testutil.BuildAgent(b), StateDir: stateDir, ColdBoot: true})
	warm := backend(b)
	if err := cold.Probe(b.Context()); err != nil {
		b.Fatal(err)
	}
	firstResult := func(b *testing.B, be sandbox.Backend) {
		p := sandbox.NewProvider([]sandbox.Backend{be})
		var ds []time.Duration
		for b.Loop() {
			t0 := time.Now()
			sb, err := p.Create(b.Context(), sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Exec(b.Context(), "true", sandbox.ExecOptions{}); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
			b.StopTimer()
			sb.Destroy(b.Context())
			b.StartTimer()
		}
		testutil.ReportPercentiles(b, "", ds)
	}
	b.Run("cold-boot-to-first-result", func(b *testing.B) { firstResult(b, cold) })
	b.Run("restore-to-first-result", func(b *testing.B) { firstResult(b, warm) })
	p := sandbox.NewProvider([]sandbox.Backend{warm})
	sb, err := p.Create(b.Context(), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(b.Context())
	// The saved guest sb was restored from (the only one yet), and its
	// initramfs, which QEMU restores bare below.
	saved, _ := filepath.Glob(filepath.Join(stateDir, "saved-*.vmstate"))
	initrd, _ := filepath.Glob(filepath.Join(stateDir, "initramfs-*.cpio"))
	if len(saved) != 1 || len(initrd) != 1 {
		b.Fatalf("saved guests %v and initramfs %v: want one of each to restore bare", saved, initrd)
	}
	b.Run("warm-exec", func(b *testing.B) { sandboxtest.BenchExecIn(b, sb) })
	// The floor under a warm exec: the guest kernel's own fork and exec
	// of true, timed inside a bare guest (root, no agent, no filter).
	b.Run("bare-guest-spawn", func(b *testing.B) {
		for b.Loop() {
			var out strings.Builder
			// (A shell's loop: each round is one fork and exec of true.)
			code, err := warm.RunInGuest(b.Context(), nil, []string{"/bin/sh", "-c",
				`t=$(date +%s%N); i=0; while [ $i -lt 30 ]; do /bin/true; i=$((i+1)); done; echo $(( ($(date +%s%N) - t) / 30000 ))`}, nil, microvm.DefaultMemory, &out)
			if err != nil || code != 0 {
				b.Fatalf("%d %v %s", code, err, out.String())
			}
			us, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
			if err != nil {
				b.Fatalf("%q: %v", out.String(), err)
			}
			b.ReportMetric(us/1000, "mean-ms")
		}
	})
	// A persistent workspace's VM: created on a new disk (it boots),
	// stopped (flushed, powered off), started again to a first result.
	b.Run("persistent", func(b *testing.B) {
		p := sandbox.NewProvider([]sandbox.Backend{warm}, sandbox.WithDisks(b.TempDir(), 0))
		var create, stop, start []time.Duration
		for b.Loop() {
			t0 := time.Now()
			sb, err := p.Create(b.Context(), sandbox.Spec{PersistentWorkspace: true, Limits: sandbox.Limits{DiskBytes: 1 << 30}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Exec(b.Context(), "true", sandbox.ExecOptions{}); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := sb.Suspend(b.Context()); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if err := sb.Resume(b.Context()); err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Exec(b.Context(), "true", sandbox.ExecOptions{}); err != nil {
				b.Fatal(err)
			}
			create, stop, start = append(create, t1.Sub(t0)), append(stop, t2.Sub(t1)), append(start, time.Since(t2))
			b.StopTimer()
			sb.Destroy(b.Context())
			b.StartTimer()
		}
		testutil.ReportPercentiles(b, "create", create)
		testutil.ReportPercentiles(b, "stop", stop)
		testutil.ReportPercentiles(b, "start", start)
	})
	b.Run("idle-vm-memory", func(b *testing.B) {
		time.Sleep(2 * time.Second)
		pid := vmmPid(b, sb.Client().Endpoint().Address)
		for b.Loop() {
		}
		status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				b.ReportMetric(kb/1024, "MiB-rss")
			}
		}
	})
	qemu, _ := exec.LookPath("qemu-system-x86_64")
	img := filepath.Join(microvm.DefaultImageDir, "current")
	machine := func(dir string) microvm.Machine {
		return microvm.Machine{Kernel: filepath.Join(img, "vmlinuz"), Initramfs: initrd[0], Cmdline: "console=ttyS0 quiet panic=-1 rdinit=/init cordon_vm=1",
			RootDisk: filepath.Join(img, "root.ext4"), MemoryMiB: microvm.DefaultMemory >> 20, VCPUs: 1, Port: filepath.Join(dir, "port.sock"), Control: filepath.Join(dir, "control.sock"),
			Console: filepath.Join(dir, "console.log"), Accel: warm.Accel(), Monitor: filepath.Join(dir, "monitor.sock")}
	}
	// restore starts QEMU restoring the saved guest bare, and when.
	restore := func(b *testing.B) (microvm.Machine, *exec.Cmd, time.Time) {
		m := machine(b.TempDir())
		m.Restore = saved[0]
		cmd, _ := microvm.QEMU{Binary: qemu}.Command(m)
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		return m, cmd, t0
	}
	b.Run("bare-qemu-restore-to-running", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			m, cmd, t0 := restore(b)
			waitRunning(b, m.Monitor)
			ds = append(ds, time.Since(t0))
			cmd.Process.Kill()
			cmd.Wait()
		}
		testutil.ReportPercentiles(b, "", ds)
	})
	// QEMU restoring the same saved guest to a first command's result
	// without the agent: the guest's init, configured as a test bed, runs
	// true itself and says its status on the port.
	b.Run("bare-qemu-restore-to-first-result", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			m, cmd, t0 := restore(b)
			var c net.Conn
			for c == nil {
				c, _ = net.Dial("unix", m.Port)
				time.Sleep(time.Millisecond)
			}
			line, _ := json.Marshal(vminit.Config{Token: "bare", UID: 1000, Seed: make([]byte, 32), TimeNs: time.Now().UnixNano(), Run: []string{"/bin/true"}})
			if _, err := c.Write(append(line, '\n')); err != nil {
				b.Fatal(err)
			}
			r := bufio.NewReader(c)
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					b.Fatalf("%v: %q", err, l)
				}
				if strings.HasPrefix(l, strings.TrimPrefix(vminit.ExitMarker, "\n")) {
					break
				}
			}
			ds = append(ds, time.Since(t0))
			c.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
		testutil.ReportPercentiles(b, "", ds)
	})
	b.Run("bare-qemu-boot-to-init", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			dir := b.TempDir()
			m := machine(dir)
			m.Monitor = ""
			cmd, _ := microvm.QEMU{Binary: qemu}.Command(m)
			t0 := time.Now()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			// The init's first words on the port: the guest is up.
			var c net.Conn
			for c == nil {
				c, _ = net.Dial("unix", m.Port)
				time.Sleep(2 * time.Millisecond)
			}
			buf := make([]byte, 8)
			if _, err := c.Read(buf); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
			c.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
		testutil.ReportPercentiles(b, "", ds)
	})
}

// waitRunning polls QEMU's monitor until the VM runs.
func waitRunning(b *testing.B, monitor string) {
	var c net.Conn
	for c == nil {
		c, _ = net.Dial("unix", monitor)
		time.Sleep(time.Millisecond)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	read := func() string {
		var out strings.Builder
		for !strings.HasSuffix(out.String(), "(qemu) ") {
			ch, err := r.ReadByte()
			if err != nil {
				b.Fatal(err)
			}
			out.WriteByte(ch)
		}
		return out.String()
	}
	read()
	for {
		c.Write([]byte("info status\n"))
		if strings.Contains(read(), "status: running") {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
