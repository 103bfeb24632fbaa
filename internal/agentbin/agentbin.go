// Package agentbin finds the cordon-agent binary that backends start or bind
// into sandboxes.
package agentbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// EnvVar names an explicit path to cordon-agent.
const EnvVar = "CORDON_AGENT_BIN"

// Find returns the cordon-agent to use: explicit if non-empty, else
// $CORDON_AGENT_BIN, else the one beside the running executable, else the
// one on PATH.
func Find(explicit string) (string, error) {
	if explicit == "" {
		explicit = os.Getenv(EnvVar)
	}
	if explicit != "" {
		return check(explicit)
	}
	if self, err := os.Executable(); err == nil {
		if p, err := check(filepath.Join(filepath.Dir(self), "cordon-agent")); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("cordon-agent"); err == nil {
		return check(p)
	}
	return "", errors.New("cordon-agent not found: build it (scripts/setup.sh puts it beside cordon in bin/; or CGO_ENABLED=0 go build -o DIR/cordon-agent ./cmd/cordon-agent, beside cordon), or set " + EnvVar)
}

func check(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("cordon-agent: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("cordon-agent: %s is not an executable file", abs)
	}
	return abs, nil
}
