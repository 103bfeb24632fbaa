package conformance

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// testFSOps covers cordon's stat, list, mkdir and remove routes (feature
// "fs-ops"), rename (feature "fs-rename") and the healthz activity report
// (feature "activity").
func testFSOps(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "file-system routes", "fs-ops")
	status := func(err error) int {
		var e *client.Error
		if errors.As(err, &e) {
			return e.Status
		}
		return 0
	}
	t.Run("MkdirStatList", func(t *testing.T) {
		if err := h.c.Mkdir(ctx, "fsops/a/b"); err != nil {
			t.Fatal(err)
		}
		h.sh(t, "printf hello > fsops/a/f.txt && ln -sfn f.txt fsops/a/link && chmod 640 fsops/a/f.txt")
		fi, err := h.c.Stat(ctx, "fsops/a/f.txt")
		if err != nil || fi.Type != "file" || fi.Size != 5 || fi.Mode != 0o640 || !strings.HasSuffix(fi.Path, "/fsops/a/f.txt") || fi.ModTime == 0 {
			t.Fatalf("stat: %+v %v", fi, err)
		}
		l, err := h.c.List(ctx, "fsops/a")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range l.Entries {
			got = append(got, e.Name+":"+e.Type+":"+e.Target)
		}
		if strings.Join(got, " ") != "b:dir: f.txt:file: link:symlink:f.txt" {
			t.Fatalf("list: %v", got)
		}
		if _, err := h.c.Stat(ctx, "fsops/none"); status(err) != http.StatusNotFound {
			t.Fatalf("stat of a missing path: %v", err)
		}
		if _, err := h.c.List(ctx, "fsops/a/f.txt"); err == nil {
			t.Fatal("listed a file")
		}
	})
	t.Run("Remove", func(t *testing.T) {
		h.sh(t, "mkdir -p fsops/r/d/e && touch fsops/r/d/e/x fsops/r/f")
		if err := h.c.Remove(ctx, "fsops/r/f", false); err != nil {
			t.Fatal(err)
		}
		if err := h.c.Remove(ctx, "fsops/r/d", false); err == nil {
			t.Fatal("removed a non-empty directory without recursive")
		}
		if err := h.c.Remove(ctx, "fsops/r/d", true); err != nil {
			t.Fatal(err)
		}
		if got := h.sh(t, "ls -A fsops/r"); got != "" {
			t.Fatalf("left: %q", got)
		}
		if err := h.c.Remove(ctx, "fsops/r/none", false); status(err) != http.StatusNotFound {
			t.Fatalf("remove of a missing path: %v", err)
		}
	})
	t.Run("Rename", func(t *testing.T) {
		if !h.c.HasFeature(ctx, "fs-rename") {
			t.Fatal("cordon-agent does not advertise fs-rename")
		}
		h.sh(t, "mkdir -p fsops/mv && printf A > fsops/mv/a && printf BB > fsops/mv/b && ln -sfn b fsops/mv/link")
		// Onto a file that exists: it is replaced, as rename(2) does.
		fi, err := h.c.Rename(ctx, "fsops/mv/a", "fsops/mv/b")
		if err != nil || fi.Type != "file" || fi.Size != 1 || !strings.HasSuffix(fi.Path, "/fsops/mv/b") || fi.Name != "b" {
			t.Fatalf("rename: %+v %v", fi, err)
		}
		// A symlink is moved itself, not what it names.
		if fi, err := h.c.Rename(ctx, "fsops/mv/link", "fsops/mv/link2"); err != nil || fi.Type != "symlink" {
			t.Fatalf("rename of a symlink: %+v %v", fi, err)
		}
		if got := h.sh(t, "cd fsops/mv && ls -A && readlink link2 && cat b"); got != "b\nlink2\nb\nA" {
			t.Fatalf("after the renames: %q", got)
		}
		if _, err := h.c.Rename(ctx, "fsops/mv/none", "fsops/mv/x"); status(err) != http.StatusNotFound {
			t.Errorf("rename of a missing path: %v", err)
		}
		if _, err := h.c.Rename(ctx, "fsops/mv/b", "fsops/mv/no/such/dir/b"); status(err) != http.StatusNotFound {
			t.Errorf("rename into a missing directory: %v", err)
		}
		// Between writable directories that are file systems of their
		// own, refused and said so; where they share one, moved. (An
		// agent run in a test's process has the workspace alone: /tmp is
		// outside what it may reach.)
		h.sh(t, "printf T > /tmp/cordon-mv")
		_, err = h.c.Rename(ctx, "/tmp/cordon-mv", "fsops/mv/t")
		switch {
		case err == nil:
			if h.sh(t, "cat fsops/mv/t") != "T" {
				t.Error("moved between writable directories, but not there")
			}
		case strings.Contains(err.Error(), "different file systems") || status(err) == http.StatusForbidden && strings.Contains(err.Error(), "outside the places"):
		default:
			t.Errorf("a move between writable directories: %v", err)
		}
		if r := h.raw(t, "POST", wire.RouteRename+"?path=fsops/mv/b", h.Endpoint.Token, nil); r.status != http.StatusBadRequest {
			t.Errorf("no to: %d", r.status)
		}
	})
	t.Run("Jail", func(t *testing.T) {
		outside := strings.TrimSpace(h.sh(t, "d=$(mktemp -d /tmp/cordon-fs-XXXXXX) && mkdir $d/keep && echo s > $d/keep/s && ln -sfn $d fsops/out && echo $d"))
		t.Cleanup(func() { h.sh(t, "rm -rf "+outside) })
		// Through a symlinked parent: refused, outside untouched.
		if err := h.c.Remove(ctx, "fsops/out/keep", true); err == nil {
			t.Error("removed through a symlink out")
		}
		if err := h.c.Mkdir(ctx, "fsops/out/new"); err == nil {
			t.Error("mkdir through a symlink out")
		}
		// A move neither takes from nor puts through a symlinked parent,
		// nor reaches past the roots, nor moves a root.
		h.sh(t, "printf m > fsops/moved")
		for _, mv := range [][2]string{{"fsops/moved", "fsops/out/moved"}, {"fsops/out/keep/s", "fsops/stolen"}, {"fsops/moved", "/etc/moved"}, {"/etc/hostname", "fsops/h"}, {".", "fsops/ws"}, {"fsops/moved", "."}} {
			if _, err := h.c.Rename(ctx, mv[0], mv[1]); err == nil {
				t.Errorf("rename %s to %s accepted", mv[0], mv[1])
			}
		}
		if got := h.sh(t, "ls -A "+outside+"; ls -A "+outside+"/keep; cat fsops/moved"); got != "keep\ns\nm" {
			t.Errorf("after the refused moves: %q", got)
		}
		if _, err := h.c.List(ctx, "fsops/out"); err == nil {
			t.Error("listed through a symlink out")
		}
		if _, err := h.c.Stat(ctx, "fsops/out/keep/s"); err == nil {
			t.Error("stat through a symlink out")
		}
		for _, p := range []string{"../x", "/etc", "/"} {
			if err := h.c.Remove(ctx, p, true); err == nil {
				t.Errorf("remove %q accepted", p)
			}
		}
		if err := h.c.Remove(ctx, ".", true); err == nil {
			t.Error("removed the workspace itself")
		}
		// Removing the link removes the link, not what it points to.
		if err := h.c.Remove(ctx, "fsops/out", true); err != nil {
			t.Fatal(err)
		}
		if got := h.sh(t, "cat "+outside+"/keep/s && ls -A fsops"); !strings.HasPrefix(got, "s\n") || strings.Contains(got, "out") {
			t.Fatalf("after removing the link: %q", got)
		}
		if r := h.raw(t, "GET", wire.RouteStat+"?path=fsops", "", nil); r.status != 401 {
			t.Errorf("no token: %d", r.status)
		}
	})
	t.Run("Activity", func(t *testing.T) {
		hl, err := h.c.Health(ctx)
		if err != nil || hl.BootID == "" || hl.Activity == nil {
			t.Fatalf("health: %+v %v", hl, err)
		}
		// Without the token the probe says only that the agent is up.
		r := h.raw(t, "GET", wire.RouteHealthz, "", nil)
		if m := r.json(t); m["bootId"] != nil || m["activity"] != nil {
			t.Fatalf("unauthenticated healthz: %v", m)
		}
		id := h.reserve(t)
		go h.c.Execute(ctx, wire.ExecuteRequest{ExecutionID: id, Command: "sleep", Args: []string{"30"}}, func(wire.Event) error { return nil })
		if !eventually(5*time.Second, func() bool {
			hl, _ = h.c.Health(ctx)
			return hl.Activity.Running == 1 && hl.Activity.IdleMs == 0
		}) {
			t.Fatalf("while running: %+v", hl.Activity)
		}
		if _, err := h.c.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		if !eventually(5*time.Second, func() bool {
			hl, _ = h.c.Health(ctx)
			return hl.Activity.Running == 0
		}) {
			t.Fatalf("after cancel: %+v", hl.Activity)
		}
	})
}
