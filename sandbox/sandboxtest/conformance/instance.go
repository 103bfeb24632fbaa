package conformance

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// FromBackend is the Factory for a tier: each target is one instance
// started directly from the backend, with the settings as agent
// configuration.
func FromBackend(b sandbox.Backend, spec sandbox.Spec) Factory {
	return func(t *testing.T, s Settings) *Target {
		token, err := sandbox.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"IDLE_TIMEOUT_MS": "0"}
		for k, v := range s {
			env[k] = v
		}
		inst, err := b.Start(t.Context(), sandbox.Launch{Spec: spec, Token: token, AgentEnv: env})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("agent said:\n%s", inst.Diagnostics())
			}
			if err := inst.Destroy(context.Background()); err != nil {
				t.Errorf("destroy: %v", err)
			}
		})
		c := client.New(inst.Endpoint())
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if _, err := c.WaitReady(ctx); err != nil {
			t.Fatalf("%v: %s", err, inst.Diagnostics())
		}
		tg := &Target{Endpoint: inst.Endpoint(), EnvPrefix: "CORDON_AGENT_", Exited: inst.Exited(), ReadsAnywhere: b.Capabilities().Isolated}
		if x, ok := inst.(sandbox.ExitCoder); ok {
			tg.ExitCode = x.ExitCode
		}
		if x, ok := inst.(sandbox.Signaller); ok {
			tg.Signal = func(sig string) error {
				return x.Signal(map[string]syscall.Signal{"TERM": syscall.SIGTERM, "INT": syscall.SIGINT}[sig])
			}
		}
		return tg
	}
}

// PassingTCP marks f's targets as sharing the host's kernel: their
// tcp-connect streams must come back as sockets handed over.
func PassingTCP(f Factory) Factory {
	return func(t *testing.T, s Settings) *Target {
		tg := f(t, s)
		tg.PassesTCP = true
		return tg
	}
}
