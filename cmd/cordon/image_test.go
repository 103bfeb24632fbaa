package main_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// busyboxTarball writes a `docker save` tarball of a one-layer image: a
// static busybox, its applets, and a marker file.
func busyboxTarball(t *testing.T) string { return busyboxImage(t, nil) }

// busyboxImage is busyboxTarball with the image config cfg (none when nil)
// and an /etc/passwd naming user "app" (uid 4343).
func busyboxImage(t *testing.T, cfg *v1.Config) string { return busyboxImageWith(t, cfg) }

// busyboxImageWith is busyboxImage with entries of its own (headers
// only: no contents) added to the layer, under the tag
// cordon.test/extra:1 when there are any.
func busyboxImageWith(t *testing.T, cfg *v1.Config, extra ...*tar.Header) string {
	bb := testutil.Requires(t, "busybox")[0]
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		h.Size = int64(len(body))
		tw.WriteHeader(h)
		tw.Write(body)
	}
	add(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, data)
	for _, a := range []string{"sh", "cat", "ls", "id", "echo"} {
		add(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	add(&tar.Header{Name: "etc/marker", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("from the image\n"))
	if cfg != nil {
		add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:0::/root:/bin/sh\napp:x:4343:4343::/home/app:/bin/sh\n"))
	}
	for _, h := range extra {
		add(h, nil)
	}
	tw.Close()
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		if img, err = mutate.Config(img, *cfg); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "busybox.tar")
	tag, _ := name.NewTag("cordon.test/busybox:1")
	if cfg != nil {
		tag, _ = name.NewTag("cordon.test/configured:1")
	}
	if len(extra) > 0 {
		tag, _ = name.NewTag("cordon.test/extra:1")
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImages(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildCLI(t)
	run := imageCLI(t)
	// A sandbox without an image leaves the cache alone: not even opened.
	unused := filepath.Join(t.TempDir(), "unused")
	cmd := exec.Command(bin, "run", "--", "true")
	cmd.Env = append(os.Environ(), "CORDON_IMAGE_DIR="+unused)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run without an image: %v %s", err, out)
	}
	if _, err := os.Stat(unused); !os.IsNotExist(err) {
		t.Fatalf("run without an image opened the image cache (%v)", err)
	}
	// Imported without a name, a `docker save` tarball's image keeps its
	// tag, and runs under it; a name may follow the file.
	tarball := busyboxTarball(t)
	if out, errOut, code := run("image", "import", tarball); code != 0 || !strings.Contains(out, "cordon.test/busybox:1") ||
		!strings.Contains(errOut, "layer 1/1: ") || !strings.Contains(errOut, " unpacked") {
		// Not a terminal: one plain progress line per layer.
		t.Fatalf("import with the tarball's tag: %q %q %d", out, errOut, code)
	}
	if out, errOut, code := run("run", "--image", "cordon.test/busybox:1", "--", "cat", "/etc/marker"); code != 0 || out != "from the image\n" {
		t.Fatalf("run --image by the tarball's tag: %q %q %d", out, errOut, code)
	}
	// A registry that cannot be reached (loopback, nothing listening) is
	// said so, with the way round it.
	if _, errOut, code := run("image", "pull", "127.0.0.1:1/nothing:1"); code != 125 || !strings.Contains(errOut, "cannot be reached") || !strings.Contains(errOut, "cordon image import") {
		t.Fatalf("pull from an unreachable registry: %q %d", errOut, code)
	}
	if out, errOut, code := run("image", "import", tarball, "--name", "bb"); code != 0 || !strings.HasPrefix(out, "imported bb") {
		t.Fatalf("import --name after the file: %q %q %d", out, errOut, code)
	}
	if out, _, _ := run("image", "ls"); !strings.Contains(out, "bb") {
		t.Fatalf("ls: %q", out)
	}
	out, errOut, code := run("run", "--image", "bb", "--", "sh", "-c", "cat /etc/marker; id -u; ls /bin | wc -l; test -e /usr/bin/python3 || echo no-host-root")
	if code != 0 || out != "from the image\n1000\n6\nno-host-root\n" {
		t.Fatalf("run --image: %q %q %d", out, errOut, code)
	}
	// Neither cached nor a valid reference: refused before any network.
	if _, errOut, code := run("run", "--image", "NOT A REFERENCE!", "--", "true"); code != 125 || !strings.Contains(errOut, "image") {
		t.Fatalf("missing image: %q %d", errOut, code)
	}
	if out, _, code := run("image", "rm", "bb"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("rm: %q %d", out, code)
	}
	if out, _, _ := run("image", "ls"); strings.Contains(out, "bb") {
		t.Fatalf("ls after rm: %q", out)
	}
}

// TestImageDefaults: a sandbox of an image takes the image config's Env
// and User (a uid, or a name from the image's /etc/passwd) unless its own
// flags say otherwise; the image's root user is not taken.
func TestImageDefaults(t *testing.T) {
	testutil.RequiresRoot(t)
	run := imageCLI(t)
	for _, tc := range []struct {
		user, want string
	}{{"app", "4343"}, {"4242:4242", "4242"}, {"root", "1000"}, {"", "1000"}} {
		t.Run("user="+tc.user, func(t *testing.T) {
			img := busyboxImage(t, &v1.Config{Env: []string{"GREETING=from-image", "PATH=/bin"}, User: tc.user})
			if _, errOut, code := run("image", "import", img, "--name", "configured"); code != 0 {
				t.Fatalf("import: %s", errOut)
			}
			out, errOut, code := run("run", "--image", "configured", "--", "sh", "-c", "echo $GREETING $PATH; id -u")
			if code != 0 || out != "from-image /bin\n"+tc.want+"\n" {
				t.Fatalf("run: %q %q %d", out, errOut, code)
			}
			out, errOut, code = run("run", "--image", "configured", "--env", "GREETING=mine", "--user", "1234", "--", "sh", "-c", "echo $GREETING; id -u")
			if code != 0 || out != "mine\n1234\n" {
				t.Fatalf("run with flags: %q %q %d", out, errOut, code)
			}
		})
	}
	img := busyboxImage(t, &v1.Config{User: "nobody-here"})
	if _, errOut, code := run("image", "import", img, "--name", "unknown-user"); code != 0 {
		t.Fatalf("import: %s", errOut)
	}
	if _, errOut, code := run("run", "--image", "unknown-user", "--", "true"); code == 0 || !strings.Contains(errOut, "nobody-here") {
		t.Fatalf("an image user not in its passwd: %q %d", errOut, code)
	}
}

// imageCLI runs cordon with an image cache of the test's own, and returns
// stdout, stderr and the exit code.
func imageCLI(t *testing.T) func(args ...string) (string, string, int) {
	return imageCLIIn(t, t.TempDir())
}

// imageCLIIn is imageCLI with the image cache in dir.
func imageCLIIn(t *testing.T, dir string) func(args ...string) (string, string, int) {
	bin := buildCLI(t)
	// Sandboxes read image roots as unprivileged mapped users.
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	return func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "CORDON_IMAGE_DIR="+dir)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
}

// TestImageHostileModes: an image that carries a set-user-ID-root program,
// device nodes (a disk's, the kernel's memory's, open to all) and files of
// a common uid is imported and runs, but its cached root, on the host
// under directories anyone may pass, holds neither the set-id bit nor the
// devices, and is root's alone: no local user gains root, or the image's
// files, through the cache.
func TestImageHostileModes(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	run := imageCLIIn(t, dir)
	tarball := busyboxImageWith(t, nil,
		&tar.Header{Name: "bin/su", Typeflag: tar.TypeReg, Mode: 0o4755},
		&tar.Header{Name: "bin/wall", Typeflag: tar.TypeReg, Mode: 0o2755},
		&tar.Header{Name: "dev/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "dev/mem", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 1},
		&tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 8},
		&tar.Header{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "home/user/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1000, Gid: 1000})
	if out, errOut, code := run("image", "import", tarball); code != 0 || !strings.Contains(out, "cordon.test/extra:1") {
		t.Fatalf("import: %q %q %d", out, errOut, code)
	}
	if out, errOut, code := run("run", "--image", "cordon.test/extra:1", "--", "cat", "/etc/marker"); code != 0 || out != "from the image\n" {
		t.Fatalf("run: %q %q %d", out, errOut, code)
	}
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && (info.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeDevice|os.ModeCharDevice) != 0 || info.Sys().(*syscall.Stat_t).Uid != 0) {
			found = append(found, fmt.Sprintf("%s %v uid %d", p, info.Mode(), info.Sys().(*syscall.Stat_t).Uid))
		}
		return nil
	})
	if len(found) > 0 {
		t.Fatalf("in the image cache:\n%s", strings.Join(found, "\n"))
	}
}

// TestDaemonImageRefusals: through the daemon, an image reference that is
// none is the caller's mistake (400), checked before any network (a
// registry named ".." was once dialled, and a bad digest answered 500),
// and an image its registry does not have is 404; a registry that cannot
// be reached stays 502.
func TestDaemonImageRefusals(t *testing.T) {
	testutil.RequiresRoot(t)
	t.Setenv("CORDON_IMAGE_DIR", t.TempDir())
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		image  string
		status int
		says   string
	}{
		{"x@sha256:zz", 400, "not an image reference"},
		{"../../etc", 400, `its registry ".." is no host name`},
		{"a..b/x:1", 400, "is no host name"},
		{"NOT A REFERENCE!", 400, "not an image reference"},
		{strings.TrimPrefix(reg.URL, "http://") + "/none/here:1", 404, "no such image"},
		{"127.0.0.1:1/nothing:1", 502, "cannot be reached"},
	} {
		_, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Image: tc.image}})
		var e *api.Error
		if !errors.As(err, &e) || e.Status != tc.status || !strings.Contains(e.Message, tc.says) {
			t.Errorf("create with image %q: %v, want %d saying %q", tc.image, err, tc.status, tc.says)
		}
	}
}
