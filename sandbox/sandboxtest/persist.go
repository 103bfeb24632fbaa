package sandboxtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// PersistentDisk checks persistent workspaces on a tier whose provider
// keeps its disks (sandbox.WithDisks): what the sandbox wrote to its
// workspace, home directory and /tmp, with their modes, survives a
// suspension and comes back under a new boot identity; the disk quota is
// ENOSPC to the workload, not the agent's end; the disk is nosuid and
// nodev inside; destroying the sandbox removes its disk.
func PersistentDisk(t *testing.T, b sandbox.Backend) {
	disks := t.TempDir()
	p := sandbox.NewProvider([]sandbox.Backend{b}, sandbox.WithDisks(disks, 0))
	t.Cleanup(func() {
		// (Registered first, so run after CreateWith's destroy.)
		if left, _ := filepath.Glob(filepath.Join(disks, "*")); len(left) > 0 {
			t.Errorf("left after destroy: %v", left)
		}
	})
	sb := CreateWith(t, p, sandbox.Spec{PersistentWorkspace: true, Limits: sandbox.Limits{DiskBytes: 64 << 20}})
	if !sb.CanSuspend() {
		t.Fatal("a sandbox on a disk cannot be suspended")
	}
	const write = `set -e
printf 'kept' > /workspace/a.txt && chmod 741 /workspace/a.txt
mkdir -p /workspace/dir/sub && ln -s ../a.txt /workspace/dir/link
printf 'home' > ~/h.txt
printf 'tmp' > /tmp/t.txt
echo ok`
	if out, res := Sh(t, sb, write); out != "ok\n" || res.ExitCode != 0 {
		t.Fatalf("write: %q %+v", out, res)
	}
	if _, err := sb.Start(t.Context(), sandbox.SessionRequest{Command: "sleep", Args: []string{"300"}}); err != nil {
		t.Fatal(err)
	}
	const read = `stat -c '%a %s' /workspace/a.txt; cat /workspace/a.txt ~/h.txt /tmp/t.txt; echo; readlink /workspace/dir/link; ps -eo comm | grep -c '^sleep$' || true`
	before, _ := Sh(t, sb, read)
	boot := sb.BootID()
	if err := sb.Suspend(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(t.Context(), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrSuspended) {
		t.Fatalf("exec while suspended: %v", err)
	}
	if err := sb.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	if sb.BootID() == boot {
		t.Errorf("resumed with the same boot id %s", boot)
	}
	after, _ := Sh(t, sb, read)
	// Files are kept; processes are not.
	if want := strings.Replace(before, "\n1\n", "\n0\n", 1); after != want || before != "741 4\nkepthometmp\n../a.txt\n1\n" {
		t.Fatalf("before suspending:\n%s\nafter resuming:\n%s", before, after)
	}
	// The egress boundary holds across instances: the new agent's way out
	// is the same proxy, under the same (deny-all) policy.
	if out := egressAnswer(t, sb); !strings.HasPrefix(out, "HTTP/1.1 403") {
		t.Fatalf("the egress proxy after resuming answered %q, want a refusal", out)
	}
	// The quota is the workload's ENOSPC; the agent serves on.
	out, res := Sh(t, sb, "dd if=/dev/zero of=/workspace/big bs=1M count=100 2>&1; df -k /workspace | tail -1")
	if res.ExitCode != 0 || !strings.Contains(out, "No space left") {
		t.Fatalf("filling a 64 MiB disk: %q %+v", out, res)
	}
	if out, _ := Sh(t, sb, "rm /workspace/big && echo freed"); out != "freed\n" {
		t.Fatalf("after a full disk: %q", out)
	}
	// An attacker's setuid file on the disk is inert: the disk is nosuid
	// wherever it is mounted (and nodev on the host; inside, the workload
	// cannot make a device node at all).
	out, _ = Sh(t, sb, "awk '$5==\"/workspace\" || $5==\"/tmp\" {print $5, $6}' /proc/self/mountinfo")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, "nosuid") {
			t.Errorf("a mount of the disk without nosuid: %q", line)
		}
	}
	if out, res := Sh(t, sb, "mknod /workspace/null c 1 3 2>&1"); res.ExitCode == 0 {
		t.Errorf("the workload made a device node on its disk: %q", out)
	}
	// The disk is a sparse file of the quota's size, kept where only the
	// host's owner reads it.
	imgs, _ := filepath.Glob(filepath.Join(disks, "*.img"))
	if len(imgs) != 1 {
		t.Fatalf("disks: %v", imgs)
	}
	if st, err := os.Stat(imgs[0]); err != nil || st.Size() != 64<<20 || st.Mode().Perm() != 0o600 {
		t.Fatalf("disk image: %v %v", st, err)
	}
}

// egressAnswer is the first line the egress proxy answers a CONNECT to a
// documentation address with, from inside sb.
func egressAnswer(t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	out, _ := Sh(t, sb, `exec python3 -c '
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT 203.0.113.7:443 HTTP/1.1\r\nHost: 203.0.113.7:443\r\n\r\n")
print(s.recv(200).decode(errors="replace").splitlines()[0])
'`)
	return out
}
