package server_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/testnet"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/seeds"
	"github.com/cordon-sandbox/cordon/server/api"
)

// gitHost serves bare repositories over git's smart HTTP (git
// http-backend) at http://203.0.113.9/NAME.git in a test network, and
// returns the network and a function that runs git on the host side.
func gitHost(t testing.TB) (*testnet.Net, string, func(dir string, args ...string) string) {
	testutil.Requires(t, "git")
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		testutil.Missing(t, "git-http-backend: %v", err)
	}
	root := t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.test", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	n := testnet.New(t, "203.0.113.9")
	ln := n.Listen(t, "203.0.113.9:80")
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	go http.Serve(ln, h)
	return n, root, git
}

// startDaemonIn is startDaemon with the egress proxy dialing from the test
// network n.
func startDaemonIn(t testing.TB, n *testnet.Net) *daemon {
	t.Helper()
	d := startDaemon(t)
	d.stop(t, true)
	d.netns = n.Path
	return d.start(t)
}

// gitSpec lets a sandbox reach the git host.
var gitSpec = api.Spec{Egress: &api.Egress{Mode: "static", Rules: []egress.Rule{{Host: "203.0.113.9", Ports: []int{80}}}}}

// newRepo makes ROOT/NAME.git with the given commits on main (and dev,
// one more) and returns the commits' ids, oldest first.
func newRepo(t testing.TB, root, name string, git func(string, ...string) string, commits int) []string {
	work := t.TempDir()
	git(work, "init", "-q")
	var ids []string
	for i := range commits {
		os.WriteFile(filepath.Join(work, "file.txt"), []byte(strings.Repeat("x", i+1)), 0o644)
		git(work, "add", "file.txt")
		git(work, "commit", "-q", "-m", "c")
		ids = append(ids, git(work, "rev-parse", "HEAD"))
	}
	git(work, "checkout", "-q", "-b", "dev")
	git(work, "commit", "-q", "--allow-empty", "-m", "dev")
	git(work, "checkout", "-q", "main")
	git(root, "clone", "-q", "--bare", work, name+".git")
	return ids
}

