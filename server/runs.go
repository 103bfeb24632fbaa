package server

import (
	"context"
	"net/http"

	"github.com/cordon-sandbox/cordon/runs"
	"github.com/cordon-sandbox/cordon/server/client"
)

// runsServer serves POST /v1/runs: each run takes its sandbox through this
// daemon's own API as the caller, so it counts against the caller's
// quotas, claims from the caller's pools and is held to the same egress
// boundary as any sandbox.
func (s *Server) runsServer() *runs.Server {
	rn := s.cfg.Runs
	if rn == nil {
		rn = runs.NewRunner(runs.Config{Log: s.log})
	}
	return &runs.Server{Runner: rn, Log: s.log, Daemon: func(r *http.Request) (*client.Client, error) {
		key, _ := bearerSecret(r.Header.Get("Authorization"))
		return client.NewTransport("http://cordon", key, inproc{s.Handler()}), nil
	}}
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	s.runs.ServeRuns(w, r)
}

// settleRuns waits (within ctx) for finished runs' sandboxes to be torn
// down, while the API still takes their deletes.
func (s *Server) settleRuns(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.runs.Runner.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
