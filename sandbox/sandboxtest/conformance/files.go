package conformance

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

func (h *harness) read(t *testing.T, body map[string]any) (*response, map[string]any) {
	t.Helper()
	r := h.post(t, wire.RouteReadFile, body)
	return r, r.json(t)
}

func testFiles(t *testing.T, h *harness) {
	ws := strings.TrimSpace(h.sh(t, "pwd"))
	outside := strings.TrimSpace(h.sh(t, "d=$(mktemp -d /tmp/cordon-conf-XXXXXX) && echo secret > $d/secret && echo $d"))
	t.Cleanup(func() { h.sh(t, "rm -rf "+outside) })

	t.Run("WriteThenRead", func(t *testing.T) {
		m := wantError(t, h.post(t, wire.RouteWriteFile, map[string]any{"path": "dir/a.txt", "content": "héllo\n"}), 200, "")
		if m["bytesWritten"] != float64(len("héllo\n")) {
			t.Fatalf("write answer %v", m)
		}
		r, rm := h.read(t, map[string]any{"path": "dir/a.txt"})
		if r.status != 200 || rm["content"] != "héllo\n" || rm["sizeBytes"] != float64(7) || rm["encoding"] != "utf8" {
			t.Fatalf("read %s", r.body)
		}
		r, rm = h.read(t, map[string]any{"path": ws + "/dir/a.txt", "encoding": "base64"})
		if rm["content"] != base64.StdEncoding.EncodeToString([]byte("héllo\n")) || rm["encoding"] != "base64" {
			t.Fatalf("base64 read %s", r.body)
		}
	})
	t.Run("Binary", func(t *testing.T) {
		data := make([]byte, 256*1024+3)
		for i := range data {
			data[i] = byte(i * 7)
		}
		wantError(t, h.post(t, wire.RouteWriteFile, map[string]any{"path": "bin.dat", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}), 200, "")
		_, rm := h.read(t, map[string]any{"path": "bin.dat", "encoding": "base64"})
		if rm["content"] != base64.StdEncoding.EncodeToString(data) {
			t.Fatal("binary round trip differs")
		}
		if sum := strings.Fields(h.sh(t, "wc -c < bin.dat"))[0]; sum != "262147" {
			t.Fatalf("size on disk %s", sum)
		}
	})
	t.Run("LargeWrites", func(t *testing.T) {
		// Past 1 MiB cordon-agent decodes as the body arrives; every body
		// shape must still mean what it means to the reference.
		data := make([]byte, 3<<20)
		for i := range data {
			data[i] = byte(i*31 + i>>8)
		}
		b64 := base64.StdEncoding.EncodeToString(data)
		bodies := map[string]string{
			"path first":    `{"path":"large1.bin","encoding":"base64","content":"` + b64 + `"}`,
			"content first": `{"content":"` + b64 + `","encoding":"base64","path":"large2.bin"}`,
			"extra fields":  `{"path":"large3.bin","encoding":"base64","content":"` + b64 + `","note":{"a":[1,2]}}`,
		}
		for name, body := range bodies {
			r := h.raw(t, "POST", wire.RouteWriteFile, h.Endpoint.Token, []byte(body))
			if r.status != 200 || r.json(t)["bytesWritten"] != float64(len(data)) {
				t.Fatalf("%s: %d %s", name, r.status, r.body)
			}
		}
		for _, f := range []string{"large1.bin", "large2.bin", "large3.bin"} {
			_, m := h.read(t, map[string]any{"path": f, "encoding": "base64"})
			if m["content"] != b64 {
				t.Fatalf("%s differs after a large write", f)
			}
		}
		text := strings.Repeat("é\"\n", 1<<19)
		tb, _ := json.Marshal(map[string]string{"path": "large.txt", "content": text})
		if r := h.raw(t, "POST", wire.RouteWriteFile, h.Endpoint.Token, tb); r.status != 200 {
			t.Fatalf("large text: %d %s", r.status, r.body)
		}
		if _, m := h.read(t, map[string]any{"path": "large.txt"}); m["content"] != text {
			t.Fatal("large text differs")
		}
	})
	t.Run("LargeWriteFailureKeepsOldContent", func(t *testing.T) {
		h.improvement(t, "invalid base64 is refused, not half-decoded; a failed write leaves the old file")
		h.sh(t, "printf original > keep.bin")
		body := `{"path":"keep.bin","encoding":"base64","content":"` + strings.Repeat("QUJD", 1<<19) + `!!!!` + strings.Repeat("QUJD", 100) + `"}`
		if r := h.raw(t, "POST", wire.RouteWriteFile, h.Endpoint.Token, []byte(body)); r.status != 400 {
			t.Fatalf("invalid base64: %d %s", r.status, r.body)
		}
		if got := h.sh(t, "cat keep.bin; ls -a | grep -c cordon- || true"); got != "original0\n" {
			t.Fatalf("after a failed write: %q", got)
		}
	})
	t.Run("Overwrite", func(t *testing.T) {
		h.sh(t, "printf old > over.txt && chmod 0640 over.txt")
		wantError(t, h.post(t, wire.RouteWriteFile, map[string]any{"path": "over.txt", "content": "new"}), 200, "")
		if got := h.sh(t, "cat over.txt; stat -c ' %a' over.txt; ls -a | grep -c cordon || true"); got != "new 640\n0\n" {
			t.Fatalf("after overwrite: %q (content, mode, leftover temporary files)", got)
		}
	})
	t.Run("Refusals", func(t *testing.T) {
		for _, p := range []string{"../escape.txt", "/etc/passwd", "a/../../x", ws + "/../x"} {
			r, m := h.read(t, map[string]any{"path": p})
			switch {
			case p == "/etc/passwd" && h.Target.ReadsAnywhere:
				// The sandbox's own identity file: readable where the read
				// roots are the sandbox's whole view.
				if r.status != 200 || !strings.Contains(m["content"].(string), "sandbox:x:") {
					t.Errorf("read %q: %d %s", p, r.status, r.body)
				}
			case r.status != 400 || m["ok"] != false:
				t.Errorf("read %q: %d %s", p, r.status, r.body)
			}
			r = h.post(t, wire.RouteWriteFile, map[string]any{"path": p, "content": "x"})
			if r.status != 400 {
				t.Errorf("write %q: %d %s", p, r.status, r.body)
			}
		}
		wantError(t, h.post(t, wire.RouteReadFile, map[string]any{}), 400, wire.CodeMissingPath)
		wantError(t, h.post(t, wire.RouteWriteFile, map[string]any{"path": "x"}), 400, wire.CodeMissingPathOrContent)
		wantError(t, h.post(t, wire.RouteWriteFile, map[string]any{"content": "x"}), 400, wire.CodeMissingPathOrContent)
		if r, _ := h.read(t, map[string]any{"path": "no-such-file"}); r.status != 400 {
			t.Errorf("missing file: %d", r.status)
		}
		if r, _ := h.read(t, map[string]any{"path": "dir"}); r.status != 400 {
			t.Errorf("directory: %d", r.status)
		}
	})
	t.Run("SymlinkOut", func(t *testing.T) {
		h.sh(t, "ln -sfn "+outside+"/secret leak && ln -sfn "+outside+" leakdir")
		for _, p := range []string{"leak", "leakdir/secret", ws + "/leak"} {
			if r, _ := h.read(t, map[string]any{"path": p}); r.status != 400 || strings.Contains(string(r.body), "secret") {
				t.Errorf("read through %q: %d %s", p, r.status, r.body)
			}
		}
		if r := h.post(t, wire.RouteWriteFile, map[string]any{"path": "leak", "content": "pwned"}); r.status != 400 {
			t.Errorf("write through symlink: %d %s", r.status, r.body)
		}
		if got := h.sh(t, "cat "+outside+"/secret"); got != "secret\n" {
			t.Fatalf("outside file changed to %q", got)
		}
	})
	t.Run("SymlinkInside", func(t *testing.T) {
		h.sh(t, "echo inner > inner.txt && ln -sfn "+ws+"/inner.txt abslink && ln -sfn inner.txt rellink")
		for _, p := range []string{"abslink", "rellink"} {
			if r, m := h.read(t, map[string]any{"path": p}); r.status != 200 || m["content"] != "inner\n" {
				t.Errorf("read %q: %d %s", p, r.status, r.body)
			}
		}
	})
	// A write never creates anything outside the write roots: not through
	// a symlinked parent, not through a dangling symlink.
	for _, c := range []struct{ name, link, to, path, why string }{
		{"SymlinkedParentOut", "parentlink", outside, "parentlink/new/deep.txt", "a write never creates a directory outside the write roots"},
		{"DanglingSymlink", "dangling", outside + "/created", "dangling", "a write never follows a dangling symlink"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.improvement(t, c.why)
			h.sh(t, "ln -sfn "+c.to+" "+c.link)
			if r := h.post(t, wire.RouteWriteFile, map[string]any{"path": c.path, "content": "x"}); r.status != 400 {
				t.Errorf("write %q: %d %s", c.path, r.status, r.body)
			}
			if got := h.sh(t, "ls "+outside); got != "secret\n" {
				t.Fatalf("outside dir now holds %q", got)
			}
		})
	}
	t.Run("FIFOIsRefusedFast", func(t *testing.T) {
		h.improvement(t, "reads serve regular files only; a FIFO never hangs the handler")
		h.sh(t, "rm -f fifo && mkfifo fifo")
		begin := time.Now()
		if r, _ := h.read(t, map[string]any{"path": "fifo"}); r.status != 400 {
			t.Fatalf("fifo: %d %s", r.status, r.body)
		}
		if d := time.Since(begin); d > 2*time.Second {
			t.Fatalf("fifo refusal took %v", d)
		}
	})
	t.Run("Ranges", func(t *testing.T) {
		h.sh(t, "printf 0123456789 > range.txt")
		cases := []struct {
			rng     map[string]any
			content string
		}{
			{map[string]any{"version": 1, "offset": 2, "length": 3}, "234"},
			{map[string]any{"version": 1, "offset": 7}, "789"},
			{map[string]any{"version": 1}, "0123456789"},
			{map[string]any{"version": 1, "offset": 20, "length": 5}, ""},
		}
		for _, c := range cases {
			r, m := h.read(t, map[string]any{"path": "range.txt", "range": c.rng})
			if r.status != 200 || m["content"] != c.content {
				t.Errorf("range %v: %d %s", c.rng, r.status, r.body)
				continue
			}
			echo := m["range"].(map[string]any)
			if echo["version"] != float64(1) || (c.rng["length"] == nil && echo["length"] != nil) {
				t.Errorf("range echo %v", echo)
			}
		}
		for _, bad := range []any{
			map[string]any{"version": 2}, map[string]any{"version": 1, "offset": -1},
			map[string]any{"version": 1, "length": wire.FileRangeMaxBytes + 1}, map[string]any{"version": 1, "offset": 1.5},
			[]any{1}, "x", map[string]any{"version": 1, "length": nil},
		} {
			if r, _ := h.read(t, map[string]any{"path": "range.txt", "range": bad}); r.status != 400 {
				t.Errorf("range %v: %d %s", bad, r.status, r.body)
			}
		}
		r, m := h.read(t, map[string]any{"capabilitiesOnly": true})
		caps, _ := m["readFileRanges"].(map[string]any)
		if r.status != 200 || caps["version"] != float64(1) || caps["maxBytes"] != float64(wire.FileRangeMaxBytes) {
			t.Fatalf("capabilities %s", r.body)
		}
	})
	t.Run("SymlinkSwapRace", func(t *testing.T) {
		// A command flips a link between a file inside and a secret outside
		// while the host reads it: no read may ever return the secret.
		h.sh(t, "echo inside > swap-in.txt && ln -sfn swap-in.txt swap")
		id := h.reserve(t)
		done := make(chan *run, 1)
		go func() {
			done <- h.executeNoFatal(map[string]any{"executionId": id, "command": "sh", "args": []string{"-c",
				"while :; do ln -sfn " + outside + "/secret swap.new && mv -fT swap.new swap; ln -sfn swap-in.txt swap.new && mv -fT swap.new swap; done"}})
		}()
		var leaked, served atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					r := h.post(t, wire.RouteReadFile, map[string]any{"path": "swap"})
					if strings.Contains(string(r.body), "secret") {
						leaked.Add(1)
					}
					if r.status == 200 {
						served.Add(1)
					}
					h.post(t, wire.RouteWriteFile, map[string]any{"path": "swap", "content": "host wrote this"})
				}
			}()
		}
		wg.Wait()
		h.post(t, wire.RouteCancel, map[string]any{"executionId": id})
		<-done
		if leaked.Load() > 0 {
			t.Fatalf("%d reads returned the outside file", leaked.Load())
		}
		if got := h.sh(t, "cat "+outside+"/secret"); got != "secret\n" {
			t.Fatalf("outside file overwritten: %q", got)
		}
		t.Logf("%d of 400 reads served (the rest refused)", served.Load())
	})
}
