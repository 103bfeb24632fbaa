package main_test

import (
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestMicroVM drives the microvm tier as a user would: cordon tiers says
// how its VMs run, cordon run --tier microvm runs a command in a VM of
// its own with no further flags, and a daemon creates, pauses, resumes,
// runs commands in and removes one.
func TestMicroVM(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "qemu-system-x86_64")
	out, errOut, code := cordon(t, "tiers")
	if code != 0 || !strings.Contains(out, "microvm      yes") {
		if strings.Contains(out, "microvm      no") {
			testutil.Missing(t, "the microvm tier is unavailable: %s", out)
		}
		t.Fatalf("cordon tiers: %d %q %s", code, out, errOut)
	}
	if !strings.Contains(out, "qemu microvm, ") {
		t.Fatalf("cordon tiers does not say how VMs run:\n%s", out)
	}
	out, errOut, code = cordon(t, "run", "--tier", "microvm", "--", "sh", "-c", "uname -r; python3 -c 'print(6*7)'")
	if code != 0 || !strings.HasSuffix(out, "\n42\n") {
		t.Fatalf("cordon run --tier microvm: %d %q %s", code, out, errOut)
	}
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	run := mustCordon(t, "--host=unix://"+sock)
	id := strings.TrimSpace(run("create", "--tier", "microvm", "--memory", "256m"))
	run("exec", id, "--", "sh", "-c", "echo kept > f")
	run("pause", id)
	run("resume", id)
	if out := run("exec", id, "--", "cat", "f"); out != "kept\n" {
		t.Fatalf("after pause and resume: %q", out)
	}
	run("rm", id)
}
