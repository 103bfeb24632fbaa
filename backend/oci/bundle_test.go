//go:build linux

package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fmt"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// bundleBaseline is the security-relevant part of a bundle.
type bundleBaseline struct {
	ReadonlyRoot    bool
	User            specs.User
	Capabilities    *specs.LinuxCapabilities
	NoNewPrivileges bool
	Namespaces      []specs.LinuxNamespace
	MaskedPaths     []string
	ReadonlyPaths   []string
	Seccomp         *specs.LinuxSeccomp
	Resources       *specs.LinuxResources
	// Confinement is the agent's Landlock settings for its commands.
	Confinement []string
	// Mounts other than the read-only binds of the root's directories,
	// which are checked by rule.
	Mounts []specs.Mount
}

// TestBundleBaseline pins the bundle's security-relevant fields to
// testdata/baseline.json, so a change to the baseline is a deliberate one
// (CORDON_UPDATE_BASELINE=1 rewrites the file, for review in the diff).
func TestBundleBaseline(t *testing.T) {
	dir := t.TempDir()
	// A root of its own, so the pinned mounts do not depend on this host.
	root := filepath.Join(dir, "root")
	for _, d := range []string{"usr/bin", "etc", "var/tmp", "home/someone", "proc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := buildSpec(bundleInput{
		Bundle: filepath.Join(dir, "bundle"), RootSrc: root, SocketDir: "/state/sock", AgentPath: "/opt/cordon-agent",
		Env: []string{"CORDON_AGENT_TOKEN_FD=3"}, UID: 1000, IDBase: 1 << 30, IDSize: 1 << 16,
		Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 100, CPUs: 0.5}, CgroupsPath: "/cordon-oci/x",
		Landlock: "auto",
	})
	if err != nil {
		t.Fatal(err)
	}
	// Rules that hold for every bundle.
	if s.Linux.UIDMappings[0].HostID == 0 || s.Linux.GIDMappings[0].HostID == 0 {
		t.Error("the sandbox's ids map to the host's root")
	}
	for _, kv := range s.Process.Env {
		if strings.HasPrefix(kv, "CORDON_AGENT_TOKEN=") {
			t.Error("the token is in the bundle")
		}
	}
	got := bundleBaseline{
		ReadonlyRoot: s.Root.Readonly, User: s.Process.User, Capabilities: s.Process.Capabilities,
		NoNewPrivileges: s.Process.NoNewPrivileges, Namespaces: s.Linux.Namespaces,
		MaskedPaths: s.Linux.MaskedPaths, ReadonlyPaths: s.Linux.ReadonlyPaths, Seccomp: s.Linux.Seccomp,
		Resources: s.Linux.Resources,
	}
	for _, kv := range s.Process.Env {
		if strings.HasPrefix(kv, sandboxinit.EnvLandlock+"=") || strings.HasPrefix(kv, sandboxinit.EnvWritable+"=") {
			got.Confinement = append(got.Confinement, kv)
		}
	}
	for _, m := range s.Mounts {
		if m.Type == "bind" && strings.HasPrefix(m.Source, root) && m.Source == filepath.Join(root, m.Destination) {
			if !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
				t.Errorf("root directory %s bound with %v", m.Destination, m.Options)
			}
			continue
		}
		got.Mounts = append(got.Mounts, m)
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "baseline.json")
	if os.Getenv("CORDON_UPDATE_BASELINE") == "1" {
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(want)) != strings.TrimSpace(string(b)) {
		t.Errorf("the bundle's baseline changed; if that is deliberate, rerun with CORDON_UPDATE_BASELINE=1 and review the diff. Got:\n%s", b)
	}
}

