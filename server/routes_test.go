package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// TestOpenAPIMatchesRoutes: every route the server registers is in the
// OpenAPI document, and every operation the document lists is registered.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s, err := New(Config{Provider: sandbox.NewProvider([]sandbox.Backend{passthrough.New(passthrough.Config{})}), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	var served []string
	for _, r := range s.routes {
		path := strings.ReplaceAll(r.pattern, "...}", "}")
		methods := []string{r.method}
		if r.method == "" {
			// The agent passthrough and the port proxy take every method.
			methods = []string{"GET", "POST", "PUT", "DELETE"}
		}
		for _, m := range methods {
			served = append(served, m+" "+path)
		}
	}
	documented := openAPIRoutes()
	slices.Sort(served)
	slices.Sort(documented)
	if len(documented) < 10 {
		t.Fatalf("the document's paths were not read: %v", documented)
	}
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("served but not documented: %s", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("documented but not served: %s", r)
		}
	}
}