// TestSeeds: a seed's repositories are cloned inside the sandbox through
// its egress policy, only what is missing, and drift is refused without
// touching anything.
func TestSeeds(t *testing.T) {
	n, root, git := gitHost(t)
	app := newRepo(t, root, "app", git, 2)
	newRepo(t, root, "lib", git, 1)
	d := startDaemonIn(t, n)
	c := d.local
	ctx := t.Context()
	sb := create(t, c, api.CreateRequest{Spec: gitSpec})
	url := func(name string) string { return "http://203.0.113.9/" + name + ".git" }
	seed := seeds.Seed{Name: "work", Repositories: []seeds.Repository{
		{URL: url("app"), Dir: "app"},
		{URL: url("lib"), Branch: "dev", Dir: "libs/lib"},
		{URL: url("app"), Commit: app[0], Dir: "pinned"},
	}}
	res, err := c.Seed(ctx, sb.ID, api.SeedRequest{Seed: seed, Root: "repos"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{app[1], "", app[0]} {
		r := res.Repositories[i]
		if r.State != "cloned" || (want != "" && r.Commit != want) {
			t.Errorf("repository %d: %+v, want cloned at %s", i, r, want)
		}
	}
	if got := sh(t, c, sb.ID, "cat repos/app/file.txt; echo; cat repos/pinned/file.txt; echo; git -C repos/libs/lib log -1 --format=%s; ls -A repos repos/libs"); got != "xx\nx\ndev\nrepos:\napp\nlibs\npinned\n\nrepos/libs:\nlib\n" {
		t.Errorf("in the sandbox: %q", got)
	}
	// Again: nothing to do. The remote moving on is no drift.
	work := t.TempDir()
	git(work, "clone", "-q", filepath.Join(root, "app.git"), "w")
	git(filepath.Join(work, "w"), "commit", "-q", "--allow-empty", "-m", "later")
	git(filepath.Join(work, "w"), "push", "-q", "origin", "main")
	res, err = c.Seed(ctx, sb.ID, api.SeedRequest{Seed: seed, Root: "repos"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Repositories {
		if r.State != "present" {
			t.Errorf("second ensure: %+v", r)
		}
	}
	// Drift: another origin, a history rewritten, a pin the checkout does
	// not hold. The whole seed is refused and the missing repository not
	// cloned.
	sh(t, c, sb.ID, "git -C repos/app remote set-url origin http://203.0.113.9/other.git && git -C repos/libs/lib checkout -q --orphan new && git -C repos/libs/lib -c user.name=a -c user.email=a@example.test commit -q --allow-empty -m new")
	drifted := seeds.Seed{Name: "work", Repositories: append(seeds.Seed{}.Repositories, seed.Repositories...)}
	drifted.Repositories[2].Commit = app[1]
	drifted.Repositories = append(drifted.Repositories, seeds.Repository{URL: url("lib"), Dir: "extra"})
	_, err = c.Seed(ctx, sb.ID, api.SeedRequest{Seed: drifted, Root: "repos"})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != api.CodeSeedDrift {
		t.Fatalf("drift: %v", err)
	}
	for _, want := range []string{"app: its origin is", "libs/lib: commit", "pinned: commit " + app[1]} {
		if !strings.Contains(ae.Message, want) {
			t.Errorf("drift message %q lacks %q", ae.Message, want)
		}
	}
	if got := sh(t, c, sb.ID, "ls -A repos"); got != "app\nlibs\npinned\n" {
		t.Errorf("after a refused seed: %q", got)
	}
}

// TestSeedRefusals: what must not reach the sandbox is refused before
// anything runs, and a clone the egress policy stops leaves nothing.
func TestSeedRefusals(t *testing.T) {
	n, root, git := gitHost(t)
	newRepo(t, root, "app", git, 1)
	d := startDaemonIn(t, n)
	c := d.local
	sb := create(t, c, api.CreateRequest{}) // deny-all egress
	for _, u := range []string{"http://user:secret@203.0.113.9/app.git", "ssh://203.0.113.9/app.git", "git@203.0.113.9:app.git", "file:///etc", "ftp://203.0.113.9/x"} {
		_, err := c.Seed(t.Context(), sb.ID, api.SeedRequest{Root: "repos", Seed: seeds.Seed{Name: "s", Repositories: []seeds.Repository{{URL: u, Dir: "x"}}}})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, dir := range []string{"../out", "/abs", "."} {
		_, err := c.Seed(t.Context(), sb.ID, api.SeedRequest{Root: "repos", Seed: seeds.Seed{Name: "s", Repositories: []seeds.Repository{{URL: "http://203.0.113.9/app.git", Dir: dir}}}})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Errorf("dir %s: %v", dir, err)
		}
	}
	_, err := c.Seed(t.Context(), sb.ID, api.SeedRequest{Root: "repos", Seed: seeds.Seed{Name: "s", Repositories: []seeds.Repository{{URL: "http://203.0.113.9/app.git", Dir: "app"}}}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeSeedFailed || !strings.Contains(ae.Message, "403") {
		t.Fatalf("a clone egress refuses: %v", err)
	}
	if got := sh(t, c, sb.ID, "ls -A repos"); got != "" {
		t.Errorf("left behind: %q", got)
	}
}

// BenchmarkSeed: a seed of one small repository over git's smart HTTP in a
// test network: its clone into a fresh directory, and an ensure that
// finds it present (the checks alone).
func BenchmarkSeed(b *testing.B) {
	n, root, git := gitHost(b)
	newRepo(b, root, "app", git, 3)
	d := startDaemonIn(b, n)
	c := d.local
	sb, err := c.Create(b.Context(), api.CreateRequest{Spec: gitSpec})
	if err != nil {
		b.Fatal(err)
	}
	req := func(dir string) api.SeedRequest {
		return api.SeedRequest{Root: "repos", Seed: seeds.Seed{Name: "s", Repositories: []seeds.Repository{{URL: "http://203.0.113.9/app.git", Dir: dir}}}}
	}
	b.Run("clone", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for i := range b.N {
			t := time.Now()
			if _, err := c.Seed(b.Context(), sb.ID, req(fmt.Sprint("c", i))); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		testutil.ReportPercentiles(b, "", lat)
	})
	b.Run("present", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for range b.N {
			t := time.Now()
			if _, err := c.Seed(b.Context(), sb.ID, req("c0")); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		testutil.ReportPercentiles(b, "", lat)
	})
}

// TestTemplates: a template's snapshot, repositories and start program
// are applied to each sandbox made from it; it keeps its own copy of the
// snapshot, belongs to its tenant, and takes its snapshot with it when it
// goes.
func TestTemplates(t *testing.T) {
	n, root, git := gitHost(t)
	app := newRepo(t, root, "app", git, 1)
	d := startDaemonIn(t, n)
	c := d.local
	ctx := t.Context()
	src := create(t, c, api.CreateRequest{Spec: gitSpec})
	sh(t, c, src.ID, "echo from-snapshot > state.txt")
	sn, err := c.Snapshot(ctx, src.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := c.PutTemplate(ctx, "web", api.Template{FromSnapshot: sn.ID, Start: "echo started > started.txt; exec sleep 300",
		Seed: &api.SeedRequest{Root: "repos", Seed: seeds.Seed{Name: "web", Repositories: []seeds.Repository{{URL: "http://203.0.113.9/app.git", Dir: "app"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Snapshot == "" || tmpl.Snapshot == sn.ID || tmpl.Spec.Egress == nil {
		t.Fatalf("template: %+v", tmpl)
	}
	// The snapshot it came from may go; the template kept its own.
	if err := c.DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		sb := create(t, c, api.CreateRequest{Template: "web"})
		if sb.Labels["cordon.template"] != "web" {
			t.Errorf("labels: %v", sb.Labels)
		}
		// (The start program writes its file, then becomes sleep: each is
		// waited for.)
		got := sh(t, c, sb.ID, "cat state.txt; git -C repos/app rev-parse HEAD; for i in $(seq 50); do [ -s started.txt ] && break; sleep 0.05; done; cat started.txt; for i in $(seq 50); do pgrep -x sleep >/dev/null && break; sleep 0.05; done; pgrep -x sleep >/dev/null && echo running")
		if got != "from-snapshot\n"+app[0]+"\nstarted\nrunning\n" {
			t.Errorf("a sandbox from the template: %q", got)
		}
	}
	other, _ := d.tenant(t, "other")
	if _, err := other.Create(ctx, api.CreateRequest{Template: "web"}); !isAPIStatus(err, http.StatusNotFound) {
		t.Errorf("another tenant's create: %v", err)
	}
	if _, err := c.PutTemplate(ctx, "bad", api.Template{Seed: &api.SeedRequest{Root: "r", Seed: seeds.Seed{Name: "s", Repositories: []seeds.Repository{{URL: "git@203.0.113.9:x.git", Dir: "x"}}}}}); !isAPIStatus(err, http.StatusBadRequest) {
		t.Errorf("a template with an ssh seed: %v", err)
	}
	if err := c.DeleteTemplate(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Snapshots(ctx); len(l) != 0 {
		t.Errorf("snapshots after the template went: %+v", l)
	}
	if _, err := c.Create(ctx, api.CreateRequest{Template: "web"}); !isAPIStatus(err, http.StatusNotFound) {
		t.Errorf("create from a deleted template: %v", err)
	}
}