// TestTaskLimit: under gVisor the pids limit is the sentry's RLIMIT_NPROC,
// not the host cgroup (which holds the sentry's threads); under runc and
// crun it is the cgroup's, and no rlimit is set. Without a pids limit every
// runtime gets the process tier's ceiling as RLIMIT_NPROC.
func TestTaskLimit(t *testing.T) {
	for _, gvisor := range []bool{false, true} {
		s, err := buildSpec(bundleInput{
			Bundle: filepath.Join(t.TempDir(), "bundle"), RootSrc: t.TempDir(), SocketDir: "/state/sock", AgentPath: "/opt/cordon-agent",
			UID: 1000, IDBase: 1 << 30, IDSize: 1 << 16, UserSpaceKernel: gvisor,
		})
		if err != nil {
			t.Fatal(err)
		}
		// gVisor's sentry holds the ceiling; under runc and crun the agent
		// sets it itself (sandboxinit.EnvTasks).
		want := specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: baseline.DefaultTasks, Soft: baseline.DefaultTasks}
		byAgent := slices.Contains(s.Process.Env, fmt.Sprintf("%s=%d", sandboxinit.EnvTasks, baseline.DefaultTasks))
		if gvisor && (len(s.Process.Rlimits) != 1 || s.Process.Rlimits[0] != want || byAgent) || !gvisor && (len(s.Process.Rlimits) != 0 || !byAgent) || s.Linux.Resources.Pids != nil {
			t.Errorf("no pids limit, gvisor %v: pids %+v, rlimits %+v, env %v", gvisor, s.Linux.Resources.Pids, s.Process.Rlimits, s.Process.Env)
		}
	}
	// Under a pids limit: runc and crun hold it in the host's cgroup (with
	// the agent's headroom); a current gVisor in its own, in the sandbox
	// (the agent is told where); a 2022 gVisor as an RLIMIT_NPROC.
	for _, c := range []struct {
		name                string
		gvisor, ownCgroups  bool
		cgroup, nproc       int64
		commandPids, spares bool
	}{
		{"runc", false, false, 100 + baseline.AgentPids, 0, false, true},
		{"gvisor", true, true, 0, 0, true, false},
		{"gvisor 2022", true, false, 0, 100 + oldGVisorHeadroom, false, false},
	} {
		dir := t.TempDir()
		s, err := buildSpec(bundleInput{
			Bundle: filepath.Join(dir, "bundle"), RootSrc: t.TempDir(), SocketDir: "/state/sock", AgentPath: "/opt/cordon-agent",
			UID: 1000, IDBase: 1 << 30, IDSize: 1 << 16, Limits: sandbox.Limits{Pids: 100}, UserSpaceKernel: c.gvisor, OwnCgroups: c.ownCgroups,
		})
		if err != nil {
			t.Fatal(err)
		}
		var cgroup, nproc int64
		if s.Linux.Resources.Pids != nil {
			cgroup = *s.Linux.Resources.Pids.Limit
		}
		if len(s.Process.Rlimits) == 1 && s.Process.Rlimits[0].Type == "RLIMIT_NPROC" && s.Process.Rlimits[0].Hard == s.Process.Rlimits[0].Soft {
			nproc = int64(s.Process.Rlimits[0].Hard)
		}
		commandPids := slices.Contains(s.Process.Env, sandboxinit.EnvCommandPids+"=100:"+gvisorCgroups+"/pids")
		spares := !slices.Contains(s.Process.Env, "CORDON_AGENT_SPARE_THREADS=0")
		if cgroup != c.cgroup || nproc != c.nproc || commandPids != c.commandPids || spares != c.spares || len(s.Process.Rlimits) > 1 {
			t.Errorf("%s: cgroup pids %d, rlimits %+v, commands' cgroup %v, spare threads %v", c.name, cgroup, s.Process.Rlimits, commandPids, spares)
		}
	}
}

