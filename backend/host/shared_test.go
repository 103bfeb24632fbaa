//go:build linux

package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/host"
)

// TestSharedDir: a shared directory is made once, whole, under its name; a
// maker that fails leaves nothing, and one killed mid-fill leaves a
// temporary that the sweep removes once it is old.
func TestSharedDir(t *testing.T) {
	base := t.TempDir()
	fills := 0
	fill := func(dir string) error {
		fills++
		if !strings.HasPrefix(filepath.Base(dir), ".shared-") {
			t.Errorf("filled %s, not a sweepable temporary", dir)
		}
		return os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	}
	for range 2 {
		dir, err := host.SharedDir(base, "thing-1", fill)
		if err != nil || dir != filepath.Join(base, "thing-1") {
			t.Fatalf("%q %v", dir, err)
		}
	}
	if fills != 1 {
		t.Fatalf("filled %d times, want once", fills)
	}
	if _, err := host.SharedDir(base, "thing-2", func(string) error { return errors.New("no") }); err == nil {
		t.Fatal("a failed fill made a shared directory")
	}
	// A killed maker's temporary, an old and a young one.
	old, young := filepath.Join(base, ".shared-thing-3-1"), filepath.Join(base, ".shared-thing-3-2")
	for _, d := range []string{old, young} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	host.SweepSharedTemps(base)
	ents, _ := os.ReadDir(base)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != ".shared-thing-3-2 thing-1" {
		t.Fatalf("after the sweep: %q, want the young temporary and the shared directory", got)
	}
}

// TestAgentCopyPrunes: a process's first agent copy under a base removes
// the copies of other builds that went unused for ten minutes, and keeps
// those used since; each use marks the copy used.
func TestAgentCopyPrunes(t *testing.T) {
	base, bin := t.TempDir(), t.TempDir()
	old := time.Now().Add(-time.Hour)
	for name, when := range map[string]time.Time{"agent-0000000000000001": old, "agent-0000000000000002": time.Now(), "skeleton-0000000000000003": old} {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, when, when); err != nil {
			t.Fatal(err)
		}
	}
	agent := filepath.Join(bin, "cordon-agent")
	if err := os.WriteFile(agent, []byte("an agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	copied, err := host.AgentCopy(base, agent)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"agent-0000000000000001": false, "agent-0000000000000002": true, "skeleton-0000000000000003": true, filepath.Base(filepath.Dir(copied)): true} {
		if _, err := os.Stat(filepath.Join(base, name)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", name, err == nil, want)
		}
	}
	dir := filepath.Dir(copied)
	os.Chtimes(dir, old, old)
	if _, err := host.AgentCopy(base, agent); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || time.Since(st.ModTime()) > time.Minute {
		t.Fatalf("a use did not mark the copy used: %v", err)
	}
}
