package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestSnapshotVerbs: snapshot, snapshots, create --from, fork, and
// snapshot rm, export and import, as a user runs them.
func TestSnapshotVerbs(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	run := mustCordon(t, host)
	id := strings.TrimSpace(run("create"))
	run("exec", id, "--", "sh", "-c", "echo kept > f && chmod 600 f")
	snap := strings.TrimSpace(run("snapshot", id))
	if !strings.HasPrefix(snap, "snap_") {
		t.Fatalf("snapshot printed %q", snap)
	}
	if out := run("snapshots"); !strings.Contains(out, snap) || !strings.Contains(out, id) {
		t.Errorf("snapshots: %q", out)
	}
	run("exec", id, "--", "rm", "f")
	restored := strings.TrimSpace(run("create", "--from", snap))
	if out := run("exec", restored, "--", "stat", "-c", "%a %s", "f"); out != "600 5\n" {
		t.Errorf("restored: %q", out)
	}
	forks := strings.Fields(run("fork", restored, "3"))
	if len(forks) != 3 {
		t.Fatalf("fork printed %q", forks)
	}
	for _, f := range forks {
		if out := run("exec", f, "--", "cat", "f"); out != "kept\n" {
			t.Errorf("fork %s: %q", f, out)
		}
	}
	exp := filepath.Join(dir, "snap.tar")
	out := run("snapshot", "export", snap)
	if err := os.WriteFile(exp, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	imported := strings.TrimSpace(run("snapshot", "import", exp))
	if imported == snap || !strings.HasPrefix(imported, "snap_") {
		t.Errorf("import printed %q", imported)
	}
	run("snapshot", "rm", snap, imported)
	if out := run("snapshots"); strings.Contains(out, snap) {
		t.Errorf("after rm: %q", out)
	}
	if _, errOut, code := cordon(t, "create", host, "--from", snap); code == 0 || !strings.Contains(errOut, "no snapshot") {
		t.Errorf("create from a removed snapshot: %d %s", code, errOut)
	}
}

// TestTemplateVerbs: template save (from a snapshot, with a start
// program), templates, create --template, template rm.
func TestTemplateVerbs(t *testing.T) {
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	run := mustCordon(t, host)
	id := strings.TrimSpace(run("create"))
	run("exec", id, "--", "sh", "-c", "echo base > base.txt")
	snap := strings.TrimSpace(run("snapshot", id))
	out, errOut, code := cordon(t, "template", host, "save", "--from", snap, "--start", "echo up > up.txt; exec sleep 300", "base")
	if code != 0 {
		t.Fatalf("template save: %d %s %s", code, out, errOut)
	}
	if out := run("templates"); !strings.Contains(out, "base") || !strings.Contains(out, "snap_") {
		t.Errorf("templates: %q", out)
	}
	sb := strings.TrimSpace(run("create", "--template", "base"))
	if out := run("exec", sb, "--", "sh", "-c", "cat base.txt; for i in $(seq 50); do [ -s up.txt ] && break; sleep 0.05; done; cat up.txt"); out != "base\nup\n" {
		t.Errorf("from the template: %q", out)
	}
	if out := run("sessions", sb); !strings.Contains(out, "start") {
		t.Errorf("sessions: %q", out)
	}
	run("template", "rm", "base")
	if _, errOut, code := cordon(t, "create", host, "--template", "base"); code == 0 || !strings.Contains(errOut, "no such template") {
		t.Errorf("create from a removed template: %d %s", code, errOut)
	}
}

// mustCordon returns a runner of cordon verbs against host (--host=…, put
// after the verb) that fails the test on a non-zero exit and returns
// stdout.
func mustCordon(t *testing.T, host string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, errOut, code := cordon(t, append(args[:1:1], append([]string{host}, args[1:]...)...)...)
		if code != 0 {
			t.Fatalf("cordon %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
}
