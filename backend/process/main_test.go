//go:build linux

package process_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/sandbox"
)

func TestMain(m *testing.M) {
	if n := os.Getenv("CORDON_TEST_HOLD_SANDBOXES"); n != "" {
		os.Exit(holdSandboxes(n))
	}
	os.Exit(m.Run())
}

// holdSandboxes is the host process of TestSandboxesDieWithHost: it makes
// n sandboxes one after the other (with CORDON_TEST_NO_CLONE, so that the
// later ones come from the spawner the second started), each leaving a
// setsid'd sleep behind, prints
// "ready" and each init's pid and parent pid, and waits to be killed.
func holdSandboxes(arg string) int {
	n, _ := strconv.Atoi(arg)
	b := process.New(process.Config{AgentPath: os.Getenv("CORDON_TEST_AGENT"), StateDir: os.Getenv("CORDON_TEST_STATE")})
	if os.Getenv("CORDON_TEST_NO_CLONE") != "" {
		process.NoClone(b)
	}
	p := sandbox.NewProvider([]sandbox.Backend{b})
	ctx := context.Background()
	for i := range n {
		sb, err := p.Create(ctx, sandbox.Spec{})
		if err != nil {
			fmt.Println("create:", err)
			return 1
		}
		script := fmt.Sprintf("(setsid sleep %d >/dev/null 2>&1 &)", 3170+i)
		if res, err := sb.Exec(ctx, "sh", sandbox.ExecOptions{Args: []string{"-c", script}}); err != nil || res.ExitCode != 0 {
			fmt.Println("exec:", res, err)
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
	found, err := sandboxInits(os.Getenv("CORDON_TEST_STATE"))
	if err != nil {
		fmt.Println("inits:", err)
		return 1
	}
	var inits []string
	for _, in := range found {
		inits = append(inits, in.pid+":"+in.parent)
	}
	fmt.Println("ready", os.Getpid(), strings.Join(inits, " "))
	select {}
}
