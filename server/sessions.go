package server

import (
	"net/http"
	"net/url"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// The REST API's routes for what lives in the sandbox's agent (sessions,
// terminals, retained output, watch, quiesce, flush): each is the agent's
// own route (docs/protocol.md) behind the daemon's credential and tenant,
// its answer passed on unchanged, counted as a stream while it is open.

// agentRoute serves a REST route by the agent route path(r) names.
func (s *Server) agentRoute(path func(r *http.Request) string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		s.inAgent(w, r, func(e *entry) { e.agent.forward(w, r, r.Method, path(r), r.URL.RawQuery) })
	}
}

// inAgent serves r with serve, for a sandbox that can take work, counted
// as one of the tenant's streams while serve runs.
func (s *Server) inAgent(w http.ResponseWriter, r *http.Request, serve func(e *entry)) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	serve(e)
}

// sessionPath is /sessions/SID, and the rest of the route after it.
func sessionPath(r *http.Request) string {
	p := wire.RouteSessions + "/" + url.PathEscape(r.PathValue("sid"))
	if verb := r.PathValue("verb"); verb != "" {
		p += "/" + verb
	}
	return p
}

func (s *Server) sessionRoutes() []route {
	fixed := func(p string) func(*http.Request) string { return func(*http.Request) string { return p } }
	sess := s.agentRoute(sessionPath)
	verb := func(v string) func(http.ResponseWriter, *http.Request) {
		return s.agentRoute(func(r *http.Request) string {
			return wire.RouteSessions + "/" + url.PathEscape(r.PathValue("sid")) + "/" + v
		})
	}
	return []route{
		{method: "POST", pattern: "/v1/sandboxes/{id}/sessions", h: s.handleSessionStart},
		{method: "GET", pattern: "/v1/sandboxes/{id}/sessions", h: s.agentRoute(fixed(wire.RouteSessions))},
		{method: "GET", pattern: "/v1/sandboxes/{id}/sessions/{sid}", h: sess},
		{method: "DELETE", pattern: "/v1/sandboxes/{id}/sessions/{sid}", h: sess},
		{method: "GET", pattern: "/v1/sandboxes/{id}/sessions/{sid}/output", h: verb("output")},
		{method: "GET", pattern: "/v1/sandboxes/{id}/sessions/{sid}/wait", h: verb("wait")},
		{method: "POST", pattern: "/v1/sandboxes/{id}/sessions/{sid}/kill", h: verb("kill")},
		{method: "POST", pattern: "/v1/sandboxes/{id}/sessions/{sid}/input", h: verb("input")},
		{method: "POST", pattern: "/v1/sandboxes/{id}/sessions/{sid}/resize", h: verb("resize")},
		{method: "GET", pattern: "/v1/sandboxes/{id}/executions/{eid}/output", h: s.agentRoute(func(r *http.Request) string {
			return wire.RouteExecutions + url.PathEscape(r.PathValue("eid")) + "/output"
		})},
		{method: "GET", pattern: "/v1/sandboxes/{id}/watch", h: s.agentRoute(fixed(wire.RouteWatch))},
		{method: "POST", pattern: "/v1/sandboxes/{id}/quiesce", h: s.agentRoute(fixed(wire.RouteQuiesce))},
		{method: "POST", pattern: "/v1/sandboxes/{id}/flush", h: s.agentRoute(fixed(wire.RouteFlush))},
	}
}
