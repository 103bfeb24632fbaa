package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

// form is a multipart form: each pair a part's name and file name (none:
// a plain field) and its content.
func form(t *testing.T, parts ...[3]string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		disp := fmt.Sprintf("form-data; name=%q", p[0])
		if p[1] != "" {
			disp += fmt.Sprintf("; filename=%q", p[1])
			h.Set("Content-Type", "application/octet-stream")
		}
		h.Set("Content-Disposition", disp)
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p[2])
	}
	mw.Close()
	return mw.FormDataContentType(), b.Bytes()
}

// TestUploads: POST /v1/sandboxes/ID/files takes a browser's form (its
// files the parts named "file", at their file names or at ?path=) or a
// raw body, and PUT takes a body of unknown length (chunked), through the
// real daemon and agent. A form cut short leaves the file it was writing
// as it was; a name out of the sandbox, a form without files, two files
// for one path and a form without its boundary are refused with 4xx, the
// refusal naming what was written before it.
func TestUploads(t *testing.T) {
	d := startDaemon(t)
	alice, key := d.tenant(t, "alice")
	ctx := t.Context()
	sb, err := alice.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer " + key}
	files := "/v1/sandboxes/" + sb.ID + "/files"
	post := func(query string, ctype string, body []byte) (int, string) {
		t.Helper()
		st, b, _ := d.send(t, "POST", files+query, bytes.NewReader(body), append([]string{"Content-Type", ctype}, auth...)...)
		return st, string(b)
	}
	cat := func(path string) string {
		t.Helper()
		var b bytes.Buffer
		if _, err := alice.Download(ctx, sb.ID, path, 0, -1, &b); err != nil {
			return "(" + err.Error() + ")"
		}
		return b.String()
	}

	// Two files at their names (a directory kept), a plain field passed
	// over, and a mode.
	ct, body := form(t, [3]string{"note", "", "ignored"}, [3]string{"file", "a.txt", "first"}, [3]string{"file", "sub/dir/b.bin", "\x00second\xff"})
	st, out := post("?mode=600", ct, body)
	var got []api.UploadedFile
	if st != 200 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 2 ||
		got[0].Name != "a.txt" || !strings.HasSuffix(got[0].Path, "/a.txt") || got[0].Size != 5 || got[0].Type != "file" ||
		got[1].Name != "b.bin" || !strings.HasSuffix(got[1].Path, "/sub/dir/b.bin") || got[1].Size != 8 {
		t.Fatalf("a form of two files: %d %s", st, out)
	}
	if cat("a.txt") != "first" || cat("sub/dir/b.bin") != "\x00second\xff" {
		t.Fatalf("the files: %q %q", cat("a.txt"), cat("sub/dir/b.bin"))
	}
	if info, err := alice.Stat(ctx, sb.ID, "a.txt"); err != nil || info.Mode != 0o600 {
		t.Fatalf("mode: %+v %v", info, err)
	}
	// One file at ?path=, its own name passed over.
	ct, body = form(t, [3]string{"file", "whatever.txt", "placed"})
	if st, out := post("?path=placed/here.txt", ct, body); st != 200 || !strings.Contains(out, `/placed/here.txt"`) || cat("placed/here.txt") != "placed" {
		t.Fatalf("a form with a path: %d %s", st, out)
	}
	// A raw body.
	if st, out := post("?path=raw.bin", "application/octet-stream", []byte("raw bytes")); st != 200 || cat("raw.bin") != "raw bytes" {
		t.Fatalf("a raw POST: %d %s", st, out)
	}
	// An empty file.
	if st, out := post("?path=empty.txt", "application/octet-stream", nil); st != 200 || !strings.Contains(out, `"size":0`) || cat("empty.txt") != "" {
		t.Fatalf("an empty raw POST: %d %s %q", st, out, cat("empty.txt"))
	}
	// A PUT whose length is not known up front: chunked.
	req, _ := http.NewRequestWithContext(ctx, "PUT", "http://"+d.tcp+files+"?path=streamed.txt", struct{ io.Reader }{strings.NewReader("streamed")})
	req.Header.Set(auth[0], auth[1])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || cat("streamed.txt") != "streamed" {
		t.Fatalf("a chunked PUT: %d %q", resp.StatusCode, cat("streamed.txt"))
	}

	// Refusals, each 4xx with what it was about.
	for _, c := range []struct {
		name, query, ctype string
		parts              [][3]string
		want               int
		says               string
	}{
		{"no files", "", "", [][3]string{{"note", "", "x"}}, 400, `parts named \"file\"`},
		{"a file without a name", "", "", [][3]string{{"file", "", "x"}}, 400, "without a file name"},
		{"two files for one path", "?path=one.txt", "", [][3]string{{"file", "a", "1"}, {"file", "b", "2"}}, 400, "written before it: /"},
		{"a name out of the sandbox", "", "", [][3]string{{"file", "ok.txt", "fine"}, {"file", "../../../../etc/cordon-pwned", "x"}}, 0, "ok.txt"},
		{"no boundary", "", "multipart/form-data", nil, 400, "boundary"},
		{"a raw body without a path", "", "application/octet-stream", nil, 400, "path"},
	} {
		ct, body := form(t, c.parts...)
		if c.ctype != "" {
			ct = c.ctype
		}
		st, out := post(c.query, ct, body)
		if st < 400 || st >= 500 || c.want != 0 && st != c.want || !strings.Contains(out, c.says) {
			t.Errorf("%s: %d %s", c.name, st, out)
		}
	}
	if cat("one.txt") != "1" {
		t.Errorf("the first of two files for one path: %q", cat("one.txt"))
	}
	if st, _, _ := d.send(t, "GET", "/v1/sandboxes/"+sb.ID+"/stat?path=/etc/cordon-pwned", nil, auth...); st == 200 {
		t.Error("a file was written out of the sandbox's writable space")
	}

	// A form cut short mid-file: the file it was writing is left as it was.
	if st, out := post("?path=keep.txt", "application/octet-stream", []byte("old")); st != 200 {
		t.Fatal(st, out)
	}
	ct, body = form(t, [3]string{"file", "keep.txt", strings.Repeat("n", 64<<10)})
	c, err := net.Dial("tcp", d.tcp)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", files, key, ct, len(body))
	c.Write(body[:len(body)/2])
	time.Sleep(300 * time.Millisecond)
	c.Close()
	// Once the agent has let go of its temporary file, the old one is
	// there.
	left := func() (names []string) {
		ls, err := alice.ListDir(ctx, sb.ID, ".")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range ls.Entries {
			if strings.Contains(f.Name, ".cordon-") {
				names = append(names, f.Name)
			}
		}
		return names
	}
	for deadline := time.Now().Add(10 * time.Second); len(left()) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if l := left(); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
	if got := cat("keep.txt"); got != "old" {
		t.Fatalf("after a form cut short: %d bytes", len(got))
	}
}
