package server_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	"golang.org/x/sys/unix"
)

// TestPersistentIdleStops: a persistent sandbox idle past its idle
// timeout is stopped (suspended, event "suspended" with reason idle), not
// destroyed, and a stopped one is never reaped for idleness; it starts
// again with its files. A sandbox without a persistent workspace is
// destroyed as before.
func TestPersistentIdleStops(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	_, evs := subscribe(t, c)
	sb := create(t, c, api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true}, IdleTimeoutSeconds: 1})
	plain := create(t, c, api.CreateRequest{IdleTimeoutSeconds: 1})
	if out := sh(t, c, sb.ID, "echo kept > f && cat f"); out != "kept\n" {
		t.Fatalf("write: %q", out)
	}
	// (In either order.)
	for stopped, destroyed := false, false; !stopped || !destroyed; {
		select {
		case ev := <-evs:
			switch {
			case ev.Type == api.EventSuspended && ev.Sandbox == sb.ID:
				if ev.Data["reason"] != "idle" {
					t.Fatalf("suspended for %v, want idle", ev.Data["reason"])
				}
				stopped = true
			case ev.Type == api.EventDestroyed && ev.Sandbox == sb.ID:
				t.Fatal("an idle persistent sandbox was destroyed")
			case ev.Type == api.EventDestroyed && ev.Sandbox == plain.ID:
				destroyed = true
			}
		case <-time.After(time.Minute):
			t.Fatalf("stopped %v, plain destroyed %v", stopped, destroyed)
		}
	}
	// Stopped, it stays (the reaper runs every 100 ms here).
	time.Sleep(1500 * time.Millisecond)
	got, err := c.Get(t.Context(), sb.ID)
	if err != nil || got.State != api.StateSuspended {
		t.Fatalf("a stopped persistent sandbox after its idle timeout: %+v %v", got, err)
	}
	if _, err := c.Resume(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, c, sb.ID, "cat f"); out != "kept\n" {
		t.Fatalf("after an idle stop and a start: %q", out)
	}
	// Asking for autostart without a persistent workspace is the caller's
	// mistake.
	_, err = c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Autostart: true}})
	wantCode(t, err, 400, api.CodeInvalid)
}

// TestPersistentDiskBounds: a persistent workspace's disk quota is at
// most the daemon's MaxDiskBytes, and never more than the file system the
// disks live on holds (a quota that could never be kept); either is the
// caller's 400 naming limits.diskBytes, and nothing is left behind.
func TestPersistentDiskBounds(t *testing.T) {
	d := newDaemon(t, 0)
	d.disks = testutil.XFSDir(t, 512<<20)
	d.start(t, func(c *server.Config) { c.Limits.MaxDiskBytes = 2 << 30 })
	c := d.local
	for _, size := range []int64{3 << 30, 1 << 30} {
		_, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true, Limits: api.Limits{DiskBytes: size}}})
		wantCode(t, err, 400, api.CodeInvalid)
		if !strings.Contains(err.Error(), "limits.diskBytes") {
			t.Errorf("a %d-byte disk refused without naming the field: %v", size, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(d.disks, "*")); len(left) > 0 {
		t.Errorf("refused creates left %v", left)
	}
	sb := create(t, c, api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true, Limits: api.Limits{DiskBytes: 64 << 20}}})
	if out := sh(t, c, sb.ID, "echo ok"); out != "ok\n" {
		t.Fatalf("a disk within both bounds: %q", out)
	}
}

// TestForkOnDiskIsCopyOnWrite: where the disks' file system has reflinks
// (XFS here, made on a loop device), a persistent sandbox's forks are
// copy-on-write copies of its disk: each has its files, each diverges,
// and 8 forks of 256 MiB of files take far less than 8 × 256 MiB of the
// host's disk. Where it has none (ext4), forks copy the files.
func TestForkOnDiskIsCopyOnWrite(t *testing.T) {
	testutil.Requires(t, "mkfs.xfs")
	d := newDaemon(t, 0)
	d.disks = testutil.XFSDir(t, 4<<30)
	d.start(t)
	c := d.local
	src := create(t, c, api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true, Limits: api.Limits{DiskBytes: 1 << 30}}})
	if out := sh(t, c, src.ID, "head -c 268435456 /dev/urandom > big && sha256sum big | cut -c1-16 && echo mine > who"); len(out) != 17 {
		t.Fatalf("write: %q", out)
	}
	sum := sh(t, c, src.ID, "sha256sum big | cut -c1-16")
	// What the source wrote reaches its image first, so that only the
	// forks are counted.
	sh(t, c, src.ID, "sync")
	unix.Sync()
	before := freeBytes(t, d.disks)
	forks, err := c.Fork(t.Context(), src.ID, api.ForkRequest{Count: 8})
	if err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	if used := before - freeBytes(t, d.disks); used > 64<<20 {
		t.Errorf("8 forks of a 256 MiB disk took %d MiB of the host's disk: not copy-on-write", used>>20)
	}
	for i, f := range forks {
		if !f.Spec.PersistentWorkspace || f.ID == src.ID {
			t.Fatalf("fork %d: %+v", i, f)
		}
		if out := sh(t, c, f.ID, "sha256sum big | cut -c1-16; cat who; echo fork"+strconv.Itoa(i)+" > who"); out != sum+"mine\n" {
			t.Fatalf("fork %d holds %q, want %q", i, out, sum+"mine\n")
		}
	}
	for i, f := range forks {
		if out := sh(t, c, f.ID, "cat who"); out != "fork"+strconv.Itoa(i)+"\n" {
			t.Fatalf("fork %d diverged to %q", i, out)
		}
	}
	if out := sh(t, c, src.ID, "cat who"); out != "mine\n" {
		t.Fatalf("the source after its forks wrote: %q", out)
	}
	// Stopped and started, a fork keeps what it wrote.
	f := forks[3].ID
	if _, err := c.Suspend(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resume(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, c, f, "cat who"); out != "fork3\n" {
		t.Fatalf("a fork after a stop and start: %q", out)
	}
}

func freeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// BenchmarkPersistent: a persistent sandbox's create (a new 4 GiB disk
// image, mkfs, mount) to its first command, its stop, and its start to
// its first command, on the process tier; and a fork of a 1 GiB disk
// (copy-on-write, XFS) beside cp and cp --reflink of an image of the same
// size on the same file system, in the same run.
func BenchmarkPersistent(b *testing.B) {
	d := newDaemon(b, 0)
	if _, err := exec.LookPath("mkfs.xfs"); err == nil {
		d.disks = testutil.XFSDir(b, 16<<30)
	}
	d.start(b, func(c *server.Config) { c.Limits.MaxSandboxesPerTenant = 500 })
	c := d.local
	ctx := b.Context()
	spec := api.Spec{PersistentWorkspace: true, Limits: api.Limits{DiskBytes: 4 << 30}}
	b.Run("create-to-first-exec", func(b *testing.B) {
		for range b.N {
			sb, err := c.Create(ctx, api.CreateRequest{Spec: spec})
			if err != nil {
				b.Fatal(err)
			}
			shb(b, c, sb.ID, "true")
			b.StopTimer()
			c.Delete(ctx, sb.ID)
			b.StartTimer()
		}
	})
	sb, err := c.Create(ctx, api.CreateRequest{Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	shb(b, c, sb.ID, "head -c 1073741824 /dev/urandom > big && sync")
	b.Run("stop", func(b *testing.B) {
		for range b.N {
			if _, err := c.Suspend(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := c.Resume(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("start-to-first-exec", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			if _, err := c.Suspend(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := c.Resume(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			shb(b, c, sb.ID, "true")
		}
	})
	b.Run("fork-1GiB", func(b *testing.B) {
		n := 0
		for range b.N {
			forks, err := c.Fork(ctx, sb.ID, api.ForkRequest{Count: 8})
			if err != nil {
				b.Fatal(err)
			}
			n += len(forks)
			b.StopTimer()
			for _, f := range forks {
				c.Delete(ctx, f.ID)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(n), "ms/fork")
	})
	img := filepath.Join(d.disks, "bench.img")
	if out, err := exec.Command("sh", "-c", "head -c 1073741824 /dev/urandom > "+img+" && sync").CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	defer os.Remove(img)
	for _, cp := range []struct{ name, flags string }{{"cp-image", "--reflink=never"}, {"cp-reflink-image", "--reflink=auto"}} {
		b.Run(cp.name, func(b *testing.B) {
			for range b.N {
				if out, err := exec.Command("sh", "-c", "cp "+cp.flags+" "+img+" "+img+".2 && sync && rm "+img+".2").CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
}

// TestPersistentDiskStore: the disk quotas of one tenant's persistent
// workspaces are bounded together (MaxDiskStorePerTenant), the default
// quota counted as what it is (and shown by GET); past it a create is 429
// naming the flag, and a delete makes room again.
func TestPersistentDiskStore(t *testing.T) {
	d := startDaemon(t, func(c *server.Config) { c.Limits.MaxDiskStorePerTenant = 100 << 20 })
	c := d.local
	persistent := api.CreateRequest{Spec: api.Spec{PersistentWorkspace: true}}
	first := create(t, c, persistent)
	if got, err := c.Get(t.Context(), first.ID); err != nil || got.Spec.Limits.DiskBytes != 64<<20 {
		t.Fatalf("a default disk's quota as GET shows it: %+v %v", got, err)
	}
	_, err := c.Create(t.Context(), persistent)
	wantCode(t, err, http.StatusTooManyRequests, api.CodeQuota)
	if !strings.Contains(err.Error(), "--max-disk-store") {
		t.Errorf("the refusal does not say how to allow more: %v", err)
	}
	create(t, c, api.CreateRequest{}) // memory, not a disk: not counted
	if err := c.Delete(t.Context(), first.ID); err != nil {
		t.Fatal(err)
	}
	create(t, c, persistent)
}
