package main_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestHostDependencies: the host binary does not link the agent's server
// (package agent and what only it uses). The host shares the process
// tier's init code (sandboxinit), which names the agent only through
// startup; a constant taken from package agent once linked all of it.
func TestHostDependencies(t *testing.T) {
	deps := testutil.Deps(t, "./cmd/cordon", "")
	// A positive control: the list is the binary's.
	if !slices.Contains(deps, "github.com/cordon-sandbox/cordon/agent/sandboxinit") {
		t.Fatalf("cordon does not link sandboxinit: not its dependency list?\n%v", deps)
	}
	for _, banned := range []string{"github.com/cordon-sandbox/cordon/agent", "github.com/cordon-sandbox/cordon/agent/internal/httpd"} {
		if slices.Contains(deps, banned) {
			t.Errorf("cordon links %s, the agent's server", banned)
		}
	}
}

// TestNoMCPInCordon: the MCP SDK is linked into cordon-mcp alone; every
// cordon command would pay for its start-up otherwise.
func TestNoMCPInCordon(t *testing.T) {
	deps := testutil.Deps(t, "./cmd/cordon", "")
	if !slices.Contains(deps, "github.com/cordon-sandbox/cordon/runs") {
		t.Fatalf("cordon does not link runs: not its dependency list?\n%v", deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/modelcontextprotocol/") || strings.HasPrefix(d, "github.com/google/jsonschema-go") {
			t.Errorf("cordon links %s", d)
		}
	}
}

// TestLightDependencies: the light build (scripts/setup.sh's bin/cordon)
// links none of what it hands to cordon-full: the daemon, the image cache
// and its registry client, the tiers beyond process and passthrough. A
// `cordon run` would pay for their start-up otherwise.
func TestLightDependencies(t *testing.T) {
	deps := testutil.Deps(t, "./cmd/cordon", "", "-tags", "cordon_light")
	for _, want := range []string{"github.com/cordon-sandbox/cordon/backend/process", "github.com/cordon-sandbox/cordon/server/client"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("the light build does not link %s: not its dependency list?\n%v", want, deps)
		}
	}
	banned := []string{"github.com/cordon-sandbox/cordon/server", "github.com/cordon-sandbox/cordon/image", "github.com/cordon-sandbox/cordon/runs",
		"github.com/cordon-sandbox/cordon/backend/oci", "github.com/cordon-sandbox/cordon/backend/docker", "github.com/cordon-sandbox/cordon/backend/kubernetes",
		"github.com/cordon-sandbox/cordon/backend/microvm"}
	for _, d := range deps {
		if slices.Contains(banned, d) || strings.HasPrefix(d, "github.com/google/go-containerregistry/") || strings.HasPrefix(d, "github.com/opencontainers/go-digest") || strings.HasPrefix(d, "github.com/opencontainers/image-spec") ||
			strings.HasPrefix(d, "github.com/klauspost/") || strings.HasPrefix(d, "github.com/prometheus/") || strings.HasPrefix(d, "go.etcd.io/bbolt") ||
			strings.HasPrefix(d, "sigs.k8s.io/") {
			t.Errorf("the light build links %s", d)
		}
	}
}
