// Package image brings OCI images to sandboxes: from a registry, an OCI
// image layout directory or a `docker save`/OCI tarball, unpacked safely
// once into a content-addressed cache of root filesystems that every
// sandbox using the image shares read-only.
package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/hostname"
	"github.com/cordon-sandbox/cordon/internal/procid"
)

// Store is the cache. Safe for concurrent use, and across processes.
type Store struct {
	dir    string
	limits Limits
	mu     sync.Mutex
	busy   map[string]*sync.WaitGroup // unpacks in flight, by digest
	// Unpacked counts unpacks this store performed (tests read it).
	Unpacked int
	// Progress, if set, hears how an unpack goes: after every read of a
	// layer, and once with Done set when a layer is in.
	Progress func(Progress)
}

// Progress is one report of an unpack: layer Layer (from 1) of Layers,
// Bytes of it read so far (uncompressed).
type Progress struct {
	Digest        string
	Layer, Layers int
	Bytes         int64
	Done          bool
}

// progressReader reports each read of a layer to the store's Progress.
type progressReader struct {
	r  io.Reader
	p  Progress
	fn func(Progress)
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.Bytes += int64(n)
	r.fn(r.p)
	return n, err
}

// Record describes a cached image.
type Record struct {
	Digest   string    `json:"digest"` // the image config's digest
	Names    []string  `json:"names"`
	Bytes    int64     `json:"bytes"`
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"lastUsed"`
	// Env, User and WorkingDir are the image config's own: a sandbox of
	// the image takes Env and User unless its spec says otherwise.
	Env        []string `json:"env,omitempty"`
	User       string   `json:"user,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	// Configured says Env, User and WorkingDir were read (records older
	// than them lack them).
	Configured bool `json:"configured,omitempty"`
	// Defused says the root holds no device node, no set-id bit and
	// nothing owned by another than the store's user: unpacked so, or
	// made so since (an older cordon kept them).
	Defused bool `json:"defused,omitempty"`
}

// configure reads the image config's defaults into r.
func (r *Record) configure(img v1.Image) {
	cf, err := img.ConfigFile()
	if err != nil || cf == nil {
		return
	}
	r.Env, r.User, r.WorkingDir, r.Configured = cf.Config.Env, cf.Config.User, cf.Config.WorkingDir, true
}

// ErrNotFound: no cached image by that name or digest.
var ErrNotFound = errors.New("image not found in the cache")

// Open opens (creating) a store in dir, and removes what unpacks left
// behind whose process has died (a pull that was killed).
func Open(dir string, limits Limits) (*Store, error) {
	for _, d := range []string{dir, filepath.Join(dir, "images"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// Roots are handed out by their real path: tiers refuse one with a
	// symbolic link on its way (host.ExactDir).
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, err
	}
	s := &Store{dir: real, limits: limits, busy: map[string]*sync.WaitGroup{}}
	s.sweepTmp()
	if err := s.defuseOld(); err != nil {
		return nil, err
	}
	return s, nil
}

// defuseOld rids the roots that an older cordon unpacked of their device
// nodes, set-id bits and image owners, which the unpacker no longer makes
// (see apply): under directories anyone on the host may pass, they would
// give any local user a disk, or root, or the files of an image that
// names their uid.
func (s *Store) defuseOld() error {
	all, err := s.List()
	if err != nil {
		return err
	}
	for _, r := range all {
		if r.Defused {
			continue
		}
		unlock, err := s.lock(r.Digest)
		if err != nil {
			return err
		}
		err = defuse(filepath.Join(s.imageDir(r.Digest), "rootfs"))
		if err == nil {
			r.Defused = true
			err = s.writeRecord(r)
		}
		unlock()
		if err != nil {
			return fmt.Errorf("image %s: removing its device nodes and set-id bits: %w", r.Digest, err)
		}
	}
	return nil
}

// defuse removes the device nodes under root, gives everything to this
// process's user and clears every set-id bit.
func defuse(root string) error {
	uid, gid := os.Geteuid(), os.Getegid()
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeDevice != 0 {
			return os.Remove(p)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != uid || int(st.Gid) != gid) {
			if err := os.Lchown(p, uid, gid); err != nil {
				return err
			}
		}
		if d.Type()&fs.ModeSymlink == 0 && info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			// (A chown clears them from a file, not from a directory.)
			err = os.Chmod(p, info.Mode()&^(fs.ModeSetuid|fs.ModeSetgid))
		}
		return err
	})
}

