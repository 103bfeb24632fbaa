//go:build linux

package oci_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
)

// Benchmarks per runtime, in one run: create → first exec of `true` →
// destroy through cordon, the raw runtime running /bin/true on the same
// bundle (`run`, foreground, then `delete`), and exec into a warm sandbox.
// Each reports p50 and p99 (ms). Run with -benchtime 50x.

func benchBackend(b *testing.B, rt string) *oci.Backend { return backendTB(b, rt) }

func BenchmarkLifecycle(b *testing.B) {
	for _, rt := range runtimes {
		b.Run(filepath.Base(rt), func(b *testing.B) { sandboxtest.BenchLifecycle(b, benchBackend(b, rt)) })
	}
}

// BenchmarkRawRuntime runs /bin/true with the runtime itself on a bundle
// cordon made (the agent swapped for /usr/bin/true).
func BenchmarkRawRuntime(b *testing.B) {
	for _, rt := range runtimes {
		b.Run(filepath.Base(rt), func(b *testing.B) {
			be := benchBackend(b, rt)
			p := sandbox.NewProvider([]sandbox.Backend{be})
			sb, err := p.Create(b.Context(), sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(b.Context())
			a, _ := sb.Persist()
			var st struct{ ID string }
			json.Unmarshal(a.State, &st)
			root := be.StateDir()
			raw := filepath.Join(root, "cordon-rawbench")
			os.RemoveAll(raw)
			if out, err := exec.Command("cp", "-a", filepath.Join(root, st.ID), raw).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			defer os.RemoveAll(raw)
			cfgPath := filepath.Join(raw, "bundle", "config.json")
			var cfg map[string]any
			rawCfg, _ := os.ReadFile(cfgPath)
			json.Unmarshal(rawCfg, &cfg)
			cfg["process"].(map[string]any)["args"] = []string{"/usr/bin/true"}
			cfg["linux"].(map[string]any)["cgroupsPath"] = "/cordon-oci/cordon-rawbench"
			out, _ := json.Marshal(cfg)
			// Paths inside the copied bundle point at the original's
			// directory, which lives while this benchmark runs.
			os.WriteFile(cfgPath, out, 0o600)
			var runs []time.Duration
			state := filepath.Join(root, "runtime")
			for i := 0; b.Loop(); i++ {
				id := "cordon-rawbench-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
				t0 := time.Now()
				args := []string{"--root", state}
				if be.Name() == oci.GVisor {
					args = append(args, "--network=none", "--oci-seccomp")
				}
				cmd := exec.Command(be.Runtime(), append(args, "run", "--bundle", filepath.Join(raw, "bundle"), id)...)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				exec.Command(be.Runtime(), "--root", state, "delete", "--force", id).Run()
				runs = append(runs, time.Since(t0))
			}
			testutil.ReportPercentiles(b, "raw-run-true", runs)
		})
	}
}

func BenchmarkExecWarm(b *testing.B) {
	for _, rt := range runtimes {
		b.Run(filepath.Base(rt), func(b *testing.B) { sandboxtest.BenchExecWarm(b, benchBackend(b, rt)) })
	}
}
