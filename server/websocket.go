package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server/api"
)

// WebSocket routes, for callers (browsers, terminal front ends) that want
// one full-duplex connection rather than a stream and a request per input.

// terminalControl is a text message from the caller of a terminal
// WebSocket: {"type":"resize","rows":R,"cols":C}.
type terminalControl struct {
	Type string `json:"type"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// handleTerminalSocket attaches a WebSocket to a terminal session: binary
// messages from the caller are typed in, text messages carry resizes,
// and the session's output goes out as binary messages from ?from=N (0 by
// default). When the session's output ends, the socket closes normally
// with the reason {"exitCode":N,"signal":S}.
func (s *Server) handleTerminalSocket(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	from, err := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	if r.URL.Query().Get("from") == "" {
		from, err = 0, nil
	}
	if err != nil || from < 0 {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "from: want a byte offset (an integer from 0)")
		return
	}
	ac := e.sb.Client()
	sid := r.PathValue("sid")
	sess, err := ac.Session(r.Context(), sid)
	if err != nil {
		status, code := agentErrorStatus(err)
		writeError(w, status, code, err.Error())
		return
	}
	if !sess.TTY {
		writeError(w, http.StatusConflict, api.CodeConflict, "the session has no terminal")
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ws.SetReadLimit(wire.MaxInputBytes)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The caller's keystrokes and sizes.
	go func() {
		defer cancel()
		for {
			typ, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			switch typ {
			case websocket.MessageBinary:
				if err := ac.SessionInput(ctx, sid, data); err != nil {
					return
				}
			case websocket.MessageText:
				var c terminalControl
				if json.Unmarshal(data, &c) == nil && c.Type == "resize" {
					_ = ac.ResizeSession(ctx, sid, c.Rows, c.Cols)
				}
			}
		}
	}()
	_, ended, err := ac.SessionOutput(ctx, sid, from, true, func(_ string, _ int64, data []byte) error {
		return ws.Write(ctx, websocket.MessageBinary, data)
	})
	if err != nil || !ended {
		var ev *client.EvictedError
		if errors.As(err, &ev) {
			ws.Close(websocket.StatusPolicyViolation, fmt.Sprintf(`{"evicted":true,"first":%d}`, ev.First))
		}
		return
	}
	end, err := ac.WaitSession(ctx, sid, 0)
	if err != nil {
		return
	}
	reason, _ := json.Marshal(struct {
		ExitCode *int   `json:"exitCode,omitempty"`
		Signal   string `json:"signal,omitempty"`
	}{end.ExitCode, end.Signal})
	ws.Close(websocket.StatusNormalClosure, string(reason))
}

// handleTCPSocket carries a byte stream to a port on the sandbox's own
// loopback over a WebSocket: binary messages both ways. The caller's close
// ends the connection.
func (s *Server) handleTCPSocket(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "port: want 1 to 65535")
		return
	}
	conn, err := e.sb.Client().DialTCP(r.Context(), port)
	if err != nil {
		status, code := agentErrorStatus(err)
		writeError(w, status, code, err.Error())
		return
	}
	defer conn.Close()
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	go func() {
		defer cancel()
		_, _ = io.Copy(conn, nc)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(nc, conn)
	ws.Close(websocket.StatusNormalClosure, "")
}

// agentErrorStatus maps an agent's refusal to the API's: its own status
// for a caller's mistake (4xx), 502 otherwise.
func agentErrorStatus(err error) (int, string) {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 {
		code := api.CodeInvalid
		switch ce.Status {
		case http.StatusNotFound:
			code = api.CodeNotFound
		case http.StatusConflict:
			code = api.CodeConflict
		}
		return ce.Status, code
	}
	return http.StatusBadGateway, api.CodeAgent
}
