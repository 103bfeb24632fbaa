//go:build linux

package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzPlace: a placed path is clean and inside the root it was placed under,
// and that root is the workspace or one of the configured roots.
func FuzzPlace(f *testing.F) {
	for _, s := range []string{"a", "../x", "/ws/a/../../etc", "/ro/x", "a/./b//c", "/", "..", "/ws", "/wsx/y", "a\x00b", "/ro/../ws/z"} {
		f.Add(s)
	}
	roots := []string{"/ws", "/ro"}
	f.Fuzz(func(t *testing.T, p string) {
		target, root, err := place(p, "/ws", roots)
		if err != nil {
			return
		}
		if root != "/ws" && root != "/ro" {
			t.Fatalf("place(%q) root %q", p, root)
		}
		if target != filepath.Clean(target) || !within(target, root) {
			t.Fatalf("place(%q) = %q outside %q", p, target, root)
		}
	})
}

// jailFixture is a workspace full of links that lead in, out, nowhere and
// around in circles, beside an outside directory holding a secret.
func jailFixture(t testing.TB) (ws, outside string) {
	base := t.TempDir()
	ws, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws + "/sub/deeper", outside + "/dir"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(outside+"/secret", []byte("SECRET"), 0o644))
	must(os.WriteFile(ws+"/sub/file", []byte("inside"), 0o644))
	for link, to := range map[string]string{
		"out": outside, "outfile": outside + "/secret", "in": ws + "/sub", "rel": "sub/file",
		"dangling": outside + "/new", "loop": "loop", "up": "..", "sub/back": "../../outside",
		"proc": "/proc/self/root", "root": "/",
	} {
		must(os.Symlink(to, filepath.Join(ws, link)))
	}
	return ws, outside
}

func listTree(t testing.TB, dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			data, _ := os.ReadFile(p)
			b.WriteString(p + "=" + string(data) + "\n")
		}
		return nil
	})
	return b.String()
}

// FuzzJail: whatever path is asked for, a read never returns a byte from
// outside the workspace, and a write never changes anything outside it.
func FuzzJail(f *testing.F) {
	for _, s := range []string{"sub/file", "out/secret", "outfile", "in/file", "rel", "dangling", "loop", "up/outside/secret",
		"sub/back/secret", "proc/etc/passwd", "root/etc/hostname", "in/../out/secret", "new/dir/file", "out/dir/x", "sub/deeper/../x"} {
		f.Add(s, []byte("data"))
	}
	f.Fuzz(func(t *testing.T, p string, data []byte) {
		ws, outside := jailFixture(t)
		before := listTree(t, outside)
		if target, root, err := place(p, ws, []string{ws}); err == nil {
			if file, err := openForRead(target, root); err == nil {
				got, _ := readAllLimited(file, 1<<20)
				file.Close()
				if bytes.Contains(got, []byte("SECRET")) {
					t.Fatalf("read %q leaked the outside secret", p)
				}
			}
			_, _ = writeFileIn(target, root, bytes.NewReader(data), nil)
		}
		if after := listTree(t, outside); after != before {
			t.Fatalf("write %q changed the outside directory:\nbefore %s\nafter %s", p, before, after)
		}
	})
}

func readAllLimited(f *os.File, n int) ([]byte, error) {
	buf := make([]byte, n)
	k, err := f.Read(buf)
	return buf[:max(k, 0)], err
}

