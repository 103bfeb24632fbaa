package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// TestFileURLs: a file URL reads or writes one path of one sandbox with
// no key, through the real daemon and agent: GET (with a Range), HEAD, a
// browser's preflight, PUT; and nothing else. The other method, another
// tenant's ask, a token changed by a byte, an expired one, a path out of
// the sandbox and a sandbox gone are refused; a URL outlives a daemon
// restart (its key is the daemon's own, kept in the state directory).
func TestFileURLs(t *testing.T) {
	d := startDaemon(t)
	alice, aliceKey := d.tenant(t, "alice")
	bob, _ := d.tenant(t, "bob")
	ctx := t.Context()
	sb, err := alice.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	report := "the agent's report\n"
	if err := alice.Upload(ctx, sb.ID, "out/report.txt", strings.NewReader(report), int64(len(report))); err != nil {
		t.Fatal(err)
	}
	do := func(method, url string, body []byte, hdr ...string) (int, string, http.Header) {
		t.Helper()
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(body)
		}
		st, b, h := d.send(t, method, url, r, hdr...)
		return st, string(b), h
	}
	get, err := alice.FileURL(ctx, sb.ID, "out/report.txt", "", 0)
	if err != nil || get.Method != "GET" || !strings.HasPrefix(get.URL, "/v1/file-urls/") || time.Until(get.ExpiresAt) < 59*time.Minute {
		t.Fatalf("a GET URL: %+v %v", get, err)
	}
	if st, body, h := do("GET", get.URL, nil); st != 200 || body != report || h.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("GET: %d %q %v", st, body, h)
	}
	if st, body, _ := do("GET", get.URL, nil, "Range", "bytes=4-8"); st != 206 || body != "agent" {
		t.Fatalf("GET with a range: %d %q", st, body)
	}
	if st, _, h := do("HEAD", get.URL, nil); st != 200 || h.Get("Content-Length") != "19" {
		t.Fatalf("HEAD: %d %v", st, h)
	}
	if st, _, h := do("OPTIONS", get.URL, nil); st != 204 || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "PUT, POST") {
		t.Fatalf("OPTIONS: %d %v", st, h)
	}
	if st, _, _ := do("PUT", get.URL, []byte("overwritten")); st != 404 {
		t.Fatalf("PUT with a GET URL: %d", st)
	}
	put, err := alice.FileURL(ctx, sb.ID, "in/upload.bin", "put", time.Minute)
	if err != nil || put.Method != "PUT" {
		t.Fatalf("a PUT URL: %+v %v", put, err)
	}
	if st, body, _ := do("PUT", put.URL, []byte("\x00uploaded\xff")); st != 200 {
		t.Fatalf("PUT: %d %s", st, body)
	}
	var got bytes.Buffer
	if _, err := alice.Download(ctx, sb.ID, "in/upload.bin", 0, -1, &got); err != nil || got.String() != "\x00uploaded\xff" {
		t.Fatalf("the file a PUT URL wrote: %q %v", got.String(), err)
	}
	if st, _, _ := do("GET", put.URL, nil); st != 404 {
		t.Fatalf("GET with a PUT URL: %d", st)
	}
	// A PUT URL also takes a form holding the file, as a browser posts
	// one (and E2B's upload URLs take): its file's own name is passed
	// over for the URL's path.
	ct, form := form(t, [3]string{"file", "elsewhere.txt", "from a form"})
	if st, body, _ := do("POST", put.URL, form, "Content-Type", ct); st != 200 || !strings.Contains(body, `/in/upload.bin","name":"upload.bin","type":"file","size":11}]`) {
		t.Fatalf("POST of a form: %d %s", st, body)
	}
	got.Reset()
	if _, err := alice.Download(ctx, sb.ID, "in/upload.bin", 0, -1, &got); err != nil || got.String() != "from a form" {
		t.Fatalf("the file a form wrote: %q %v", got.String(), err)
	}
	if st, _, _ := do("POST", get.URL, form, "Content-Type", ct); st != 404 {
		t.Fatalf("POST with a GET URL: %d", st)
	}
	// A byte changed anywhere in the token; a token of nothing.
	tok := strings.TrimPrefix(get.URL, "/v1/file-urls/")
	for _, bad := range []string{tok[:5] + string(tok[5]^1) + tok[6:], tok[:len(tok)-3] + string(tok[len(tok)-3]^1) + tok[len(tok)-2:], "x.y", "nothing"} {
		if st, _, _ := do("GET", "/v1/file-urls/"+bad, nil); st != 404 {
			t.Errorf("a forged token %q: %d", bad, st)
		}
	}
	// Another tenant cannot ask for one; out-of-range asks are 400.
	_, err = bob.FileURL(ctx, sb.ID, "out/report.txt", "", 0)
	wantCode(t, err, http.StatusNotFound, api.CodeNotFound)
	for _, bad := range []api.FileURLRequest{{Path: ""}, {Path: "a", Method: "POST"}, {Path: "a", ExpiresInSeconds: 86401}, {Path: "a", ExpiresInSeconds: -1}, {Path: "a\x00b"}} {
		_, err := alice.FileURL(ctx, sb.ID, bad.Path, bad.Method, time.Duration(bad.ExpiresInSeconds)*time.Second)
		if bad.ExpiresInSeconds < 0 {
			// The client rounds; send it as it is.
			st, body, _ := do("POST", "/v1/sandboxes/"+sb.ID+"/file-urls", []byte(`{"path":"a","expiresInSeconds":-1}`), "Authorization", "Bearer x")
			if st != 401 {
				t.Errorf("without a key: %d %s", st, body)
			}
			continue
		}
		wantCode(t, err, http.StatusBadRequest, api.CodeInvalid)
	}
	// A path out of the sandbox's files is the agent's to refuse.
	escape, err := alice.FileURL(ctx, sb.ID, "../../../../etc/shadow", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if st, body, _ := do("GET", escape.URL, nil); st < 400 || st >= 500 || strings.Contains(body, "root:") {
		t.Fatalf("a URL of a path out of the sandbox: %d %q", st, body)
	}
	// Expired.
	brief, err := alice.FileURL(ctx, sb.ID, "out/report.txt", "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if st, _, _ := do("GET", brief.URL, nil); st != 404 {
		t.Fatalf("an expired URL: %d", st)
	}
	// Across a restart; then the sandbox gone.
	d.stop(t, false)
	d.start(t)
	if st, body, _ := do("GET", get.URL, nil); st != 200 || body != report {
		t.Fatalf("GET after a restart: %d %q", st, body)
	}
	if alice, err = sclient.New("http://"+d.tcp, aliceKey); err != nil {
		t.Fatal(err)
	}
	if err := alice.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := do("GET", get.URL, nil); st != 404 {
		t.Fatalf("GET of a sandbox gone: %d", st)
	}
}