// TestSharedSkeleton: bundles of one root share one skeleton, made once;
// a root whose entries are symlinks where cordon makes its own directories
// (a hostile image) does not lead the making out of the skeleton.
func TestSharedSkeleton(t *testing.T) {
	root, outside, shared := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".cordon", "workspace", "tmp"} {
		if err := os.Symlink(outside, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	var roots []string
	for range 2 {
		s, err := buildSpec(bundleInput{
			Bundle: filepath.Join(t.TempDir(), "b"), RootSrc: root, SocketDir: "/state/sock", AgentPath: "/opt/cordon-agent",
			UID: 1000, IDBase: 1 << 30, IDSize: 1 << 16, Skeletons: shared,
			Layout: []host.LayoutMount{{Host: "/x", Target: "/mnt/user-data/out0"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, s.Root.Path)
	}
	if roots[0] != roots[1] || filepath.Dir(roots[0]) != shared {
		t.Fatalf("skeletons %v, want one under %s", roots, shared)
	}
	if ents, _ := os.ReadDir(shared); len(ents) != 1 {
		t.Fatalf("%d entries in the skeleton directory, want 1", len(ents))
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the skeleton's making wrote outside it: %v", ents)
	}
	for _, p := range []string{".cordon/cordon-agent", "workspace", "tmp", "usr", "mnt/user-data/out0"} {
		if fi, err := os.Lstat(filepath.Join(roots[0], p)); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("%s in the skeleton: %v %v", p, fi, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(roots[0], "tmp")); fi == nil || fi.Mode()&os.ModePerm != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("tmp mount point mode %v", fi)
	}
}

// TestBundleRendersBaseline: the bundle is the baseline's, where it says
// the same things as the process tier's init (process.TestInitRendersBaseline):
// scratch directories with their modes, owners and shares, the namespaces,
// the agent's capabilities, no new privileges, a read-only root, the
// masked and read-only /proc entries, the hostname and working directory.
func TestBundleRendersBaseline(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var", "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	const budget = 64 << 20
	s, err := buildSpec(bundleInput{
		Bundle: filepath.Join(t.TempDir(), "bundle"), RootSrc: root, SocketDir: "/state/sock", AgentPath: "/opt/cordon-agent",
		UID: baseline.DefaultUID, IDBase: 1 << 30, IDSize: 1 << 16, ScratchBudget: budget,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range baseline.ScratchDirs {
		i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == d.Path })
		if i < 0 || s.Mounts[i].Type != "tmpfs" {
			t.Errorf("scratch %s: not a tmpfs mount", d.Path)
			continue
		}
		opts := s.Mounts[i].Options
		want := []string{"nosuid", "nodev", fmt.Sprintf("mode=%o", d.Mode), fmt.Sprintf("size=%d", budget/d.Share)}
		if d.Owned {
			want = append(want, fmt.Sprintf("uid=%d", baseline.DefaultUID))
		}
		for _, o := range want {
			if !slices.Contains(opts, o) {
				t.Errorf("scratch %s: options %v, want %s", d.Path, opts, o)
			}
		}
	}
	var ns []string
	for _, n := range s.Linux.Namespaces {
		ns = append(ns, string(n.Type))
	}
	if !slices.Equal(ns, baseline.Namespaces) {
		t.Errorf("namespaces %v, want %v", ns, baseline.Namespaces)
	}
	if c := s.Process.Capabilities; !slices.Equal(c.Bounding, baseline.AgentCapabilities) || !slices.Equal(c.Effective, baseline.AgentCapabilities) ||
		len(c.Inheritable) != 0 || len(c.Ambient) != 0 {
		t.Errorf("capabilities %+v, want %v and nothing to inherit", c, baseline.AgentCapabilities)
	}
	if s.Process.NoNewPrivileges != baseline.NoNewPrivileges || !s.Root.Readonly || s.Hostname != baseline.Hostname || s.Process.Cwd != baseline.Workspace {
		t.Errorf("no new privileges %v, read-only root %v, hostname %q, cwd %q", s.Process.NoNewPrivileges, s.Root.Readonly, s.Hostname, s.Process.Cwd)
	}
	for _, p := range baseline.ProcMasked {
		if !slices.Contains(s.Linux.MaskedPaths, "/proc/"+p) {
			t.Errorf("/proc/%s is not masked", p)
		}
	}
	for _, p := range baseline.ProcReadOnly {
		if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/"+p) {
			t.Errorf("/proc/%s is not read-only", p)
		}
	}
}
