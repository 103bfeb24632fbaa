package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// manifest lists a tree in a sandbox: every entry's path, type, mode, and
// for files their size and digest, sorted; the home directory's too.
const manifest = `cd && find . ~ -mindepth 1 \( -type f -printf '%p f %m %s ' -exec sh -c 'sha256sum < "$1" | cut -c1-16' sh {} \; \) -o \( ! -type f -printf '%p %y %m %l\n' \) | sort`

// TestSnapshots: a sandbox's workspace and home are captured with their
// bytes, modes and links while its processes are stopped (and go on
// after), restored into new sandboxes, forked 8 ways that diverge, kept
// per tenant, exported and imported, expired and collected.
func TestSnapshots(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx := t.Context()
	// Sandboxes here go with the daemon (it restarts midway).
	mk := func(req api.CreateRequest) *api.Sandbox {
		t.Helper()
		sb, err := c.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	src := mk(api.CreateRequest{})
	sh(t, c, src.ID, `mkdir -p tree/empty tree/sub && printf 'hello\n' > tree/a.txt && chmod 640 tree/a.txt &&
head -c 300000 /dev/urandom > tree/sub/blob && chmod 700 tree/sub && ln -s a.txt tree/link && ln tree/a.txt tree/hard &&
printf 'x' > tree/exec && chmod 755 tree/exec && echo home > ~/.profile-note && touch -d 2001-01-01 tree/a.txt`)
	// A program that runs through the capture: stopped for it, going on after.
	ac := c.Agent(src.ID)
	defer ac.Close()
	if _, err := ac.StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "while :; do date +%s%N >> ticks; sleep 0.01; done"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	before := sh(t, c, src.ID, manifest)
	sn, err := c.Snapshot(ctx, src.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sn.Source != src.ID || sn.Files < 8 || !strings.HasPrefix(sn.Digest, "sha256-") || len(sn.Paths) != 2 {
		t.Fatalf("snapshot: %+v", sn)
	}
	n1 := sh(t, c, src.ID, "wc -l < ticks")
	time.Sleep(200 * time.Millisecond)
	if n2 := sh(t, c, src.ID, "wc -l < ticks"); n2 == n1 {
		t.Errorf("the source's program did not go on after the capture (%s ticks)", n1)
	}
	// The source changes; the snapshot does not.
	sh(t, c, src.ID, "rm -r tree/sub && echo changed > tree/a.txt")
	restored := mk(api.CreateRequest{FromSnapshot: sn.ID})
	got := sh(t, c, restored.ID, manifest)
	// ticks grew between the listing and the capture: compare the rest.
	if strip(got) != strip(before) {
		t.Errorf("restored tree differs:\n%s\nwant\n%s", got, before)
	}
	if out := sh(t, c, restored.ID, "ls tree/a.txt -l --time-style=+%Y | cut -d' ' -f6; pgrep -c -f 'date +%s' || true"); out != "2001\n0\n" {
		t.Errorf("mtime or processes after restore: %q", out)
	}

	// Fork 8 ways: each its own sandbox and identity, each diverging.
	forks, err := c.Fork(ctx, src.ID, api.ForkRequest{Count: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 8 {
		t.Fatalf("%d forks", len(forks))
	}
	ids := map[string]bool{src.ID: true}
	boots := map[string]bool{}
	for i, f := range forks {
		if ids[f.ID] {
			t.Fatalf("fork %d reuses id %s", i, f.ID)
		}
		ids[f.ID] = true
		boots[sh(t, c, f.ID, "cat tree/a.txt; cat /proc/sys/kernel/random/boot_id 2>/dev/null || hostname")] = true
		sh(t, c, f.ID, "echo "+f.ID+" > mine")
	}
	for _, f := range forks {
		if got := sh(t, c, f.ID, "cat mine; ls tree"); got != f.ID+"\na.txt\nempty\nexec\nhard\nlink\n" {
			t.Errorf("fork %s: %q", f.ID, got)
		}
	}
	if sh(t, c, src.ID, "ls mine 2>/dev/null || echo none") != "none\n" {
		t.Error("a fork's write reached its source")
	}
	// Forks made no snapshot of their own that outlives them.
	if l, _ := c.Snapshots(ctx); len(l) != 1 {
		t.Errorf("snapshots after forks: %+v", l)
	}

	// Per tenant: another tenant sees nothing of it.
	other, _ := d.tenant(t, "other")
	if _, err := other.GetSnapshot(ctx, sn.ID); !isAPIStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's get: %v", err)
	}
	if _, err := other.Create(ctx, api.CreateRequest{FromSnapshot: sn.ID}); !isAPIStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's restore: %v", err)
	}
	if err := other.DeleteSnapshot(ctx, sn.ID); !isAPIStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's delete: %v", err)
	}

	// Export, import on another daemon, restore there.
	var exp bytes.Buffer
	if err := c.ExportSnapshot(ctx, sn.ID, &exp); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t)
	imp, err := d2.local.ImportSnapshot(ctx, bytes.NewReader(exp.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if imp.ID == sn.ID || imp.Digest != sn.Digest {
		t.Errorf("imported: %+v, exported %+v", imp, sn)
	}
	there := create(t, d2.local, api.CreateRequest{FromSnapshot: imp.ID})
	if got := sh(t, d2.local, there.ID, manifest); strip(got) != strip(before) {
		t.Errorf("tree restored on another daemon differs:\n%s", got)
	}

	// Equal states share an artifact, which goes with the last of them;
	// a restart keeps them.
	twin1, err := c.Snapshot(ctx, restored.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	twin2, err := c.Snapshot(ctx, restored.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if twin1.Digest != twin2.Digest || twin1.ID == twin2.ID {
		t.Fatalf("two snapshots of one unchanged state: %s %s", twin1.Digest, twin2.Digest)
	}
	art := filepath.Join(d.stateDir, "snapshots", twin1.Digest+".tar.gz")
	d.stop(t, false)
	d.start(t)
	c = d.local
	if _, err := c.GetSnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, twin1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(art); err != nil {
		t.Errorf("artifact of a remaining snapshot: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, twin2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(art); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("artifact after the last snapshot went: %v", err)
	}

	// A TTL ends one, artifact and all.
	short, err := c.Snapshot(ctx, src.ID, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(d.stateDir, "snapshots", short.Digest+".tar.gz")); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an expired snapshot's artifact stayed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.GetSnapshot(ctx, short.ID); !isAPIStatus(err, http.StatusNotFound) {
		t.Errorf("an expired snapshot: %v", err)
	}
}

// strip drops the ticks file's line (it grows while the tree is listed).
func strip(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "./ticks") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func isAPIStatus(err error, status int) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Status == status
}

// TestSnapshotImportAttacks: an imported snapshot is held to what a
// capture may carry: set-id bits cleared, devices and fifos left out,
// names and links that leave the tree refused.
func TestSnapshotImportAttacks(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx := t.Context()
	export := func(entries ...*tar.Header) []byte {
		var data bytes.Buffer
		gz := gzip.NewWriter(&data)
		tw := tar.NewWriter(gz)
		for _, h := range entries {
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(make([]byte, h.Size))
			}
		}
		tw.Close()
		gz.Close()
		var out bytes.Buffer
		ow := tar.NewWriter(&out)
		meta, _ := json.Marshal(api.Snapshot{ID: "snap_x", Source: "sbx_x"})
		ow.WriteHeader(&tar.Header{Name: "snapshot.json", Mode: 0o644, Size: int64(len(meta))})
		ow.Write(meta)
		ow.WriteHeader(&tar.Header{Name: "data.tar.gz", Mode: 0o644, Size: int64(data.Len())})
		ow.Write(data.Bytes())
		ow.Close()
		return out.Bytes()
	}
	ws := func(name string) string { return "workspace/" + name }
	sn, err := c.ImportSnapshot(ctx, bytes.NewReader(export(
		&tar.Header{Typeflag: tar.TypeDir, Name: "workspace/", Mode: 0o755},
		&tar.Header{Typeflag: tar.TypeReg, Name: ws("suid"), Mode: 0o4755, Size: 4},
		&tar.Header{Typeflag: tar.TypeReg, Name: ws("sgid"), Mode: 0o2755, Size: 4},
		&tar.Header{Typeflag: tar.TypeChar, Name: ws("null"), Mode: 0o666, Devmajor: 1, Devminor: 3},
		&tar.Header{Typeflag: tar.TypeFifo, Name: ws("fifo"), Mode: 0o666},
	)))
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, c, api.CreateRequest{FromSnapshot: sn.ID})
	if got := sh(t, c, sb.ID, "stat -c '%n %a' suid sgid; ls null fifo 2>&1 | wc -l"); got != "suid 755\nsgid 755\n2\n" {
		t.Errorf("restored: %q", got)
	}
	for _, bad := range []*tar.Header{
		{Typeflag: tar.TypeReg, Name: "/etc/passwd", Mode: 0o644},
		{Typeflag: tar.TypeReg, Name: "workspace/../../etc/x", Mode: 0o644},
		{Typeflag: tar.TypeLink, Name: ws("h"), Linkname: "/etc/shadow"},
	} {
		if _, err := c.ImportSnapshot(ctx, bytes.NewReader(export(bad))); !isAPIStatus(err, http.StatusBadRequest) {
			t.Errorf("%s: %v", bad.Name, err)
		}
	}
	if _, err := c.ImportSnapshot(ctx, strings.NewReader("not a tar")); !isAPIStatus(err, http.StatusBadRequest) {
		t.Errorf("garbage: %v", err)
	}
}

// TestSnapshotsOtherTiers: the container and gVisor tiers snapshot,
// restore and fork as the process tier does.
func TestSnapshotsOtherTiers(t *testing.T) {
	for _, tc := range []struct{ tier, runtime string }{{oci.Name, "crun"}, {oci.GVisor, oci.CurrentRunsc}} {
		t.Run(tc.tier, func(t *testing.T) {
			testutil.Requires(t, tc.runtime)
			d := startDaemon(t)
			dir := filepath.Join(d.processDir, "oci-"+tc.tier)
			if err := os.MkdirAll(dir, 0o711); err != nil {
				t.Fatal(err)
			}
			b := oci.New(oci.Config{Tier: tc.tier, Runtime: tc.runtime, AgentPath: testutil.BuildAgent(t), StateDir: dir, Detached: true})
			if err := b.Probe(t.Context()); err != nil {
				testutil.Missing(t, "%s tier unavailable: %v", tc.tier, err)
			}
			d.container = b
			d.stop(t, true)
			d.start(t)
			c := d.local
			ctx := t.Context()
			src, err := c.Create(ctx, api.CreateRequest{Spec: api.Spec{Tier: tc.tier}})
			if err != nil {
				t.Fatal(err)
			}
			sh(t, c, src.ID, "mkdir -p t/d && printf 'one\\n' > t/a && chmod 600 t/a && ln -s a t/l && head -c 100000 /dev/urandom > t/d/b")
			before := sh(t, c, src.ID, manifest)
			sn, err := c.Snapshot(ctx, src.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			sh(t, c, src.ID, "rm -r t")
			r, err := c.Create(ctx, api.CreateRequest{FromSnapshot: sn.ID})
			if err != nil {
				t.Fatal(err)
			}
			if r.Spec.Tier != tc.tier {
				t.Errorf("restored on tier %s", r.Spec.Tier)
			}
			if got := sh(t, c, r.ID, manifest); got != before {
				t.Errorf("restored:\n%s\nwant\n%s", got, before)
			}
			forks, err := c.Fork(ctx, r.ID, api.ForkRequest{Count: 2})
			if err != nil || len(forks) != 2 {
				t.Fatalf("fork: %v %v", forks, err)
			}
			for _, f := range forks {
				if got := sh(t, c, f.ID, manifest); got != before {
					t.Errorf("fork %s:\n%s", f.ID, got)
				}
			}
		})
	}
}

// BenchmarkSnapshots: snapshot and restore of a workspace of 10,000 small
// files and of one 1 GiB file, and a fork of the 1 GiB workspace 8 ways,
// on the process tier; beside them, in the same run, tar of the same tree
// and cp --reflink=auto of it inside the sandbox.
func BenchmarkSnapshots(b *testing.B) {
	d := startDaemon(b, func(c *server.Config) { c.Limits.MaxSandboxesPerTenant = 200 })
	c := d.local
	ctx := b.Context()
	for _, w := range []struct{ name, make string }{
		{"10k-files", `mkdir -p t && cd t && i=0; while [ $i -lt 100 ]; do mkdir d$i; j=0; while [ $j -lt 100 ]; do echo $i-$j > d$i/f$j; j=$((j+1)); done; i=$((i+1)); done`},
		{"1GiB-file", `mkdir -p t && head -c 1073741824 /dev/urandom > t/big`},
	} {
		src, err := c.Create(ctx, api.CreateRequest{Spec: api.Spec{Limits: api.Limits{DiskBytes: 4 << 30}}})
		if err != nil {
			b.Fatal(err)
		}
		shb(b, c, src.ID, w.make)
		var sn *api.Snapshot
		b.Run(w.name+"/snapshot", func(b *testing.B) {
			for range b.N {
				if sn, err = c.Snapshot(ctx, src.ID, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(sn.Size)/(1<<20), "MiB-stored")
		})
		b.Run(w.name+"/restore", func(b *testing.B) {
			for range b.N {
				r, err := c.Create(ctx, api.CreateRequest{FromSnapshot: sn.ID, Spec: api.Spec{Limits: api.Limits{DiskBytes: 4 << 30}}})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				c.Delete(ctx, r.ID)
				b.StartTimer()
			}
		})
		b.Run(w.name+"/tar-in-sandbox", func(b *testing.B) {
			for range b.N {
				shb(b, c, src.ID, "tar -cf - t | tar -C /tmp -xf - && rm -rf /tmp/t")
			}
		})
		b.Run(w.name+"/cp-reflink-in-sandbox", func(b *testing.B) {
			for range b.N {
				shb(b, c, src.ID, "cp -a --reflink=auto t t2 && rm -rf t2")
			}
		})
		if w.name == "1GiB-file" {
			b.Run(w.name+"/fork-8", func(b *testing.B) {
				for range b.N {
					t0 := time.Now()
					forks, err := c.Fork(ctx, src.ID, api.ForkRequest{Count: 8, Labels: map[string]string{"bench": "fork"}})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(time.Since(t0).Milliseconds())/8, "ms/fork")
					b.StopTimer()
					for _, f := range forks {
						c.Delete(ctx, f.ID)
					}
					b.StartTimer()
				}
			})
		}
		c.Delete(ctx, src.ID)
	}
}

func shb(b *testing.B, c *sclient.Client, id, script string) {
	b.Helper()
	var stderr bytes.Buffer
	res, err := c.Exec(b.Context(), id, "sh", sclient.ExecOptions{Args: []string{"-c", script}, Stderr: &stderr, Timeout: 20 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("%s: %v %+v %s", script, err, res, stderr.String())
	}
}

// TestTemplatePool: a pool of a template keeps sandboxes made from it
// ready, which the tenant's creates from the template claim (and no
// other create does); saving the template again refills the pool from
// what it is now.
func TestTemplatePool(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx := t.Context()
	src := create(t, c, api.CreateRequest{})
	sh(t, c, src.ID, "echo one > state.txt")
	sn1, err := c.Snapshot(ctx, src.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutTemplate(ctx, "warm", api.Template{FromSnapshot: sn1.ID, Start: "exec sleep 300"}); err != nil {
		t.Fatal(err)
	}
	var pool api.Pool
	if err := c.Call(ctx, http.MethodPut, "/v1/pools/warm-pool", api.Pool{Template: "warm", Size: 2}, &pool); err != nil {
		t.Fatal(err)
	}
	waitReady := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ps, err := c.Pools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if p.Name == "warm-pool" && p.Ready == 2 {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the template's pool did not fill: %+v", ps)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitReady()
	// A plain create does not take a template's sandbox.
	plain := create(t, c, api.CreateRequest{})
	if plain.Pool != "" || sh(t, c, plain.ID, "ls state.txt 2>/dev/null || echo none") != "none\n" {
		t.Fatalf("a plain create claimed from the template's pool: %+v", plain)
	}
	sb := create(t, c, api.CreateRequest{Template: "warm"})
	if sb.Pool != "warm-pool" || sb.Labels["cordon.template"] != "warm" {
		t.Fatalf("not from the pool: %+v", sb)
	}
	if got := sh(t, c, sb.ID, "cat state.txt; pgrep -x sleep >/dev/null && echo started"); got != "one\nstarted\n" {
		t.Errorf("from the pool: %q", got)
	}
	// Saved again from another state: the pool is made again from it.
	sh(t, c, src.ID, "echo two > state.txt")
	sn2, err := c.Snapshot(ctx, src.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutTemplate(ctx, "warm", api.Template{FromSnapshot: sn2.ID, Start: "exec sleep 300"}); err != nil {
		t.Fatal(err)
	}
	waitReady()
	sb2 := create(t, c, api.CreateRequest{Template: "warm"})
	if got := sh(t, c, sb2.ID, "cat state.txt"); sb2.Pool != "warm-pool" || got != "two\n" {
		t.Errorf("after the template changed: pool %q, %q", sb2.Pool, got)
	}
	// Another tenant's create from its own (absent) template claims nothing.
	other, _ := d.tenant(t, "other")
	if _, err := other.Create(ctx, api.CreateRequest{Template: "warm"}); !isAPIStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant: %v", err)
	}
}

// TestSnapshotLimits: what a sandbox (or an import) may make the daemon
// read and keep is bounded: a snapshot's content (a sparse file counts at
// its apparent size), snapshots and templates per tenant; a refused
// capture leaves nothing in the store.
func TestSnapshotLimits(t *testing.T) {
	d := startDaemon(t, func(c *server.Config) {
		c.Limits.MaxSnapshotBytes = 1 << 20
		c.Limits.MaxSnapshotsPerTenant = 2
		c.Limits.MaxTemplatesPerTenant = 1
	})
	c := d.local
	ctx := t.Context()
	sb := create(t, c, api.CreateRequest{})
	sh(t, c, sb.ID, "truncate -s 1G sparse")
	if _, err := c.Snapshot(ctx, sb.ID, 0); !isAPIStatus(err, http.StatusRequestEntityTooLarge) {
		t.Fatalf("a sparse 1 GiB file under a 1 MiB limit: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.stateDir, "snapshots")); len(ents) != 0 {
		t.Errorf("left in the store: %v", ents)
	}
	sh(t, c, sb.ID, "rm sparse && echo small > f")
	sn, err := c.Snapshot(ctx, sb.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(ctx, sb.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(ctx, sb.ID, 0); !isAPIStatus(err, http.StatusTooManyRequests) {
		t.Errorf("a third snapshot of two allowed: %v", err)
	}
	// The bytes a tenant's snapshots hold are bounded too, whatever their
	// count.
	{
		d := startDaemon(t, func(c *server.Config) { c.Limits.MaxSnapshotStorePerTenant = 64 << 10 })
		sb := create(t, d.local, api.CreateRequest{})
		sh(t, d.local, sb.ID, "head -c 40000 /dev/urandom > a")
		if _, err := d.local.Snapshot(ctx, sb.ID, 0); err != nil {
			t.Fatal(err)
		}
		sh(t, d.local, sb.ID, "head -c 40000 /dev/urandom > b")
		if _, err := d.local.Snapshot(ctx, sb.ID, 0); !isAPIStatus(err, http.StatusTooManyRequests) || !strings.Contains(err.Error(), "--max-snapshot-store") {
			t.Errorf("snapshots past 64 KiB in all: %v", err)
		}
		if list, _ := d.local.Snapshots(ctx); len(list) != 1 {
			t.Errorf("snapshots kept: %d, want 1", len(list))
		}
		// A capture stops writing where the bound is passed, rather than
		// write all it reads (here 8 MiB) and refuse it after.
		sh(t, d.local, sb.ID, "rm b && head -c 8000000 /dev/urandom > c")
		if _, err := d.local.Snapshot(ctx, sb.ID, 0); !isAPIStatus(err, http.StatusTooManyRequests) || !strings.Contains(err.Error(), "this one would pass it") {
			t.Errorf("a capture past what is left of 64 KiB: %v", err)
		}
		if ents, _ := os.ReadDir(filepath.Join(d.stateDir, "snapshots")); len(ents) != 1 {
			t.Errorf("in the store after the refusal: %v, want the one snapshot's archive", ents)
		}
	}
	// An import past the size limit is refused as a capture is.
	var big bytes.Buffer
	gz := gzip.NewWriter(&big)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "workspace/zeros", Mode: 0o644, Size: 2 << 20})
	tw.Write(make([]byte, 2<<20))
	tw.Close()
	gz.Close()
	var exp bytes.Buffer
	ow := tar.NewWriter(&exp)
	meta, _ := json.Marshal(api.Snapshot{ID: "snap_x"})
	ow.WriteHeader(&tar.Header{Name: "snapshot.json", Mode: 0o644, Size: int64(len(meta))})
	ow.Write(meta)
	ow.WriteHeader(&tar.Header{Name: "data.tar.gz", Mode: 0o644, Size: int64(big.Len())})
	ow.Write(big.Bytes())
	ow.Close()
	if err := c.DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ImportSnapshot(ctx, &exp); !isAPIStatus(err, http.StatusRequestEntityTooLarge) {
		t.Errorf("an import past the limit: %v", err)
	}
	if _, err := c.PutTemplate(ctx, "one", api.Template{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutTemplate(ctx, "one", api.Template{Start: "true"}); err != nil {
		t.Errorf("saving a template again is no new one: %v", err)
	}
	if _, err := c.PutTemplate(ctx, "two", api.Template{}); !isAPIStatus(err, http.StatusTooManyRequests) {
		t.Errorf("a second template of one allowed: %v", err)
	}
}
