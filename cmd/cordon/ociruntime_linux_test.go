package main_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// The container tier's runtimes: chosen with CORDON_OCI_RUNTIME, each in a
// state directory of its own, and changed between two starts of a daemon.

// TestRunContainerRuntimes: CORDON_OCI_RUNTIME picks the container tier's
// runtime. Each keeps its containers in a state directory of its own
// (one runtime cannot read another's), where that runtime lists the
// sandbox while its command runs; gVisor's runsc and a runtime that is
// not installed are refused, saying why.
func TestRunContainerRuntimes(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, rt := range testutil.Requires(t, "crun", "runc") {
		name := filepath.Base(rt)
		t.Run(name, func(t *testing.T) {
			state := testutil.StateDir(t)
			env := append(os.Environ(), "CORDON_OCI_RUNTIME="+name, "CORDON_STATE_DIR="+state)
			tiers := exec.Command(buildCLI(t), "tiers")
			tiers.Env = env
			if out, err := tiers.Output(); err != nil || !regexp.MustCompile(`(?m)^container +yes .*`+regexp.QuoteMeta(rt)+`$`).Match(out) {
				t.Fatalf("cordon tiers does not name %s for the container tier: %v\n%s", rt, err, out)
			}
			cmd := exec.Command(buildCLI(t), "run", "--tier", "container", "-i", "--", "sh", "-c", "echo up; cat >/dev/null; id -u")
			cmd.Env = env
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			var e bytes.Buffer
			cmd.Stderr = &e
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(out)
			if line, err := r.ReadString('\n'); line != "up\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("%q %v %s", line, err, e.String())
			}
			list, err := exec.Command(rt, "--root", filepath.Join(state, "oci-"+name, "runtime"), "list", "-q").CombinedOutput()
			in.Close()
			rest, _ := io.ReadAll(r)
			if werr := cmd.Wait(); werr != nil || string(rest) != "1000\n" {
				t.Fatalf("%q %v %s", rest, werr, e.String())
			}
			if err != nil || !strings.HasPrefix(string(list), "cordon-") {
				t.Fatalf("%s does not list the running sandbox in its state directory: %v %q", name, err, list)
			}
		})
	}
	for _, c := range []struct{ runtime, want string }{
		{"runsc", "runsc is gVisor, which the gvisor tier runs (--tier gvisor)"},
		{"no-such-runtime", "no OCI runtime (no-such-runtime) found"},
	} {
		cmd := exec.Command(buildCLI(t), "run", "--tier", "container", "--", "true")
		cmd.Env = append(os.Environ(), "CORDON_OCI_RUNTIME="+c.runtime, "CORDON_STATE_DIR="+testutil.StateDir(t))
		if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), c.want) {
			t.Errorf("CORDON_OCI_RUNTIME=%s: exit %d %q; want 125 and %q", c.runtime, cmd.ProcessState.ExitCode(), out, c.want)
		}
	}
}

// TestDaemonRuntimeChange: an operator who changes the container tier's
// runtime (CORDON_OCI_RUNTIME) between two starts of the daemon loses no
// sandbox the other runtime runs, and orphans none: the next start takes
// each back with the runtime that made it, and a start whose registry no
// longer explains them removes them, whichever runtime kept them.
func TestDaemonRuntimeChange(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.Requires(t, "crun", "runc")
	t.Setenv("CORDON_OCI_RUNTIME", "runc")
	dir, sock, d := serveInTemp(t)
	host := "--host=unix://" + sock
	processDir := filepath.Join(dir, "process")
	listed := func(runtime string) string {
		out, _ := exec.Command(runtime, "--root", filepath.Join(processDir, "serve", oci.StateName(oci.Name, runtime), "runtime"), "list", "-q").Output()
		return strings.TrimSpace(string(out))
	}
	out, errOut, code := cordon(t, "create", host, "--tier", "container")
	if code != 0 {
		t.Fatalf("create under runc: %s", errOut)
	}
	id := strings.TrimSpace(out)
	if _, errOut, code := cordon(t, "exec", host, "-d", "--name", "srv", id, "--", "sleep", "600"); code != 0 {
		t.Fatalf("exec -d: %s", errOut)
	}
	if listed("runc") == "" {
		t.Fatal("runc does not list the sandbox")
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	t.Setenv("CORDON_OCI_RUNTIME", "crun")
	d = startServe(t, sock, filepath.Join(dir, "state"), processDir)
	if out, errOut, code := cordon(t, "exec", host, id, "--", "echo", "alive"); code != 0 || out != "alive\n" {
		t.Fatalf("runc's sandbox under a daemon configured for crun: %d %q %s", code, out, errOut)
	}
	if out, _, _ := cordon(t, "sessions", host, id); !strings.Contains(out, "srv") {
		t.Errorf("its session: %q", out)
	}
	out, errOut, code = cordon(t, "create", host, "--tier", "container")
	if code != 0 || listed("crun") == "" {
		t.Fatalf("create under crun: %s", errOut)
	}
	// Its registry gone, the next daemon on the directory removes both
	// runtimes' sandboxes.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	d = startServe(t, sock, filepath.Join(dir, "state2"), processDir)
	defer d.stop(t, sock)
	if l, m := listed("runc"), listed("crun"); l != "" || m != "" {
		t.Errorf("left after a new registry's start: runc %q, crun %q", l, m)
	}
}
