package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Dockerd is a private Docker engine for one test binary: Debian's
// docker.io with its data and exec roots in a directory of its own, no
// bridge and no iptables rules (the host's network is left alone), on a
// unix socket there. Nothing can be pulled on our machines: tests import
// the images they use (ImportRoot).
type Dockerd struct {
	// Host is the engine's address (unix://…).
	Host string
	// Err says why there is no engine (nothing was started).
	Err error
	dir string
	cmd *exec.Cmd
}

// StartDockerd starts an engine, for TestMain: Stop it once the tests
// are done.
func StartDockerd() *Dockerd {
	d := &Dockerd{}
	if _, err := exec.LookPath("dockerd"); err != nil {
		d.Err = fmt.Errorf("needs dockerd on PATH (scripts/setup.sh installs docker.io)")
		return d
	}
	if os.Geteuid() != 0 {
		d.Err = fmt.Errorf("dockerd needs root")
		return d
	}
	var err error
	if d.dir, err = os.MkdirTemp("", "cordon-dockerd-"); err != nil {
		d.Err = err
		return d
	}
	d.Host = "unix://" + filepath.Join(d.dir, "docker.sock")
	if d.Err = d.start(); d.Err != nil {
		d.Stop()
	}
	return d
}

// start runs dockerd on the engine's directory until it answers.
func (d *Dockerd) start() error {
	log, err := os.OpenFile(filepath.Join(d.dir, "dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	d.cmd = exec.Command("dockerd", "--data-root", filepath.Join(d.dir, "data"), "--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "dockerd.pid"), "-H", d.Host,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false")
	d.cmd.Stdout, d.cmd.Stderr = log, log
	// Its own process group: a test killed by its timeout takes it along
	// only through Stop, so that it unmounts what it mounted.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, err := d.docker("version", "--format", "{{.Server.Version}}").CombinedOutput(); err == nil && len(out) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(d.dir, "dockerd.log"))
			return fmt.Errorf("dockerd did not answer within 60s:\n%s", tail(string(b), 2000))
		}
	}
}

// Restart stops the engine and starts it again on the same data: what it
// held (images, containers, stopped now) is there again.
func (d *Dockerd) Restart(t testing.TB) {
	t.Helper()
	d.halt()
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
}

// Halt stops the engine, which stops its containers, keeping its data for
// Restart.
func (d *Dockerd) Halt() { d.halt() }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// docker runs the docker CLI against this engine.
func (d *Dockerd) docker(args ...string) *exec.Cmd {
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+d.Host)
	return cmd
}

// Require is the engine's address, or t skipped (failed under CI) when
// there is none.
func (d *Dockerd) Require(t testing.TB) string {
	t.Helper()
	if d.Err != nil {
		Missing(t, "no Docker engine: %v", d.Err)
	}
	return d.Host
}

// ImportRoot imports the root filesystem dir into the engine as image ref
// (docker import), unless it holds it already.
func (d *Dockerd) ImportRoot(t testing.TB, dir, ref string) {
	t.Helper()
	if d.docker("image", "inspect", ref).Run() == nil {
		return
	}
	tar := exec.Command("tar", "-C", dir, "-c", ".")
	imp := d.docker("import", "-", ref)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.Stdin = pipe
	if err := tar.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := imp.CombinedOutput()
	_ = tar.Wait()
	if err != nil {
		t.Fatalf("docker import %s: %v: %s", ref, err, out)
	}
}

// Docker runs the docker CLI against this engine and returns its output.
func (d *Dockerd) Docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := d.docker(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Stop stops the engine (it stops its containers and unmounts what it
// mounted) and removes its directory.
func (d *Dockerd) Stop() {
	d.halt()
	if d.dir != "" {
		_ = exec.Command("umount", "-R", "--lazy", filepath.Join(d.dir, "data")).Run()
		_ = os.RemoveAll(d.dir)
	}
}

func (d *Dockerd) halt() {
	if d.cmd != nil && d.cmd.Process != nil && d.cmd.ProcessState == nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// The test binary's engine, started on first use (Engine).
var engineOnce struct {
	sync.Once
	d *Dockerd
}

// Engine is the test binary's private Docker engine, started on first
// use, with the suites' image (EngineImage) imported; t is skipped (failed
// under CI) where there can be none. The binary's TestMain calls
// StopEngine.
func Engine(t testing.TB) *Dockerd {
	t.Helper()
	RequiresRoot(t)
	engineOnce.Do(func() { engineOnce.d = StartDockerd() })
	d := engineOnce.d
	d.Require(t)
	d.ImportRoot(t, DebianTools(t), EngineImage)
	return d
}

// EngineImage is the image Engine holds: a Debian minbase with the
// suites' tools.
const EngineImage = "cordon-test/bookworm-tools:2"

// StopEngine stops the engine Engine started, if it did.
func StopEngine() {
	if engineOnce.d != nil {
		engineOnce.d.Stop()
	}
}
