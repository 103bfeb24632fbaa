package sandboxinit

import (
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/clonexec"
)

// hostRootConfig is a configuration like the process tier's for the host's
// own root.
func hostRootConfig(stage string) *Config {
	return &Config{
		Stage: stage + "/root", RootFS: "/", HostRoot: true, ScratchMount: stage + "/scratch",
		Tmpfs: []Tmpfs{{Path: "/tmp", Mode: 0o1777}, {Path: "/var/tmp", Mode: 0o1777}, {Path: "/workspace", Mode: 0o755, Owned: true}, {Path: "/home/sandbox", Mode: 0o700, Owned: true}},
		Binds: []Bind{{Source: stage + "/sock", Target: "/run/cordon"}, {Source: stage + "/hosts", Target: "/etc/hosts", File: true, ReadOnly: true},
			{Target: "/mnt/user-data/outputs", Tree: 1}},
		UID: 1000, GID: 1000,
	}
}

// BenchmarkRootHelper: planning the host root's mounts into a helper's
// calls, which the process tier does beside each cold init's clone.
func BenchmarkRootHelper(b *testing.B) {
	cfg := hostRootConfig(b.TempDir())
	for b.Loop() {
		if err := RootHelper(clonexec.NewHelper(), cfg, func(int) int { return TreeFD }); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRootHelperRefusesContent: a file given by its content is written by
// the init; a helper, which makes system calls only, is refused that plan
// (and the process tier lets the init build such a root).
func TestRootHelperRefusesContent(t *testing.T) {
	cfg := hostRootConfig(t.TempDir())
	if err := RootHelper(clonexec.NewHelper(), cfg, func(int) int { return TreeFD }); err != nil {
		t.Fatalf("plan without content: %v", err)
	}
	cfg.Binds = append(cfg.Binds, Bind{Target: "/etc/passwd", File: true, Content: "root:x:0:0::/:/bin/sh\n"})
	if err := RootHelper(clonexec.NewHelper(), cfg, func(int) int { return TreeFD }); err == nil || !strings.Contains(err.Error(), "only the init") {
		t.Fatalf("plan with content: %v", err)
	}
}
