package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// testRawFiles covers cordon's raw file route (feature "raw-files").
func testRawFiles(t *testing.T, h *harness) {
	if !h.c.HasFeature(context.Background(), "raw-files") {
		if h.Reference {
			t.Skip("cordon addition: the reference worker has no raw file route")
		}
		t.Fatal("cordon-agent does not advertise raw-files")
	}
	ctx := context.Background()
	data := make([]byte, 5<<20+7)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	t.Run("RoundTrip", func(t *testing.T) {
		if err := h.c.Upload(ctx, "raw/big.bin", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if n, err := h.c.Download(ctx, "raw/big.bin", 0, 0, &got); err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("download: %d %v", n, err)
		}
	})
	t.Run("Ranges", func(t *testing.T) {
		var got bytes.Buffer
		if _, err := h.c.Download(ctx, "raw/big.bin", 1000, 24, &got); err != nil || !bytes.Equal(got.Bytes(), data[1000:1024]) {
			t.Fatalf("range: %v", err)
		}
		// A range outside the file is 416; a header that is not one range
		// (several, or malformed) is answered with the whole file (RFC
		// 9110 lets a server ignore any Range header).
		for _, c := range []struct {
			rng    string
			status int
		}{
			{"bytes=99999999-", http.StatusRequestedRangeNotSatisfiable}, {"bytes=-0", http.StatusRequestedRangeNotSatisfiable},
			{"bytes=5-2", http.StatusOK}, {"lines=1-2", http.StatusOK}, {"bytes=0-1,4-5", http.StatusOK},
		} {
			req, _ := http.NewRequest("GET", baseURL(h.Endpoint)+wire.RouteFiles+"?path=raw/big.bin", nil)
			req.Header.Set("Authorization", "Bearer "+h.Endpoint.Token)
			req.Header.Set("Range", c.rng)
			resp, err := h.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || c.status == http.StatusOK && !bytes.Equal(body, data) {
				t.Errorf("Range %q: %d (%d bytes), want %d", c.rng, resp.StatusCode, len(body), c.status)
			}
		}
	})
	t.Run("Refusals", func(t *testing.T) {
		outside := strings.TrimSpace(h.sh(t, "d=$(mktemp -d /tmp/cordon-raw-XXXXXX) && echo secret > $d/s && ln -sfn $d/s rawlink && echo $d"))
		t.Cleanup(func() { h.sh(t, "rm -rf "+outside) })
		if _, err := h.c.Download(ctx, "rawlink", 0, 0, io.Discard); err == nil {
			t.Error("download through a symlink out")
		}
		for _, p := range []string{"../x", "/etc/passwd", "rawlink"} {
			if err := h.c.Upload(ctx, p, strings.NewReader("x"), 1); err == nil {
				t.Errorf("upload to %q accepted", p)
			}
		}
		if got := h.sh(t, "cat "+outside+"/s"); got != "secret\n" {
			t.Fatalf("outside changed: %q", got)
		}
		// No token, or no path: the same refusals as every route.
		if r := h.raw(t, "GET", wire.RouteFiles+"?path=raw/big.bin", "", nil); r.status != 401 {
			t.Errorf("no token: %d", r.status)
		}
		if r := h.raw(t, "GET", wire.RouteFiles, h.Endpoint.Token, nil); r.status != 404 {
			t.Errorf("no query: %d", r.status)
		}
	})
	t.Run("Chunked", func(t *testing.T) {
		if !h.c.HasFeature(ctx, "files-chunked") {
			t.Fatal("cordon-agent does not advertise files-chunked")
		}
		// A body of unknown length (chunked): written whole, and the
		// answer says where the file is.
		req, _ := http.NewRequest("PUT", baseURL(h.Endpoint)+wire.RouteFiles+"?path=raw/chunked.bin", struct{ io.Reader }{bytes.NewReader(data)})
		req.Header.Set("Authorization", "Bearer "+h.Endpoint.Token)
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out wire.WriteFileResponse
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || out.BytesWritten != len(data) || !strings.HasSuffix(out.Path, "/raw/chunked.bin") || !strings.HasPrefix(out.Path, "/") {
			t.Fatalf("chunked PUT: %d %+v %v", resp.StatusCode, out, err)
		}
		var got bytes.Buffer
		if _, err := h.c.Download(ctx, "raw/chunked.bin", 0, 0, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("download: %d bytes, %v", got.Len(), err)
		}
		// Through the client: a size it does not know.
		if err := h.c.Upload(ctx, "raw/chunked.txt", strings.NewReader("streamed"), -1); err != nil {
			t.Fatal(err)
		}
		if got := h.sh(t, "cat raw/chunked.txt"); got != "streamed" {
			t.Fatalf("client's chunked upload: %q", got)
		}
	})
	// An upload that ends early leaves the old file and no temporary one:
	// a body that promised a megabyte and sent a little, and a chunked one
	// cut off before its last (empty) chunk; each then hangs up.
	for _, c := range []struct{ name, framing, body string }{
		{"InterruptedUploadKeepsOldFile", "Content-Length: 1048576", strings.Repeat("n", 1000)},
		{"InterruptedChunkedUploadKeepsOldFile", "Transfer-Encoding: chunked", "3e8\r\n" + strings.Repeat("n", 1000) + "\r\n10\r\nabc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := h.c.Upload(ctx, "raw/keep.txt", strings.NewReader("old"), 3); err != nil {
				t.Fatal(err)
			}
			conn, err := dial(h)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "PUT %s%s?path=raw/keep.txt HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer %s\r\n%s\r\n\r\n%s", h.Endpoint.Prefix, wire.RouteFiles, h.Endpoint.Token, c.framing, c.body)
			time.Sleep(100 * time.Millisecond)
			conn.Close()
			if !eventually(5*time.Second, func() bool {
				return h.sh(t, "cat raw/keep.txt; ls -a raw | grep -c cordon- || true") == "old0\n"
			}) {
				t.Fatalf("after an interrupted upload: %q", h.sh(t, "cat raw/keep.txt; ls -a raw"))
			}
		})
	}
}

func dial(h *harness) (net.Conn, error) {
	return net.DialTimeout(h.Endpoint.Network, h.Endpoint.Address, 5*time.Second)
}
