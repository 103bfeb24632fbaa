//go:build linux

package agent_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestStartupRefusals launches each agent binary with each configuration and
// checks that it refuses (exit 1, naming the variable) or starts, exactly as
// the reference worker does.
func TestStartupRefusals(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string // settings without prefix
		start bool
		names string // what a refusal must mention
	}{
		{"EmptyToken", map[string]string{"TOKEN": "", "BIND": "127.0.0.1"}, false, "TOKEN"},
		{"PaddedToken", map[string]string{"TOKEN": " abc", "BIND": "127.0.0.1"}, false, "TOKEN"},
		{"TrailingNewlineToken", map[string]string{"TOKEN": "abc\n", "BIND": "127.0.0.1"}, false, "TOKEN"},
		{"ControlCharToken", map[string]string{"TOKEN": "ab\x01c", "BIND": "127.0.0.1"}, false, "TOKEN"},
		{"WideCharToken", map[string]string{"TOKEN": "ab€c", "BIND": "127.0.0.1"}, false, "TOKEN"},
		{"Latin1Token", map[string]string{"TOKEN": "abé", "BIND": "127.0.0.1"}, true, ""},
		{"TokenRoutable", map[string]string{"TOKEN": "secret", "BIND": "0.0.0.0"}, true, ""},
		{"TokenWinsOverBadEscape", map[string]string{"TOKEN": "secret", "BIND": "0.0.0.0", "ALLOW_UNAUTHENTICATED": "maybe"}, true, ""},
		{"NoTokenRoutable", map[string]string{"BIND": "0.0.0.0"}, false, "TOKEN"},
		{"NoTokenDefaultBind", map[string]string{}, false, "TOKEN"},
		{"NoTokenLoopback", map[string]string{"BIND": "127.0.0.1"}, true, ""},
		{"NoTokenLocalhost", map[string]string{"BIND": "localhost"}, true, ""},
		{"EscapeOne", map[string]string{"BIND": "0.0.0.0", "ALLOW_UNAUTHENTICATED": "1"}, true, ""},
		{"EscapeYesAnyCase", map[string]string{"BIND": "0.0.0.0", "ALLOW_UNAUTHENTICATED": "YeS"}, true, ""},
		{"EscapeZero", map[string]string{"BIND": "0.0.0.0", "ALLOW_UNAUTHENTICATED": "0"}, false, "ALLOW_UNAUTHENTICATED"},
		{"EscapeFalse", map[string]string{"BIND": "0.0.0.0", "ALLOW_UNAUTHENTICATED": "false"}, false, "ALLOW_UNAUTHENTICATED"},
		{"EscapePadded", map[string]string{"BIND": "0.0.0.0", "ALLOW_UNAUTHENTICATED": " yes"}, false, "ALLOW_UNAUTHENTICATED"},
		{"BadExitPolicy", map[string]string{"TOKEN": "secret", "NORMAL_EXIT_POLICY": "strict "}, false, "NORMAL_EXIT_POLICY"},
	}
	type agentKind struct {
		name   string
		prefix string
		argv   func(t *testing.T) []string
	}
	kinds := []agentKind{
		{"cordon-agent", "CORDON_AGENT_", func(t *testing.T) []string { return []string{testutil.BuildAgent(t)} }},
		{"reference", "NAMZU_SANDBOX_", func(t *testing.T) []string {
			p := testutil.Requires(t, "node")
			return []string{p[0], testutil.ReferenceWorker(t)}
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			argv := k.argv(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					ws := t.TempDir()
					env := baseEnv(ws)
					env = append(env, k.prefix+"WORKSPACE="+ws, k.prefix+"PORT=0")
					for key, v := range c.env {
						env = append(env, k.prefix+key+"="+v)
					}
					started, code, out := launch(t, argv, env)
					if c.start && !started {
						t.Fatalf("refused (exit %d), want it to start:\n%s", code, out)
					}
					if !c.start {
						if started || code != 1 {
							t.Fatalf("started=%v exit=%d, want a refusal with exit 1:\n%s", started, code, out)
						}
						if !strings.Contains(out, k.prefix+c.names) {
							t.Fatalf("refusal does not name %s%s:\n%s", k.prefix, c.names, out)
						}
					}
				})
			}
		})
	}
}

// launch starts argv and reports whether it began listening, or else its
// exit code, within a few seconds.
func launch(t *testing.T, argv, env []string) (started bool, code int, out string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	buf := logbuf.New(1 << 20)
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-done:
			return false, cmd.ProcessState.ExitCode(), buf.String()
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			return false, -1, buf.String() + "\n(neither listened nor exited)"
		case <-time.After(10 * time.Millisecond):
			if strings.Contains(buf.String(), "listening on") {
				_ = cmd.Process.Kill()
				<-done
				return true, 0, buf.String()
			}
		}
	}
}
