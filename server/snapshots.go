package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	agentclient "github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
	"github.com/cordon-sandbox/cordon/server/client"
)

// A snapshot is taken through the sandbox's agent, on every tier alike: a
// shell in the sandbox stops every workload process (SIGSTOP to all the
// sandbox user may signal: the agent runs as another identity and is not
// among them), syncs, and writes a tar of the workspace and the user's
// home to its stdout; the processes go on when it ends. The daemon reads
// that tar as it comes, clears set-id bits, leaves out devices and
// fifos, refuses names that leave the tree, and stores it compressed
// under its own digest.
const captureScript = `kill -STOP -1 2>/dev/null; kill -STOP -1 2>/dev/null
trap 'kill -CONT -1 2>/dev/null' EXIT
sync
ws=$(pwd)
set -- "${ws#/}"
if [ -n "${HOME:-}" ] && [ "$HOME" != / ] && [ -d "$HOME" ]; then
	case "$HOME/" in "$ws"/*) ;; *) set -- "$@" "${HOME#/}" ;; esac
fi
tar -C / -cf - --numeric-owner "$@"
`

// thawScript lets the workload go on should a capture have ended before
// its own trap ran (a cancelled or timed-out capture).
const thawScript = `kill -CONT -1 2>/dev/null; true`

// restoreScript unpacks a snapshot's artifact, uploaded to $1, at /, as
// the sandbox user (modes kept, owners the user's), and removes it.
const restoreScript = `trap 'rm -f "$1"' EXIT
tar -C / -xzpf "$1" --no-same-owner`

// snapshotTimeout bounds a capture or a restore.
const snapshotTimeout = 30 * time.Minute

func (s *Server) snapshotDir() string { return filepath.Join(s.cfg.StateDir, "snapshots") }

func (s *Server) artifact(digest string) string {
	return filepath.Join(s.snapshotDir(), digest+".tar.gz")
}

func newSnapshotID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "snap_" + hex.EncodeToString(b[:])
}

// errBadArchive marks a tar that cannot be taken as a snapshot.
var errBadArchive = errors.New("not a snapshot archive")

// hostGrace is how long past a capture's or restore's own timeout the
// daemon waits before it gives up on the agent: the host holds the
// deadline, not only the agent.
const hostGrace = 30 * time.Second

// capture reads e's writable state into a compressed archive in the store
// (not yet named by its digest: addSnapshot does that).
func (s *Server) capture(ctx context.Context, e *entry, tenant string) (archived, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout+hostGrace)
	defer cancel()
	ac := e.sb.Client()
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = ac.Exec(tctx, "/bin/sh", agentclient.ExecOptions{Args: []string{"-c", thawScript}, Timeout: 5 * time.Second})
	}()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	go func() {
		res, err := ac.Exec(ctx, "/bin/sh", agentclient.ExecOptions{Args: []string{"-c", captureScript}, Timeout: snapshotTimeout,
			MaxOutputBytes: 1 << 50, RawOutput: true, Stdout: pw, Stderr: &limitedWriter{w: &stderr, n: 4096}})
		switch {
		case err != nil:
			pw.CloseWithError(err)
		case res.ExitCode != 0 || res.TimedOut:
			pw.CloseWithError(fmt.Errorf("the capture's tar exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String())))
		default:
			pw.Close()
		}
	}()
	a, err := s.storeArchive(pr, tenant)
	pr.CloseWithError(errors.New("capture over"))
	return a, err
}

// archived is a checked, compressed archive in the store, under a
// temporary name until addSnapshot names it by its digest.
type archived struct {
	tmp, digest string
	size        int64
	files       int
	roots       []string
}

// errTooLarge marks a snapshot past Limits.MaxSnapshotBytes.
var errTooLarge = errors.New("snapshot too large")

// storeArchive writes the tar read from r, each header cleaned
// (cleanHeader), compressed into a temporary file of the store; at most
// Limits.MaxSnapshotBytes of content (headers counted) is read, and at
// most what tenant's snapshots may still hold is written (its
// Limits.MaxSnapshotStorePerTenant less what they hold): a tenant at its
// bound once had up to 16 GiB written to the daemon's disk before
// addSnapshot refused the snapshot.
func (s *Server) storeArchive(r io.Reader, tenant string) (a archived, err error) {
	if err := os.MkdirAll(s.snapshotDir(), 0o700); err != nil {
		return a, err
	}
	budget, err := s.snapshotBudget(tenant)
	if err != nil {
		return a, err
	}
	f, err := os.CreateTemp(s.snapshotDir(), ".partial-*")
	if err != nil {
		return a, err
	}
	defer func() {
		f.Close()
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	limit := s.cfg.Limits.MaxSnapshotBytes
	r = &io.LimitedReader{R: r, N: limit + 1}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(f, h), max: budget, over: func() error {
		return s.storeFull("this one would pass it")
	}}
	gz, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	tw := tar.NewWriter(gz)
	tr := tar.NewReader(r)
	files := 0
	var roots []string
	var content int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if r.(*io.LimitedReader).N <= 0 {
				return a, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
			}
			return a, err
		}
		// A sparse file's apparent size counts: that is what is stored.
		if content += hdr.Size + 512; content > limit {
			return a, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
		}
		hdr, keep, err := cleanHeader(hdr)
		if err != nil {
			return a, err
		}
		if !keep {
			continue
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !slices.ContainsFunc(roots, func(r string) bool { return name == r || strings.HasPrefix(name, r+"/") }) {
			roots = append(roots, name)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return a, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return a, err
			}
		}
		files++
	}
	if err := tw.Close(); err != nil {
		return a, err
	}
	if err := gz.Close(); err != nil {
		return a, err
	}
	if err := f.Sync(); err != nil {
		return a, err
	}
	return archived{tmp: f.Name(), digest: "sha256-" + hex.EncodeToString(h.Sum(nil)), size: cw.n, files: files, roots: roots}, nil
}

