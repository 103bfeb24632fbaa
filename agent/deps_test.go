package agent_test

import (
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestAgentDependencies pins what cordon-agent links beyond the standard
// library: it runs in every sandbox, so host-side libraries stay out.
func TestAgentDependencies(t *testing.T) {
	deps := testutil.Deps(t, "./cmd/cordon-agent", "{{if not .Standard}}{{.ImportPath}}{{end}}")
	allowed := map[string]bool{
		"github.com/cordon-sandbox/cordon/cmd/cordon-agent":                    true,
		"github.com/cordon-sandbox/cordon/agent":                               true,
		"github.com/cordon-sandbox/cordon/agent/wire":                          true,
		"github.com/cordon-sandbox/cordon/agent/sandboxinit":                   true,
		"github.com/cordon-sandbox/cordon/agent/startup":                       true,
		"github.com/cordon-sandbox/cordon/agent/clonexec":                      true,
		"github.com/cordon-sandbox/cordon/agent/clonexec/internal/startnofile": true,
		"github.com/cordon-sandbox/cordon/agent/internal/httpd":                true,
		"github.com/cordon-sandbox/cordon/baseline":                            true,
		"github.com/cordon-sandbox/cordon/agent/vminit":                        true,
		"github.com/cordon-sandbox/cordon/internal/connq":                      true, // a microVM's sessions, one listener
		"github.com/cordon-sandbox/cordon/internal/memcg":                      true, // a pod's memory
		"github.com/creack/pty":                                                true,
		"github.com/hashicorp/yamux":                                           true, // a microVM's port, multiplexed
		"golang.org/x/net/bpf":                                                 true,
		"golang.org/x/sys/unix":                                                true,
	}
	for _, dep := range deps {
		if !allowed[dep] {
			t.Errorf("cordon-agent links %s; the agent may link only the standard library, golang.org/x/sys, x/net/bpf, creack/pty, hashicorp/yamux and its own packages", dep)
		}
	}
}

// TestAgentStartsLight: the agent links none of the standard library's
// heavy packages. Every sandbox start pays for their initialisation (TLS,
// X.509 and HTTP/2 tables, compressors): net/http, which links them all,
// cost each start some 50 page faults and half a millisecond; the agent
// serves its wire with httpd instead.
func TestAgentStartsLight(t *testing.T) {
	heavy := []string{"net/http", "crypto/tls", "crypto/x509", "compress/flate", "mime"}
	for _, dep := range testutil.Deps(t, "./cmd/cordon-agent", "") {
		for _, h := range heavy {
			if dep == h || strings.HasPrefix(dep, h+"/") {
				t.Errorf("cordon-agent links %s", dep)
			}
		}
	}
}
