package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

type ent struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layer(t testing.TB, ents ...ent) v1.Layer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func img(t testing.TB, layers ...v1.Layer) v1.Image {
	i, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func store(t testing.TB, limits Limits) *Store {
	s, err := Open(t.TempDir(), limits)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rootOf(t *testing.T, s *Store, r *Record) string {
	p, release, err := s.Acquire(r.Digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return p
}

func TestWhiteouts(t *testing.T) {
	s := store(t, DefaultLimits)
	l1 := layer(t, ent{name: "a/", typ: tar.TypeDir}, ent{name: "a/x", body: "x"}, ent{name: "a/y", body: "y"}, ent{name: "b.txt", body: "b"}, ent{name: "c/d", body: "d"})
	l2 := layer(t, ent{name: "a/.wh..wh..opq"}, ent{name: "a/z", body: "z"}, ent{name: ".wh.b.txt"}, ent{name: "c/e", body: "e"})
	r, err := s.add(context.Background(), img(t, l1, l2), "test/whiteouts:1")
	if err != nil {
		t.Fatal(err)
	}
	root := rootOf(t, s, r)
	list := func(d string) string {
		ents, _ := os.ReadDir(filepath.Join(root, d))
		var n []string
		for _, e := range ents {
			n = append(n, e.Name())
		}
		return strings.Join(n, ",")
	}
	if got := list("a"); got != "z" {
		t.Errorf("opaque dir holds %q, want z", got)
	}
	if got := list("."); got != "a,c" {
		t.Errorf("root holds %q, want a,c", got)
	}
	if got := list("c"); got != "d,e" {
		t.Errorf("c holds %q", got)
	}
}

// TestHostileLayers: nothing lands outside the root, whatever the layer
// says; what cannot be placed inside is refused.
func TestHostileLayers(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644)
	before := listTree(outside)
	s := store(t, DefaultLimits)
	r, err := s.add(context.Background(), img(t, layer(t,
		ent{name: "../../../" + outside + "/dotdot", body: "x"},
		ent{name: outside + "/absolute", body: "x"},
		ent{name: "rootlink", typ: tar.TypeSymlink, link: "/"},
		ent{name: "rootlink" + outside + "/viaroot", body: "x"},
		ent{name: "outlink", typ: tar.TypeSymlink, link: outside},
		ent{name: "outlink/viaout", body: "x"},
		ent{name: "up", typ: tar.TypeSymlink, link: "../../../../.."},
		ent{name: "up/viaup", body: "x"},
	)), "")
	if err != nil {
		t.Fatal(err)
	}
	if after := listTree(outside); after != before {
		t.Fatalf("a layer wrote outside its root:\n%s", after)
	}
	root := rootOf(t, s, r)
	for _, p := range []string{outside + "/dotdot", outside + "/absolute", outside + "/viaroot", outside + "/viaout", "viaup"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s was not placed inside the root: %v", p, err)
		}
	}
	// A hard link to something outside the image is refused outright.
	_, err = s.add(context.Background(), img(t, layer(t, ent{name: "hl", typ: tar.TypeLink, link: "../../../../" + outside + "/keep"})), "")
	if !errors.Is(err, ErrHostileLayer) {
		t.Fatalf("hard link out: %v", err)
	}
	if after := listTree(outside); after != before {
		t.Fatal("the refused hard link changed the outside")
	}
}

func listTree(dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			b.WriteString(p + "\n")
		}
		return nil
	})
	return b.String()
}

