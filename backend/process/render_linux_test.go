package process

import (
	"slices"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
	"os"
)

// TestInitRendersBaseline: the init's configuration is the baseline's
// (scratch directories, identity files, socket directory, hostname, working
// directory, the commands' environment, the task ceiling); the OCI tier's
// bundle is checked against the same data (oci.TestBundleRendersBaseline).
func TestInitRendersBaseline(t *testing.T) {
	b := New(Config{StateDir: t.TempDir()})
	sl := &slot{stage: "/stage", scratch: "/scratch", sock: "/state/sock"}
	l := sandbox.Launch{Token: "tok", Spec: sandbox.Spec{Env: map[string]string{"X": "1"}}}
	uid := baseline.DefaultUID
	cfg, err := b.initConfig(sl, l, nil, uid, uid)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tmpfs) != len(baseline.ScratchDirs) {
		t.Fatalf("scratch %+v, want the baseline's %+v", cfg.Tmpfs, baseline.ScratchDirs)
	}
	for i, s := range baseline.ScratchDirs {
		if got := cfg.Tmpfs[i]; got.Path != s.Path || got.Mode != s.Mode || got.Owned != s.Owned {
			t.Errorf("scratch %+v, want %+v", got, s)
		}
	}
	if cfg.Hostname != baseline.Hostname || cfg.Workdir != baseline.Workspace || cfg.UID != uid || cfg.Tasks != baseline.DefaultTasks {
		t.Errorf("hostname %q, workdir %q, uid %d, tasks %d", cfg.Hostname, cfg.Workdir, cfg.UID, cfg.Tasks)
	}
	if !slices.ContainsFunc(cfg.Binds, func(bd sandboxinit.Bind) bool {
		return bd.Source == sl.sock && bd.Target == baseline.SocketDir && bd.ReadOnly
	}) {
		t.Errorf("no read-only bind of the socket directory at %s: %+v", baseline.SocketDir, cfg.Binds)
	}
	for p, content := range baseline.IdentityFiles(uid, true) {
		if !slices.ContainsFunc(cfg.Binds, func(bd sandboxinit.Bind) bool {
			got, err := os.ReadFile(bd.Source)
			return bd.Target == p && bd.File && bd.ReadOnly && err == nil && string(got) == content
		}) {
			t.Errorf("identity file %s is not bound with the baseline's content", p)
		}
	}
	want := []string{"X=1", baseline.EnvPrefix + "TOKEN=tok", baseline.EnvPrefix + "SOCKET=" + baseline.AgentSocket,
		baseline.EnvPrefix + "EGRESS_SOCKET=" + baseline.EgressSocket, baseline.EnvPrefix + "EGRESS_PASS=1"}
	for k, v := range baseline.CommandEnv(uid) {
		want = append(want, k+"="+v)
	}
	for _, kv := range want {
		if !slices.Contains(cfg.Env, kv) {
			t.Errorf("the agent's environment lacks %s: %v", kv, cfg.Env)
		}
	}
}
