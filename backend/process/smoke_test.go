package process_test

import (
	"bytes"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

func TestSmoke(t *testing.T) {
	testutil.RequiresRoot(t)
	p := sandbox.NewProvider([]sandbox.Backend{process.New(process.Config{AgentPath: testutil.BuildAgent(t)})})
	sb, err := p.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), "sh", sandbox.ExecOptions{Args: []string{"-c", "id; pwd; hostname; ls /; cat /proc/self/status | grep -E 'Cap|NoNew|Seccomp'; ps aux 2>/dev/null | head; echo hi > /workspace/x; cat /workspace/x; touch /etc/x; ip addr 2>/dev/null | head -5"}, Stdout: &out, Stderr: &errb})
	t.Logf("res %+v err %v\nstdout:\n%s\nstderr:\n%s", res, err, out.String(), errb.String())
}