// ownedName is a file name unique to this process and owned by it:
// "pid-start-random", which ownerAlive reads back.
func ownedName() string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return fmt.Sprintf("%d-%s-%s", os.Getpid(), procid.StartTime(os.Getpid()), hex.EncodeToString(rnd[:]))
}

// ownerAlive reports whether the process an ownedName names still runs;
// ok is false for a name of another shape.
func ownerAlive(name string) (alive, ok bool) {
	f := strings.SplitN(name, "-", 3)
	if len(f) != 3 {
		return false, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false, false
	}
	return procid.Alive(pid, f[1]), true
}

// sweepTmp removes the unpack directories of processes that have died: a
// pull killed midway leaves a partial root filesystem, which may be
// gigabytes, and nothing else would ever remove it.
func (s *Store) sweepTmp() {
	ents, _ := os.ReadDir(filepath.Join(s.dir, "tmp"))
	for _, e := range ents {
		if alive, ok := ownerAlive(e.Name()); e.IsDir() && ok && !alive {
			_ = os.RemoveAll(filepath.Join(s.dir, "tmp", e.Name()))
		}
	}
}

// DefaultDir is /var/lib/cordon/images as root, else the user cache.
func DefaultDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/cordon/images"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "cordon", "images")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("cordon-images-%d", os.Geteuid()))
}

// ErrUnreachable: a pull could not reach the image's registry.
var ErrUnreachable = errors.New("registry unreachable")

// ErrInvalidReference: what names the image is no image reference.
var ErrInvalidReference = errors.New("not an image reference")

// ErrNoSuchImage: the registry answered that it has no such image (or
// none the caller may pull).
var ErrNoSuchImage = errors.New("no such image")

// ParseReference reads ref as a pull would: an image reference whose
// registry is a host name or address (the parser's own check let ".."
// through, so "../../etc" became a pull from a host "..").
func ParseReference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidReference, ref, err)
	}
	host := r.Context().RegistryStr()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !strings.HasPrefix(host, "[") && net.ParseIP(host) == nil && !hostname.Valid(host) {
		return nil, fmt.Errorf("%w: %q: its registry %q is no host name", ErrInvalidReference, ref, r.Context().RegistryStr())
	}
	return r, nil
}