func TestLayerBomb(t *testing.T) {
	s := store(t, Limits{MaxBytes: 1 << 20, MaxEntries: 100})
	_, err := s.add(context.Background(), img(t, layer(t, ent{name: "big", body: strings.Repeat("x", 2<<20)})), "")
	if !errors.Is(err, ErrHostileLayer) {
		t.Fatalf("bytes bomb: %v", err)
	}
	var many []ent
	for i := 0; i < 200; i++ {
		many = append(many, ent{name: "f" + strings.Repeat("x", i%10) + string(rune('a'+i%26)) + "-" + string(rune('a'+i/26))})
	}
	if _, err := s.add(context.Background(), img(t, layer(t, many...)), ""); !errors.Is(err, ErrHostileLayer) {
		t.Fatalf("entries bomb: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.dir, "tmp")); len(ents) > 2 {
		t.Fatalf("failed unpacks left %d entries behind", len(ents))
	}
}

// TestPull: a registry on loopback, behind basic auth; concurrent pulls of
// one image unpack it once.
func TestPull(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "cordon" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/test/app:1"
	auth := remote.WithAuth(&authn.Basic{Username: "cordon", Password: "s3cret"})
	tag, _ := name.ParseReference(ref)
	image := img(t, layer(t, ent{name: "etc/marker", body: "pulled\n"}))
	if err := remote.Write(tag, image, auth); err != nil {
		t.Fatal(err)
	}
	s := store(t, DefaultLimits)
	if _, err := s.Pull(context.Background(), ref); err == nil {
		t.Fatal("pulled without credentials")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Pull(context.Background(), ref, auth)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.Unpacked != 1 {
		t.Fatalf("unpacked %d times, want once", s.Unpacked)
	}
	r, err := s.Resolve(ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := image.ConfigName()
	if r.Digest != want.String() {
		t.Fatalf("digest %s, want %s", r.Digest, want)
	}
	if b, _ := os.ReadFile(filepath.Join(rootOf(t, s, r), "etc/marker")); string(b) != "pulled\n" {
		t.Fatalf("marker %q", b)
	}
}

func TestImportAndLifecycle(t *testing.T) {
	s := store(t, DefaultLimits)
	image := img(t, layer(t, ent{name: "hello", body: "hi"}))
	tarPath := filepath.Join(t.TempDir(), "img.tar")
	tag, _ := name.NewTag("example.test/saved:1")
	if err := tarball.WriteToFile(tarPath, tag, image); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Import(context.Background(), tarPath, "saved")
	if err != nil || len(recs) != 1 {
		t.Fatalf("tarball import: %v", err)
	}
	lp, err := layout.Write(filepath.Join(t.TempDir(), "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	other := img(t, layer(t, ent{name: "other", body: "o"}))
	if err := lp.AppendImage(other); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.Import(context.Background(), string(lp), "from-layout"); err != nil || len(recs) != 1 {
		t.Fatalf("layout import: %v", err)
	}
	all, _ := s.List()
	if len(all) != 2 {
		t.Fatalf("%d images listed", len(all))
	}
	_, release, err := s.Acquire("saved")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("saved"); err == nil {
		t.Fatal("removed an image in use")
	}
	if removed, _ := s.GC(0); len(removed) != 1 || removed[0].Names[0] != "from-layout" {
		t.Fatalf("GC removed %v, want only the unused image", removed)
	}
	release()
	if err := s.Remove("saved"); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.List(); len(all) != 0 {
		t.Fatalf("%d images left", len(all))
	}
}

// TestSweepTmp: opening a store removes the unpack directories of dead
// processes (a pull killed midway), and leaves a live process's, and
// whatever it cannot tell the owner of.
func TestSweepTmp(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	dead, live, other := "4194303-1-0a0b0c0d0e0f", ownedName(), "0a0b0c0d0e0f"
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(tmp, d, "rootfs", "usr"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(dir, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]bool{dead: false, live: true, other: true} {
		if _, err := os.Stat(filepath.Join(tmp, d)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", d, err == nil, want)
		}
	}
}

// TestHostileModes: what an image could turn against the host it is
// cached on does not reach the cache: no set-user-ID or set-group-ID bit
// (a root shell any local user could run), no device node (a disk any
// local user could open), no owner but the unpacker (a local user whose
// uid the image names could change it); the rest of each entry is kept.
func TestHostileModes(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "rootshell", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 2},
		{Name: "groupshell", Typeflag: tar.TypeReg, Mode: 0o2755, Size: 2},
		{Name: "shared/", Typeflag: tar.TypeDir, Mode: 0o3777},
		{Name: "mem", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 1},
		{Name: "disk", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 8, Devminor: 0},
		{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o644},
		{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "home/user/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1000, Gid: 1000},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			io.WriteString(tw, "#!")
		}
	}
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	s := store(t, DefaultLimits)
	r, err := s.add(context.Background(), img(t, l), "")
	if err != nil {
		t.Fatal(err)
	}
	root := rootOf(t, s, r)
	for name, want := range map[string]os.FileMode{"rootshell": 0o755, "groupshell": 0o755, "shared": os.ModeDir | os.ModeSticky | 0o777, "fifo": os.ModeNamedPipe | 0o644} {
		st, err := os.Lstat(filepath.Join(root, name))
		if err != nil || st.Mode() != want {
			t.Errorf("%s: %v %v, want %v", name, st.Mode(), err, want)
		}
	}
	for _, name := range []string{"mem", "disk"} {
		if _, err := os.Lstat(filepath.Join(root, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the device node %s was made: %v", name, err)
		}
	}
	// Whoever unpacks owns it all, not the owner the image names.
	if st, err := os.Stat(filepath.Join(root, "home/user")); err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
		t.Errorf("home/user: %v, want it the unpacker's", err)
	}
}

// TestDefuseOld: a root an older cordon unpacked, with an image's device
// nodes, set-id bits and owners, is rid of them when a store next opens;
// the record then says so, and the rest of the root is as it was.
func TestDefuseOld(t *testing.T) {
	testutil.RequiresRoot(t) // to make a device node
	dir := t.TempDir()
	s, err := Open(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.add(context.Background(), img(t, layer(t, ent{name: "bin/tool", body: "#!", mode: 0o755})), "test/old:1")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(s.imageDir(r.Digest), "rootfs")
	// As an older cordon left it.
	if err := unix.Mknod(filepath.Join(root, "disk"), unix.S_IFBLK|0o666, int(unix.Mkdev(8, 0))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "bin/tool"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(root, "bin"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	r.Defused = false
	if err := s.writeRecord(r); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "disk")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the device node stayed: %v", err)
	}
	if st, err := os.Stat(filepath.Join(root, "bin/tool")); err != nil || st.Mode() != 0o755 {
		t.Errorf("bin/tool: %v %v, want -rwxr-xr-x", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(root, "bin")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 || st.Sys().(*syscall.Stat_t).Gid != 0 {
		t.Errorf("bin: %v, want it root's", err)
	}
	if r, err := s.Resolve("test/old:1"); err != nil || !r.Defused {
		t.Errorf("the record: %+v %v", r, err)
	}
}