// errSnapshotQuota: the tenant holds Limits.MaxSnapshotsPerTenant, or its
// snapshots Limits.MaxSnapshotStorePerTenant bytes.
var errSnapshotQuota = errors.New("snapshot quota")

// addSnapshot records sn, its artifact named by its digest: tmp, a new
// archive (removed when an equal one is stored already), or "" for a
// snapshot sharing a stored artifact. Under snapMu, so that a delete
// cannot take an artifact away between the check and the record.
func (s *Server) addSnapshot(sn api.Snapshot, tmp string) error {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if tmp != "" {
		defer os.Remove(tmp)
	}
	all, err := s.store.snapshots()
	if err != nil {
		return err
	}
	n, held := 0, sn.Size
	for _, o := range all {
		if o.Tenant == sn.Tenant {
			n++
			held += o.Size // each counts whole, an artifact shared or not
		}
	}
	if n >= s.cfg.Limits.MaxSnapshotsPerTenant {
		return fmt.Errorf("%w: a tenant may keep at most %d snapshots", errSnapshotQuota, s.cfg.Limits.MaxSnapshotsPerTenant)
	}
	if held > s.cfg.Limits.MaxSnapshotStorePerTenant {
		return s.storeFull(fmt.Sprintf("this one of %d would bring them to %d", sn.Size, held))
	}
	if _, err := os.Stat(s.artifact(sn.Digest)); err != nil {
		if tmp == "" {
			return fmt.Errorf("%w: its stored state is gone", errNoSnapshot)
		}
		if err := os.Rename(tmp, s.artifact(sn.Digest)); err != nil {
			return err
		}
	}
	return s.store.putSnapshot(sn)
}

// snapshotError answers a snapshot's refusal.
func snapshotError(w http.ResponseWriter, what string, err error) {
	switch {
	case errors.Is(err, errSnapshotQuota):
		writeError(w, http.StatusTooManyRequests, api.CodeQuota, err.Error())
	case errors.Is(err, errTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, what+": "+err.Error())
	case errors.Is(err, errNoSnapshot):
		writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
	default:
		writeError(w, http.StatusUnprocessableEntity, api.CodeSnapshotFailed, what+": "+err.Error())
	}
}

// cleanHeader keeps what a snapshot may hold: regular files, directories
// and symlinks, under relative names that stay in the tree, without
// set-id bits, owned by no one in particular.
func cleanHeader(h *tar.Header) (*tar.Header, bool, error) {
	name := path.Clean(strings.TrimSuffix(h.Name, "/"))
	if path.IsAbs(h.Name) || name == ".." || strings.HasPrefix(name, "../") || name == "." {
		return nil, false, fmt.Errorf("%w: entry %q leaves the tree", errBadArchive, h.Name)
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
	case tar.TypeLink:
		t := path.Clean(h.Linkname)
		if path.IsAbs(h.Linkname) || t == ".." || strings.HasPrefix(t, "../") {
			return nil, false, fmt.Errorf("%w: hard link %q leaves the tree", errBadArchive, h.Name)
		}
	default:
		return nil, false, nil // devices, fifos, sockets: not state a sandbox may carry
	}
	out := &tar.Header{Typeflag: h.Typeflag, Name: h.Name, Linkname: h.Linkname, Size: h.Size, Mode: h.Mode &^ 0o7000,
		ModTime: h.ModTime, Format: tar.FormatPAX}
	if h.Typeflag == tar.TypeDir && !strings.HasSuffix(out.Name, "/") {
		out.Name += "/"
	}
	return out, true, nil
}

