package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// DebianMinbase returns a Debian 12 minbase root filesystem, made once with
// debootstrap from the machine's own Debian mirror and cached between runs
// (test binaries that ask at once build it once). It needs root.
func DebianMinbase(t testing.TB) string {
	t.Helper()
	return debianRoot(t, "/var/cache/cordon-test/minbase-bookworm")
}

// DebianTools is DebianMinbase with what the test suites' workloads use
// (python3, pgrep, ip, curl): an image for tiers whose root is an image
// rather than the host's.
func DebianTools(t testing.TB) string {
	t.Helper()
	include := []string{"curl", "iproute2", "procps", "python3"}
	return debianRoot(t, "/var/cache/cordon-test/minbase-bookworm+"+strings.Join(include, "+"), include...)
}

func debianRoot(t testing.TB, minbaseDir string, include ...string) string {
	t.Helper()
	RequiresRoot(t)
	if _, err := os.Stat(filepath.Join(minbaseDir, "etc", "debian_version")); err == nil {
		return minbaseDir
	}
	Requires(t, "debootstrap")
	if err := os.MkdirAll(filepath.Dir(minbaseDir), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(minbaseDir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(minbaseDir, "etc", "debian_version")); err == nil {
		return minbaseDir // another test binary built it meanwhile
	}
	tmp := minbaseDir + ".tmp"
	os.RemoveAll(tmp)
	t.Logf("building a Debian minbase root filesystem in %s (about a minute, once)", minbaseDir)
	args := []string{"--variant=minbase"}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	out, err := exec.Command("debootstrap", append(args, "bookworm", tmp, "http://deb.debian.org/debian")...).CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("debootstrap: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, minbaseDir); err != nil {
		t.Fatal(err)
	}
	return minbaseDir
}