// Pull fetches ref from its registry and unpacks it. With no options the
// credentials come from the Docker config file; options replace that.
func (s *Store) Pull(ctx context.Context, ref string, opts ...remote.Option) (*Record, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	if len(opts) == 0 {
		opts = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	}
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	img, err := remote.Image(r, opts...)
	var nerr net.Error
	var oerr *net.OpError
	var terr *transport.Error
	switch {
	case err == nil:
	case errors.As(err, &nerr), errors.As(err, &oerr):
		return nil, fmt.Errorf("%w: pull %s: the registry %s cannot be reached (%v); to use an image from elsewhere, save it there (docker save -o img.tar %s) and import it here (cordon image import img.tar)", ErrUnreachable, ref, r.Context().RegistryStr(), err, ref)
	case errors.As(err, &terr) && (terr.StatusCode == http.StatusNotFound || terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden):
		return nil, fmt.Errorf("%w: pull %s: the registry %s has none it lets us pull (%v)", ErrNoSuchImage, ref, r.Context().RegistryStr(), err)
	default:
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return s.add(ctx, img, r.Name())
}

// Import reads a `docker save`/OCI tarball or an OCI image layout directory
// and unpacks every image in it under name (or the tarball's own tags).
func (s *Store) Import(ctx context.Context, path, as string) ([]*Record, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var imgs []v1.Image
	var names []string
	if st.IsDir() {
		idx, err := layout.ImageIndexFromPath(path)
		if err != nil {
			return nil, fmt.Errorf("%s is not an OCI image layout: %w", path, err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range m.Manifests {
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			imgs = append(imgs, img)
			names = append(names, d.Annotations["org.opencontainers.image.ref.name"])
		}
	} else {
		// A `docker save` tarball names its images in its manifest
		// (RepoTags): each is imported under its tags, as the engine
		// would load it. An OCI tarball, or an untagged image, gets none.
		opener := func() (io.ReadCloser, error) { return os.Open(path) }
		m, err := tarball.LoadManifest(opener)
		if err != nil || len(m) == 0 {
			return nil, fmt.Errorf("%s is not an image tarball: %v", path, err)
		}
		for _, d := range m {
			var tag *name.Tag
			if len(d.RepoTags) > 0 {
				if t, err := name.NewTag(d.RepoTags[0]); err == nil {
					tag = &t
				}
			}
			img, err := tarball.Image(opener, tag)
			if err != nil {
				return nil, fmt.Errorf("%s is not an image tarball: %w", path, err)
			}
			imgs = append(imgs, img)
			names = append(names, strings.Join(d.RepoTags, "\n"))
		}
	}
	if as != "" && len(imgs) != 1 {
		return nil, fmt.Errorf("%s holds %d images: a name (--name) is for one", path, len(imgs))
	}
	var out []*Record
	for i, img := range imgs {
		var tags []string
		for _, t := range strings.Split(names[i], "\n") {
			tags = append(tags, normalizeName(t)) // as a pull names it
		}
		if as != "" {
			tags = []string{as}
		}
		var r *Record
		for _, n := range tags {
			var err error
			if r, err = s.add(ctx, img, n); err != nil {
				return out, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Store) imageDir(digest string) string {
	return filepath.Join(s.dir, "images", strings.ReplaceAll(digest, ":", "-"))
}

// add unpacks img unless its root filesystem is already cached; concurrent
// adds of one image (in this process or others) unpack it once.
func (s *Store) add(ctx context.Context, img v1.Image, ref string) (*Record, error) {
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	digest := cfg.String()
	dir := s.imageDir(digest)
	unlock, err := s.lock(digest)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := s.record(digest)
	if errors.Is(err, ErrNotFound) {
		rec, err = s.unpack(ctx, img, digest, dir)
	}
	if err != nil {
		return nil, err
	}
	if !rec.Configured {
		rec.configure(img)
		if err := s.writeRecord(rec); err != nil {
			return nil, err
		}
	}
	if ref != "" && !contains(rec.Names, ref) {
		// A name points at one image: take it from any other.
		if err := s.untag(ref); err != nil {
			return nil, err
		}
		rec.Names = append(rec.Names, ref)
		sort.Strings(rec.Names)
		if err := s.writeRecord(rec); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lock serialises work on one digest, within and across processes.
func (s *Store) lock(digest string) (func(), error) {
	s.mu.Lock()
	for s.busy[digest] != nil {
		wg := s.busy[digest]
		s.mu.Unlock()
		wg.Wait()
		s.mu.Lock()
	}
	wg := &sync.WaitGroup{}
	wg.Add(1)
	s.busy[digest] = wg
	s.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(s.dir, "tmp", strings.ReplaceAll(digest, ":", "-")+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	release := func() {
		if f != nil {
			f.Close()
		}
		s.mu.Lock()
		delete(s.busy, digest)
		s.mu.Unlock()
		wg.Done()
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

func (s *Store) unpack(ctx context.Context, img v1.Image, digest, dir string) (*Record, error) {
	tmp := filepath.Join(s.dir, "tmp", ownedName())
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	u, err := newUnpacker(rootfs, s.limits)
	if err != nil {
		return nil, err
	}
	defer u.close()
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		var r io.Reader = rc
		var pr *progressReader
		if s.Progress != nil {
			pr = &progressReader{r: rc, p: Progress{Digest: digest, Layer: i + 1, Layers: len(layers)}, fn: s.Progress}
			r = pr
		}
		err = u.apply(r)
		rc.Close()
		if err != nil {
			return nil, err
		}
		if pr != nil {
			pr.p.Done = true
			s.Progress(pr.p)
		}
	}
	// Sandboxes run as unprivileged mapped users: the root must be
	// reachable by them.
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return nil, err
	}
	rec := &Record{Digest: digest, Bytes: u.bytes, Created: time.Now().UTC(), LastUsed: time.Now().UTC(), Defused: true}
	rec.configure(img)
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), b, 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	s.Unpacked++
	return rec, nil
}

func (s *Store) record(digest string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(s.imageDir(digest), "image.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var r Record
	return &r, json.Unmarshal(b, &r)
}

func (s *Store) writeRecord(r *Record) error {
	b, _ := json.Marshal(r)
	p := filepath.Join(s.imageDir(r.Digest), "image.json")
	if err := os.WriteFile(p+".new", b, 0o644); err != nil {
		return err
	}
	return os.Rename(p+".new", p)
}

// List returns every cached image.
func (s *Store) List() ([]*Record, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "images"))
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		if r, err := s.record(strings.Replace(e.Name(), "-", ":", 1)); err == nil {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Resolve finds a cached image by name or digest (a unique prefix will do).
func (s *Store) Resolve(ref string) (*Record, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	var found *Record
	for _, r := range all {
		if contains(r.Names, ref) || contains(r.Names, normalizeName(ref)) || strings.HasPrefix(r.Digest, ref) || strings.HasPrefix(strings.TrimPrefix(r.Digest, "sha256:"), ref) {
			if found != nil && found.Digest != r.Digest {
				return nil, fmt.Errorf("%q names more than one cached image", ref)
			}
			found = r
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, ref)
	}
	return found, nil
}

func normalizeName(ref string) string {
	if r, err := name.ParseReference(ref); err == nil {
		return r.Name()
	}
	return ref
}

func (s *Store) untag(ref string) error {
	all, err := s.List()
	if err != nil {
		return err
	}
	for _, r := range all {
		if contains(r.Names, ref) {
			var keep []string
			for _, n := range r.Names {
				if n != ref {
					keep = append(keep, n)
				}
			}
			r.Names = keep
			if err := s.writeRecord(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// Acquire returns an image's root filesystem for a sandbox and a release
// function; while held (by any process), the image is never removed.
func (s *Store) Acquire(ref string) (string, func(), error) {
	r, err := s.Resolve(ref)
	if err != nil {
		return "", nil, err
	}
	dir := s.imageDir(r.Digest)
	leases := filepath.Join(dir, "leases")
	if err := os.MkdirAll(leases, 0o755); err != nil {
		return "", nil, err
	}
	lease := filepath.Join(leases, ownedName())
	if err := os.WriteFile(lease, nil, 0o644); err != nil {
		return "", nil, err
	}
	r.LastUsed = time.Now().UTC()
	_ = s.writeRecord(r)
	return filepath.Join(dir, "rootfs"), func() { os.Remove(lease) }, nil
}

// Root is Acquire for a sandbox that names ref: pulled first where it is
// not cached. It returns the image's record too, for what its config sets.
func (s *Store) Root(ctx context.Context, ref string) (string, func(), *Record, error) {
	root, release, err := s.Acquire(ref)
	if errors.Is(err, ErrNotFound) {
		if _, err = s.Pull(ctx, ref); err != nil {
			return "", nil, nil, err
		}
		root, release, err = s.Acquire(ref)
	}
	if err != nil {
		return "", nil, nil, err
	}
	rec, err := s.Resolve(ref)
	if err != nil {
		release()
		return "", nil, nil, err
	}
	return root, release, rec, nil
}

// Remove deletes a cached image unless a sandbox holds it.
func (s *Store) Remove(ref string) error {
	r, err := s.Resolve(ref)
	if err != nil {
		return err
	}
	unlock, err := s.lock(r.Digest)
	if err != nil {
		return err
	}
	defer unlock()
	if s.inUse(r.Digest) {
		return fmt.Errorf("image %s is in use by a sandbox", ref)
	}
	return os.RemoveAll(s.imageDir(r.Digest))
}

// GC removes least recently used images no sandbox holds until the cache
// is under maxBytes; it returns what it removed.
func (s *Store) GC(maxBytes int64) ([]*Record, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	var total int64
	for _, r := range all {
		total += r.Bytes
	}
	sort.Slice(all, func(i, j int) bool { return all[i].LastUsed.Before(all[j].LastUsed) })
	var removed []*Record
	for _, r := range all {
		if total <= maxBytes {
			break
		}
		if s.inUse(r.Digest) {
			continue
		}
		if err := s.Remove(r.Digest); err != nil {
			continue
		}
		total -= r.Bytes
		removed = append(removed, r)
	}
	return removed, nil
}

// inUse reports whether a live process holds a lease on the image.
func (s *Store) inUse(digest string) bool {
	ents, _ := os.ReadDir(filepath.Join(s.imageDir(digest), "leases"))
	for _, e := range ents {
		alive, ok := ownerAlive(e.Name())
		if !ok {
			continue
		}
		if alive {
			return true
		}
		os.Remove(filepath.Join(s.imageDir(digest), "leases", e.Name()))
	}
	return false
}