// countingWriter counts what it passes on to w; past max bytes it writes
// no more and fails with over's error.
type countingWriter struct {
	w    io.Writer
	n    int64
	max  int64
	over func() error
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.over != nil && c.n+int64(len(b)) > c.max {
		return 0, c.over()
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// storeFull is the refusal of a snapshot past what a tenant's snapshots
// may hold, how it would pass it said in why.
func (s *Server) storeFull(why string) error {
	return fmt.Errorf("%w: a tenant's snapshots may hold at most %d bytes on this daemon (cordon serve --max-snapshot-store), and %s; delete some (cordon snapshot rm)", errSnapshotQuota, s.cfg.Limits.MaxSnapshotStorePerTenant, why)
}

// snapshotBudget is what tenant's snapshots may still hold in the store.
func (s *Server) snapshotBudget(tenant string) (int64, error) {
	all, err := s.store.snapshots()
	if err != nil {
		return 0, err
	}
	left := s.cfg.Limits.MaxSnapshotStorePerTenant
	for _, o := range all {
		if o.Tenant == tenant {
			left -= o.Size
		}
	}
	return max(left, 0), nil
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}

// restore unpacks a stored snapshot into sb: its artifact is uploaded
// whole (compressed) and unpacked inside.
func (s *Server) restore(ctx context.Context, sb *sandbox.Sandbox, digest string) error {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout+hostGrace)
	defer cancel()
	f, err := os.Open(s.artifact(digest))
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	ac := sb.Client()
	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := ".cordon-restore-" + hex.EncodeToString(b[:]) + ".tar.gz"
	if err := ac.Upload(ctx, tmp, f, st.Size()); err != nil {
		return fmt.Errorf("uploading the snapshot: %w", err)
	}
	var stderr bytes.Buffer
	res, err := ac.Exec(ctx, "/bin/sh", agentclient.ExecOptions{Args: []string{"-c", restoreScript, "sh", tmp},
		Timeout: snapshotTimeout, Stderr: &limitedWriter{w: &stderr, n: 4096}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("unpacking the snapshot: tar exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// handleSnapshot is POST /v1/sandboxes/{id}/snapshot.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	var req api.SnapshotRequest
	if r.ContentLength != 0 && !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &req) {
		return
	}
	if req.TTLSeconds < 0 || req.TTLSeconds > maxDurationSeconds {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("ttlSeconds %d: want 0 (none) to %d", req.TTLSeconds, int64(maxDurationSeconds)))
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	sn, err := s.takeSnapshot(r.Context(), e, req.TTLSeconds)
	if err != nil {
		snapshotError(w, "the snapshot could not be taken", err)
		return
	}
	writeJSON(w, http.StatusCreated, sn)
}

func (s *Server) takeSnapshot(ctx context.Context, e *entry, ttlSeconds int64) (api.Snapshot, error) {
	rec := s.recordOf(e)
	a, err := s.capture(ctx, e, rec.Tenant)
	if err != nil {
		return api.Snapshot{}, err
	}
	sn := a.snapshot(rec.Tenant, rec.ID, rec.Spec)
	if ttlSeconds > 0 {
		exp := sn.CreatedAt.Add(time.Duration(ttlSeconds) * time.Second)
		sn.ExpiresAt = &exp
	}
	if err := s.addSnapshot(sn, a.tmp); err != nil {
		return api.Snapshot{}, err
	}
	s.emit(api.EventSnapshot, rec, map[string]any{"snapshot": sn.ID, "digest": sn.Digest, "size": sn.Size})
	return sn, nil
}

// snapshot describes a, as tenant's, taken from source of spec.
func (a archived) snapshot(tenant, source string, spec api.Spec) api.Snapshot {
	paths := make([]string, len(a.roots))
	for i, r := range a.roots {
		paths[i] = "/" + r
	}
	return api.Snapshot{ID: newSnapshotID(), Tenant: tenant, Source: source, Spec: spec, Paths: paths,
		Digest: a.digest, Size: a.size, Files: a.files, CreatedAt: time.Now().UTC()}
}

// snapshotFor finds the caller's snapshot id.
func (s *Server) snapshotFor(c *caller, id string) (api.Snapshot, error) {
	var sn api.Snapshot
	found, err := s.store.get(bucketSnapshots, id, &sn)
	if err != nil {
		return api.Snapshot{}, err
	}
	if !found || !(sn.Tenant == c.tenant || c.admin && c.tenant == LocalTenant) || expired(sn, time.Now()) {
		return api.Snapshot{}, fmt.Errorf("%w %s", errNoSnapshot, id)
	}
	return sn, nil
}

var errNoSnapshot = errors.New("no snapshot")

func expired(sn api.Snapshot, now time.Time) bool {
	return sn.ExpiresAt != nil && now.After(*sn.ExpiresAt)
}

func (s *Server) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	all, err := s.store.snapshots()
	if err != nil {
		writeErr(w, err)
		return
	}
	out := api.SnapshotList{Snapshots: []api.Snapshot{}}
	now := time.Now()
	for _, sn := range all {
		if sn.Tenant == c.tenant && !expired(sn, now) {
			out.Snapshots = append(out.Snapshots, sn)
		}
	}
	slices.SortFunc(out.Snapshots, func(a, b api.Snapshot) int { return a.CreatedAt.Compare(b.CreatedAt) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGetSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := s.snapshotFor(callerOf(r), r.PathValue("sid"))
	if err != nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, sn)
}

func (s *Server) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := s.snapshotFor(callerOf(r), r.PathValue("sid"))
	if err != nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
		return
	}
	if err := s.dropSnapshot(sn); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// dropSnapshot removes a snapshot, and its artifact when no other
// snapshot shares it.
func (s *Server) dropSnapshot(sn api.Snapshot) error {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if err := s.store.deleteSnapshot(sn.ID); err != nil {
		return err
	}
	all, err := s.store.snapshots()
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.Digest == sn.Digest {
			return nil
		}
	}
	if err := os.Remove(s.artifact(sn.Digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// reapSnapshots drops the snapshots past their TTL, looking (a scan of
// them all) at every tenth of the reaper's rounds.
func (s *Server) reapSnapshots(now time.Time) {
	if last := s.snapReaped.Load(); now.UnixNano()-last < int64(10*s.cfg.ReapInterval) {
		return
	}
	s.snapReaped.Store(now.UnixNano())
	all, err := s.store.snapshots()
	if err != nil {
		return
	}
	for _, sn := range all {
		if expired(sn, now) {
			if err := s.dropSnapshot(sn); err != nil {
				s.log.Warn("an expired snapshot could not be removed; will retry", "snapshot", sn.ID, "err", err)
			}
		}
	}
}

// handleExportSnapshot streams a snapshot as a tar: snapshot.json, then
// the artifact (data.tar.gz), for POST /v1/snapshots/import elsewhere.
func (s *Server) handleExportSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := s.snapshotFor(callerOf(r), r.PathValue("sid"))
	if err != nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
		return
	}
	f, err := os.Open(s.artifact(sn.Digest))
	if err != nil {
		writeErr(w, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		writeErr(w, err)
		return
	}
	meta, _ := json.Marshal(sn)
	w.Header().Set("Content-Type", "application/x-tar")
	tw := tar.NewWriter(w)
	_ = tw.WriteHeader(&tar.Header{Name: "snapshot.json", Mode: 0o644, Size: int64(len(meta)), ModTime: sn.CreatedAt})
	_, _ = tw.Write(meta)
	_ = tw.WriteHeader(&tar.Header{Name: "data.tar.gz", Mode: 0o644, Size: st.Size(), ModTime: sn.CreatedAt})
	if _, err := io.Copy(tw, f); err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = tw.Close()
}

// handleImportSnapshot is POST /v1/snapshots/import: an exported snapshot
// becomes the caller's, under a new id; its data is checked as a capture
// is.
func (s *Server) handleImportSnapshot(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	// The whole body is bounded too, the entries import skips included.
	tr := tar.NewReader(http.MaxBytesReader(w, r.Body, s.cfg.Limits.MaxSnapshotBytes+2<<20))
	var meta api.Snapshot
	seenMeta := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "the body is not an exported snapshot (want snapshot.json, then data.tar.gz)")
			return
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "the body is not a tar: "+err.Error())
			return
		}
		switch h.Name {
		case "snapshot.json":
			if h.Size > 1<<20 || json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&meta) != nil {
				writeError(w, http.StatusBadRequest, api.CodeInvalid, "snapshot.json is not a snapshot's description")
				return
			}
			seenMeta = true
			continue
		case "data.tar.gz":
		default:
			continue
		}
		if !seenMeta {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "snapshot.json must come before data.tar.gz")
			return
		}
		gz, err := gzip.NewReader(tr)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "data.tar.gz is not gzip: "+err.Error())
			return
		}
		a, err := s.storeArchive(gz, c.tenant)
		if errors.Is(err, errTooLarge) || errors.Is(err, errSnapshotQuota) {
			snapshotError(w, "data.tar.gz", err)
			return
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalid, "data.tar.gz: "+err.Error())
			return
		}
		spec := meta.Spec
		if _, err := s.toSpec(spec); err != nil {
			spec = api.Spec{} // a spec this daemon cannot honour gives way to its defaults
		}
		sn := a.snapshot(c.tenant, meta.Source, spec)
		sn.ExpiresAt = meta.ExpiresAt
		if err := s.addSnapshot(sn, a.tmp); err != nil {
			snapshotError(w, "the import", err)
			return
		}
		writeJSON(w, http.StatusCreated, sn)
		return
	}
}

