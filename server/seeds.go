package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	agentclient "github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/seeds"
	"github.com/cordon-sandbox/cordon/server/api"
)

// seedTimeout bounds one git command of a seed (a clone included).
const seedTimeout = 10 * time.Minute

// handleSeed is POST /v1/sandboxes/{id}/seed: the seed's repositories made
// present under root inside the sandbox, only what is missing cloned;
// drift is refused (409) without touching anything.
func (s *Server) handleSeed(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	var req api.SeedRequest
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &req) {
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	out, err := seeds.Ensure(r.Context(), seedShell(e.sb), req.Seed, req.Root)
	var drift *seeds.DriftError
	switch {
	case errors.As(err, &drift):
		writeJSON(w, http.StatusConflict, api.SeedDrift{Code: api.CodeSeedDrift, Message: err.Error(), Drift: drift.Drift})
		return
	case errors.Is(err, seeds.ErrInvalid):
		writeError(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, api.CodeSeedFailed, err.Error())
		return
	}
	s.emit(api.EventSeeded, s.recordOf(e), map[string]any{"seed": req.Name, "repositories": out})
	writeJSON(w, http.StatusOK, api.SeedResult{Repositories: out})
}

// seedShell runs a seed's scripts in sb through its agent.
func seedShell(sb *sandbox.Sandbox) seeds.Shell {
	return func(ctx context.Context, script string, args ...string) (string, string, int, error) {
		// The daemon holds the deadline, not only the agent.
		ctx, cancel := context.WithTimeout(ctx, seedTimeout+hostGrace)
		defer cancel()
		var stdout, stderr bytes.Buffer
		res, err := sb.Client().Exec(ctx, "/bin/sh", agentclient.ExecOptions{Args: append([]string{"-c", script, "sh"}, args...),
			Timeout: seedTimeout, MaxOutputBytes: 1 << 20, Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			return "", "", 0, err
		}
		code := res.ExitCode
		if res.TimedOut {
			code = -1
			stderr.WriteString("\ntimed out")
		}
		return stdout.String(), stderr.String(), code, nil
	}
}
