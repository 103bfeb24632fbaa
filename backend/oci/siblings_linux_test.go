package oci

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSiblingsTrusted: the state directories beside a backend's are its
// siblings only where no one else may write them, and a record of a
// runtime (which is run as this user) counts only where no one else may
// write it: an attacker who could write the parent directory must not
// choose what a sweep runs.
func TestSiblingsTrusted(t *testing.T) {
	parent := t.TempDir()
	mk := func(name string, mode os.FileMode, record string, recordMode os.FileMode) {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if record != "" {
			if err := os.WriteFile(filepath.Join(dir, runtimeRecord), []byte(record), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, runtimeRecord), recordMode); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("oci", 0o711, "", 0)
	mk("oci-runc", 0o711, "/usr/sbin/runc", 0o644)
	mk("oci-open", 0o777, "/tmp/anything", 0o644)
	mk("oci-forged", 0o711, "/tmp/anything", 0o666)
	mk("gvisor", 0o711, "", 0)
	mk("ocifoo", 0o711, "", 0)
	got := map[string]string{}
	for _, s := range New(Config{StateDir: filepath.Join(parent, "oci")}).siblings() {
		got[filepath.Base(s.cfg.StateDir)] = s.cfg.Runtime
	}
	want := map[string]string{"oci-runc": "/usr/sbin/runc", "oci-forged": ""}
	if len(got) != len(want) || got["oci-runc"] != want["oci-runc"] || got["oci-forged"] != "" {
		t.Fatalf("siblings and their runtimes: %v, want %v", got, want)
	}
	// A state directory not laid out by StateName has none.
	if s := New(Config{StateDir: filepath.Join(parent, "oci-runc", "x")}).siblings(); len(s) != 0 {
		t.Fatalf("siblings of a directory named otherwise: %d", len(s))
	}
}