// handleFork is POST /v1/sandboxes/{id}/fork: count new sandboxes, each
// with the source's spec and its writable state as it is now (taken once,
// with its processes stopped for the capture), each with an identity of
// its own (id, agent token, boot id, hostname).
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	var req api.ForkRequest
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &req) {
		return
	}
	if req.Count < 1 || req.Count > api.MaxForks {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("count %d: want 1 to %d", req.Count, api.MaxForks))
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	key, _ := bearerSecret(r.Header.Get("Authorization"))
	cl := client.NewTransport("http://cordon", key, inproc{s.Handler()})
	if e.sb.OnDisk() {
		// A sandbox on a disk is forked by copy-on-write copies of its
		// disk where the disks' file system has reflinks; elsewhere its
		// files are copied as a snapshot's are.
		clones, err := s.cfg.Provider.CloneDisks(r.Context(), e.sb, req.Count)
		if err == nil {
			s.forkFrom(w, r, cl, req, s.recordOf(e).Spec, clones)
			return
		}
		if !errors.Is(err, sandbox.ErrUnsupported) {
			writeErr(w, err)
			return
		}
	}
	sn, err := s.takeSnapshot(r.Context(), e, 3600)
	if err != nil {
		snapshotError(w, "the source's state could not be taken", err)
		return
	}
	defer s.dropSnapshot(sn)
	// Each fork is an ordinary create from that snapshot, as the caller:
	// its quotas and pools apply.
	s.forks(w, r, cl, req.Count, func(ctx context.Context, i int) (*api.Sandbox, error) {
		return cl.Create(ctx, api.CreateRequest{FromSnapshot: sn.ID, TTLSeconds: req.TTLSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds, Labels: req.Labels})
	})
}

