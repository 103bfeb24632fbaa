package docker

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

var update = flag.Bool("update", false, "rewrite testdata/container.json from the renderer")

// TestRender pins the container the baseline renders to, whole (the
// create request the engine is sent): a change
// to the hardening shows here and has to be made on purpose (go test
// -run TestRender -update, then read the diff). The seccomp profile is the
// baseline's own, pinned by its tests; here it is checked to be that one.
func TestRender(t *testing.T) {
	req, err := render(renderInput{
		Image: "example.test/image:1", UID: 1000, Env: []string{"CORDON_AGENT_SOCKET=/run/cordon/agent.sock"},
		AgentPath: "/state/agent-0123/cordon-agent", SocketDir: "/state/cordon-0123/sock",
		Identity: []bindMount{bind("/state/accounts-0123/passwd", "/etc/passwd", true)},
		Limits:   sandbox.Limits{MemoryBytes: 512 << 20, Pids: 64, CPUs: 1.5},
		Landlock: "auto", CgroupParent: "/cordon-oci",
		Labels: map[string]string{LabelTier: Name, LabelOwner: "cordon", LabelSandbox: "cordon-0123"},
	})
	if err != nil {
		t.Fatal(err)
	}
	profile, _ := json.Marshal(host.SeccompProfile(false, true))
	found := false
	for i, o := range req.HostConfig.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") {
			if o != "seccomp="+string(profile) {
				t.Error("the seccomp profile is not the baseline's")
			}
			req.HostConfig.SecurityOpt[i], found = "seccomp=<the baseline's profile>", true
		}
	}
	if !found {
		t.Error("no seccomp profile")
	}
	testutil.Golden(t, filepath.Join("testdata", "container.json"), req, *update)
}
