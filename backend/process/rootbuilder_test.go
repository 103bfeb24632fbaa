//go:build linux

package process_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// TestRootBuilder: a sandbox created cold has its root built by its init's
// helper while the init starts; the root is the one the init builds
// itself (an init started without clonexec), mount for mount; and a
// failing step of the helper fails the create, named.
func TestRootBuilder(t *testing.T) {
	bb := testutil.Requires(t, "busybox")[0]
	b := backend(t)
	goPath := backend(t)
	process.NoClone(goPath)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	outputs, uploads := filepath.Join(base, "out"), filepath.Join(base, "up")
	os.Mkdir(outputs, 0o755)
	os.Chown(outputs, 1234, 1234) // written as root's, it would be refused
	os.Mkdir(uploads, 0o755)
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}, Layout: sandbox.Layout{Outputs: outputs, Uploads: uploads}}
	// The sandbox's own directory, and its host ids (each sandbox has a
	// range of its own), named alike.
	sbid := regexp.MustCompile(`sb-[0-9a-f]+|(uid|gid)=[0-9]+`)
	mounts := func(b *process.Backend) []string {
		before := process.HelperRoots(b)
		sb := createOn(t, b, spec)
		if built := process.HelperRoots(b) - before; built != map[bool]int64{true: 0, false: 1}[b == goPath] {
			t.Fatalf("%d roots built by a helper", built)
		}
		// The namespaces' set-up, made with the root: the hostname, lo up
		// (IFF_UP|IFF_LOOPBACK|IFF_RUNNING), nested user namespaces refused.
		out, errOut, res := sh(t, sb, `hostname; cat /proc/sys/user/max_user_namespaces; echo 1 > /proc/sys/user/max_user_namespaces || echo read-only
python3 -c 'import fcntl, socket, struct; s = socket.socket(); print(hex(struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0))[:18])[1]))'`)
		if out != "cordon\n0\nread-only\n0x49\n" {
			t.Errorf("namespaces: %q %q", out, errOut)
		}
		out, errOut, res = sh(t, sb, "cat /proc/self/mountinfo")
		if res.ExitCode != 0 {
			t.Fatalf("mountinfo: %s", errOut)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			// Without the mount's ids and device, which differ between any
			// two sandboxes, and with the sandbox's own directory named alike.
			f := strings.Fields(l)
			lines = append(lines, sbid.ReplaceAllString(strings.Join(f[3:], " "), "X"))
		}
		return lines
	}
	helper, init := mounts(b), mounts(goPath)
	if len(helper) < 40 || !slices.Equal(helper, init) {
		t.Errorf("the helper's root differs from the init's:\nhelper:\n%s\ninit:\n%s", strings.Join(helper, "\n"), strings.Join(init, "\n"))
		for i := range min(len(helper), len(init)) {
			if helper[i] != init[i] {
				t.Errorf("first difference, line %d:\n%s\n%s", i, helper[i], init[i])
				break
			}
		}
	}

	// A root whose /workspace is a file: the scratch directory cannot be
	// bound there.
	root := t.TempDir()
	// The sandbox's init reads the root as an unprivileged mapped user.
	os.Chmod(root, 0o755)
	os.Chmod(filepath.Dir(root), 0o755)
	os.Mkdir(filepath.Join(root, "bin"), 0o755)
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "sh"), data, 0o755)
	os.WriteFile(filepath.Join(root, "workspace"), nil, 0o644)
	before := process.HelperRoots(b)
	dirs := func() (n int) {
		ents, _ := os.ReadDir(stateDir(t))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "sb-") {
				n++
			}
		}
		return n
	}
	dirsBefore := dirs()
	_, err = sandbox.NewProvider([]sandbox.Backend{b}).Create(t.Context(), sandbox.Spec{RootFS: root})
	if err == nil || !strings.Contains(err.Error(), "building the root: mount ") || !strings.Contains(err.Error(), "/workspace") || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("create on a root whose /workspace is a file: %v", err)
	}
	if process.HelperRoots(b) != before+1 {
		t.Error("that root was not a helper's")
	}
	// The failed create left nothing: its directory (and with it the
	// record of its init) is gone.
	if n := dirs(); n != dirsBefore {
		t.Errorf("%d sandbox directories after the failed create, %d before", n, dirsBefore)
	}
}