// forkFrom makes a fork on each clone of the source's disk, as the
// caller (quotas apply), with the source's spec; the clones no fork took
// are removed.
func (s *Server) forkFrom(w http.ResponseWriter, r *http.Request, cl *client.Client, req api.ForkRequest, spec api.Spec, clones []*sandbox.DiskClone) {
	defer func() {
		for _, c := range clones {
			if c != nil {
				c.Discard()
			}
		}
	}()
	s.forks(w, r, cl, len(clones), func(ctx context.Context, i int) (*api.Sandbox, error) {
		sb, err := cl.Create(context.WithValue(ctx, diskCloneKey{}, clones[i]), api.CreateRequest{Spec: spec, TTLSeconds: req.TTLSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds, Labels: req.Labels})
		if err == nil {
			clones[i] = nil // the fork's
		}
		return sb, err
	})
}

// diskCloneKey carries, in an in-process create's context (never from a
// caller), the disk clone the sandbox is to be made on.
type diskCloneKey struct{}

// forks makes n forks with create, all or nothing, and answers them.
func (s *Server) forks(w http.ResponseWriter, r *http.Request, cl *client.Client, n int, create func(ctx context.Context, i int) (*api.Sandbox, error)) {
	out := api.ForkResult{Sandboxes: []api.Sandbox{}}
	for i := range n {
		sb, err := create(r.Context(), i)
		if err != nil {
			// The forks made so far go: a fork is all or nothing.
			for _, f := range out.Sandboxes {
				_ = cl.Delete(context.WithoutCancel(r.Context()), f.ID)
			}
			var ae *api.Error
			if errors.As(err, &ae) {
				writeError(w, ae.Status, ae.Code, "fork: "+ae.Message)
				return
			}
			writeErr(w, err)
			return
		}
		out.Sandboxes = append(out.Sandboxes, *sb)
	}
	writeJSON(w, http.StatusCreated, out)
}
