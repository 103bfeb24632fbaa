package wire

// Sessions (feature "sessions"): programs that belong to the sandbox, not to
// the connection that started them. A session runs detached (no terminal;
// its standard input is /dev/null), in a process group of its own, and its
// stdout and stderr are retained in one byte-offset space, bounded in
// bytes, for any connection to read from any offset still held and then
// follow live. Closing a connection sends no signal.
//
//	POST   /sessions                 SessionRequest → 201 Session
//	GET    /sessions                 → 200 SessionList
//	GET    /sessions/ID              → 200 Session
//	GET    /sessions/ID/output?from=N[&follow=1]
//	                                 → 200 NDJSON of SessionEvent; 410
//	                                   OutputEvicted when N is no longer held
//	POST   /sessions/ID/kill         KillRequest → 200 Session, once the
//	                                   session's process group is gone
//	GET    /sessions/ID/wait?timeoutMs=N
//	                                 → 200 Session, when it has exited or
//	                                   the timeout passed (State says which)
//	DELETE /sessions/ID              → 204, forgets an exited session (409
//	                                   while it runs)
const RouteSessions = "/sessions"

// Error codes of the session routes.
const (
	CodeUnknownSession     = "unknown_session"
	CodeSessionExists      = "session_exists"
	CodeSessionRunning     = "session_running"
	CodeTooManySessions    = "too_many_sessions"
	CodeOutputEvicted      = "output_evicted"
	CodeInvalidOffset      = "invalid_offset"
	CodeInvalidSignal      = "invalid_signal"
	CodeKillUnconfirmed    = "kill_unconfirmed"
	CodeInvalidRetainBytes = "invalid_retain_bytes"
	CodeInvalidSessionID   = "invalid_session_id"
	CodeNotATerminal       = "not_a_terminal"
	CodeInvalidSize        = "invalid_size"
)

// Retained output bounds of a session (bytes).
const (
	DefaultRetainBytes = 1 << 20
	MinRetainBytes     = 4 << 10
	MaxRetainBytes     = 64 << 20
)

// SessionRequest starts a session. Command, Args, Cwd and Env are as in
// /execute; ID, when given, names the session (the execution id's
// alphabet and length), else the agent picks one.
type SessionRequest struct {
	ID          string            `json:"id,omitempty"`
	Command     string            `json:"command"`
	Args        []string          `json:"args,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	RetainBytes int64             `json:"retainBytes,omitempty"`
	// TTY runs the program on a terminal of its own (feature "terminals"):
	// its controlling terminal, standard input, output and error, all of
	// its output on the stdout stream, sized Rows by Cols (24 by 80 when
	// zero, at most MaxTermSize each). Input goes to POST
	// /sessions/ID/input, sizes to POST /sessions/ID/resize. TERM is the
	// environment's (xterm-256color unless Env sets it).
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Stdin gives a session without a terminal a standard input of its
	// own, a pipe (feature "session-stdin"), written through POST
	// /sessions/ID/input and closed with ?end=1 there; without it the
	// program reads /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TimeoutMs, from 1 to MaxSessionTimeoutMs, ends the session's process
	// group that long after its start, as a timeout ends a command's
	// (TERM, then KILL after the agent's grace), and marks it TimedOut
	// (feature "session-timeout"). Without it a session runs until it
	// exits or is killed.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// MaxSessionTimeoutMs bounds a session's timeout: 30 days.
const MaxSessionTimeoutMs = 30 * 24 * 3600 * 1000

// MaxTermSize bounds a terminal's rows and columns.
const MaxTermSize = 4096

// ResizeRequest sets a terminal session's size.
type ResizeRequest struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Session input: POST /sessions/ID/input with the bytes as a raw body (at
// most MaxInputBytes; a Content-Length is required) writes them to the
// terminal, as typed ("\x03" is Ctrl-C, reaching the foreground job as
// SIGINT), or to a Stdin session's standard input, which ?end=1 then
// closes (the program reads its end). It answers {ok, bytesWritten} once
// they are written.
const MaxInputBytes = 1 << 20

// CodeNoStdin: input for a session that has neither a terminal nor a
// standard input of its own.
const CodeNoStdin = "no_stdin"

// Session states.
const (
	SessionRunning = "running"
	SessionExited  = "exited"
)

// Session is a session as the agent reports it.
type Session struct {
	ID      string   `json:"id"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Pid is the session's leader, in the sandbox's PID namespace; it
	// leads a process group of the same number.
	Pid   int    `json:"pid"`
	State string `json:"state"`
	// ExitCode and Signal, once exited: the leader's status (-1 and the
	// signal's name when a signal ended it).
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// StartedAt and EndedAt are Unix milliseconds.
	StartedAt int64 `json:"startedAt"`
	EndedAt   int64 `json:"endedAt,omitempty"`
	// OutputFirst is the first byte offset still held; OutputNext the one
	// the next byte will take (every byte written so far is below it).
	// TTY: the session runs on a terminal. Stdin: it has a standard
	// input of its own, still open.
	TTY         bool  `json:"tty,omitempty"`
	Stdin       bool  `json:"stdin,omitempty"`
	OutputFirst int64 `json:"outputFirst"`
	OutputNext  int64 `json:"outputNext"`
	RetainBytes int64 `json:"retainBytes"`
	// TimeoutMs is the session's timeout, if it was given one; TimedOut
	// says the timeout ended it (its exit is the signal that did).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	TimedOut  bool  `json:"timedOut,omitempty"`
}

// SessionList is GET /sessions's answer.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// KillRequest asks for a signal (a name: TERM, KILL, INT, HUP, QUIT, USR1,
// USR2; default TERM) to the session's process group, then, when the group
// has not gone within GraceMs (default 5000, at most 60000), KILL.
type KillRequest struct {
	Signal  string `json:"signal,omitempty"`
	GraceMs int64  `json:"graceMs,omitempty"`
}

// Session output event types.
const (
	// SessionOutput carries bytes of one stream (Data, base64) at Offset.
	SessionOutput = "output"
	// SessionEnd closes a stream at Offset: Done says the session's
	// output has ended there (it exited and its pipes closed); else
	// nothing more was held (without follow).
	SessionEnd = "end"
	// SessionHeartbeat is sent on a followed stream while nothing comes.
	SessionHeartbeat = "heartbeat"
)

// SessionEvent is one line of a session's output stream.
type SessionEvent struct {
	Type   string `json:"type"`
	Stream string `json:"stream,omitempty"`
	Offset int64  `json:"offset"`
	Data   string `json:"data,omitempty"`
	Done   bool   `json:"done,omitempty"`
	// Result, on a retained execution's end once it has settled, is how
	// it ended.
	Result *Result `json:"result,omitempty"`
}

// RouteExecutionOutput, with the execution's id between, reads a retained
// execution's output: GET /executions/ID/output?from=N[&follow=1], as
// /sessions/ID/output does (feature "retained-output").
const RouteExecutions = "/executions/"

// OutputEvicted is the 410 answer to a read before the first byte held.
type OutputEvicted struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	First   int64  `json:"first"`
}

// ValidSessionID: 1 to 128 characters of A-Z a-z 0-9 _ . : - (a name a
// caller chose, or the agent's "sess_" and 16 hex digits).
func ValidSessionID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}
