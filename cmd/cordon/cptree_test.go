package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/wire"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// TestDownloadTreeDistrustsListing: a sandbox whose agent lists entries
// named ".." or with a slash (no directory holds such names; an agent the
// workload took over could send them) gets its copy refused, and nothing
// is written beside the destination on the host.
func TestDownloadTreeDistrustsListing(t *testing.T) {
	for _, name := range []string{"..", "../escaped", "a/../../escaped", ".", ""} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/dir") {
					json.NewEncoder(w).Encode(wire.ListResponse{Path: r.URL.Query().Get("path"), Entries: []wire.FileInfo{{Name: name, Type: "file", Size: 4, Mode: 0o644}}})
					return
				}
				w.Write([]byte("evil"))
			}))
			defer srv.Close()
			c, err := sclient.New(srv.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			base := t.TempDir()
			dst := filepath.Join(base, "inner", "dst")
			err = downloadTree(context.Background(), c, "sbx_1", "/workspace/d", dst)
			if err == nil || !strings.Contains(err.Error(), "no directory can hold") {
				t.Fatalf("got %v", err)
			}
			if _, err := os.Stat(filepath.Join(base, "inner", "escaped")); err == nil {
				t.Fatal("a file was written beside the destination")
			}
		})
	}
}