// FuzzExecuteBody: every body either is refused with a code, or yields a
// request whose command, cwd and timeout keep the agent's rules.
func FuzzExecuteBody(f *testing.F) {
	for _, s := range []string{
		`{"command":"sh","args":["-c","x"],"cwd":"a/b","timeoutMs":1000}`,
		`{"command":"x","cwd":"../.."}`, `{"command":"x","timeoutMs":-1}`, `{"command":"x","timeoutMs":"5"}`,
		`{"command":"x","stdio":true,"executionId":"exec_00000000-0000-4000-8000-000000000000"}`,
		`{"command":"x","env":{"A":1,"B":null}}`, `{"command":"x","args":[1]}`, `{"command":"x","cwd":5}`,
		`{"command":"x","maxOutputBytes":-3}`, `{"command":"x","normalExitPolicy":"computer-lifetime"}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	cfg := DefaultConfig()
	cfg.Workspace = "/ws"
	s := &Server{cfg: cfg}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b executeBody
		if json.Unmarshal(body, &b) != nil {
			return
		}
		q, refusal := s.parseExecute(b)
		if refusal != nil {
			if refusal.Error == "" {
				t.Fatal("refusal without a code")
			}
			return
		}
		if q.command == "" || !within(q.cwd, "/ws") || q.timeout <= 0 || q.timeout > cfg.MaxTimeout {
			t.Fatalf("accepted %s as %+v", body, q)
		}
		if q.spawnErr == nil {
			for _, a := range append(q.argv, q.env...) {
				if strings.IndexByte(a, 0) >= 0 {
					t.Fatalf("NUL byte accepted in %q", a)
				}
			}
		}
	})
}

// FuzzOutputClip: chunked output comes out byte-for-byte as the clipped
// input, and no emitted piece ends inside a character that was whole in
// the input.
func FuzzOutputClip(f *testing.F) {
	f.Add([]byte("héllo €𝄞 wörld"), uint8(3), int64(100))
	f.Add([]byte{0xe2, 0x82, 0xac, 0xff, 0xe2}, uint8(1), int64(4))
	f.Fuzz(func(t *testing.T, in []byte, step uint8, limit int64) {
		if step == 0 {
			step = 1
		}
		c := &outputClip{max: limit}
		var out []byte
		for i := 0; i < len(in); i += int(step) {
			piece := c.take(in[i:min(len(in), i+int(step))])
			if utf8.Valid(in) && !utf8.ValidString(piece) {
				t.Fatalf("piece %q splits a character", piece)
			}
			out = append(out, piece...)
		}
		out = append(out, c.flush()...)
		want := in
		if limit < int64(len(in)) {
			want = in[:max(0, limit)]
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("got %q, want %q", out, want)
		}
	})
}

// FuzzJSONStringWriter: the streamed encoding is a valid JSON string that
// decodes to what encoding/json makes of the same bytes.
func FuzzJSONStringWriter(f *testing.F) {
	f.Add([]byte("plain \"quoted\" \\ \n\t\x00 \u2028 é€"), uint8(2))
	f.Add([]byte{0xff, 0xe2, 0x82, 'a', 0xf0, 0x9f}, uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		if step == 0 {
			step = 1
		}
		var buf bytes.Buffer
		buf.WriteByte('"')
		j := jsonStringWriter{w: &buf}
		for i := 0; i < len(in); i += int(step) {
			j.write(in[i:min(len(in), i+int(step))])
		}
		j.flush()
		buf.WriteByte('"')
		var got string
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("invalid JSON %q: %v", buf.Bytes(), err)
		}
		ref, _ := json.Marshal(string(in))
		var want string
		_ = json.Unmarshal(ref, &want)
		if got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}

// FuzzBearerToken: the hand-written matcher agrees with the reference's
// pattern, /^Bearer +(.+)$/i, on every input.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x y", "BEARER ", "Bearer  ", "Bearer   ", "Bearer\tx", "Bearer a\nb", "Bearerx", "Bearer \r", "Bea", "Bearer  \n"} {
		f.Add(s)
	}
	pattern := regexp.MustCompile(`(?i)^Bearer +(.+)$`)
	f.Fuzz(func(t *testing.T, h string) {
		got, ok := bearerToken(h)
		m := pattern.FindStringSubmatch(h)
		if ok != (m != nil) || ok && got != m[1] {
			t.Fatalf("bearerToken(%q) = %q, %v; pattern says %q", h, got, ok, m)
		}
	})
}

// FuzzExecutionID: the hand-written check agrees with ^exec_[0-9a-f-]{36}$.
func FuzzExecutionID(f *testing.F) {
	for _, s := range []string{"exec_0123456789abcdef0123456789abcdef0123", "exec_01234567-89ab-cdef-0123-456789abcdef", "exec_", "exec_01234567-89AB-cdef-0123-456789abcdef", "xexec_01234567-89ab-cdef-0123-456789abcdef"} {
		f.Add(s)
	}
	pattern := regexp.MustCompile(`^exec_[0-9a-f-]{36}$`)
	f.Fuzz(func(t *testing.T, id string) {
		if validExecutionID(id) != pattern.MatchString(id) {
			t.Fatalf("validExecutionID(%q) = %v, pattern disagrees", id, validExecutionID(id))
		}
	})
}
