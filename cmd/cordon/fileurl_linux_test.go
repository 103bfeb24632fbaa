package main_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// TestFileURLVerb: cordon url prints a URL of the daemon that reads (or,
// with --put, writes) one file of a sandbox with no key; used with the
// other method it is 404, and an expiry past a day is refused.
func TestFileURLVerb(t *testing.T) {
	id, host, run := daemonSandbox(t)
	hc := unixHTTP(strings.TrimPrefix(host, "--host=unix://"))
	if _, errOut, code := run("exec", id, "--", "sh", "-c", "mkdir -p out && echo result > out/r.txt"); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	out, errOut, code := run("url", "--expires", "10m", id, "out/r.txt")
	get := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(get, "/v1/file-urls/") {
		t.Fatalf("url: %d %q %s", code, out, errOut)
	}
	resp, err := hc.Get("http://cordon" + get)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "result\n" {
		t.Fatalf("GET: %d %q", resp.StatusCode, b)
	}
	out, _, _ = run("url", "--put", id, "in/w.txt")
	put := strings.TrimSpace(out)
	for url, want := range map[string]int{put: 200, get: 404} {
		req, _ := http.NewRequest(http.MethodPut, "http://cordon"+url, strings.NewReader("written"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("PUT %s: %d, want %d", url[:30], resp.StatusCode, want)
		}
	}
	if out, _, _ := run("exec", id, "--", "cat", "in/w.txt"); out != "written" {
		t.Fatalf("the file the PUT URL wrote: %q", out)
	}
	// As the help says, the PUT URL takes a form too (curl -F file=@F URL).
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "local.txt")
	io.WriteString(fw, "from a form")
	mw.Close()
	resp, err = hc.Post("http://cordon"+put, mw.FormDataContentType(), &form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if out, _, _ := run("exec", id, "--", "cat", "in/w.txt"); resp.StatusCode != 200 || out != "from a form" {
		t.Fatalf("POST of a form to the PUT URL: %d, the file %q", resp.StatusCode, out)
	}
	if _, errOut, code := run("url", "--expires", "48h", id, "out/r.txt"); code != 2 || !strings.Contains(errOut, "24h") {
		t.Fatalf("--expires 48h: %d %s", code, errOut)
	}
}
