// Package wire holds the request, response and event shapes of the agent
// wire, protocol version 2: the HTTP/1.1 + NDJSON protocol that cordon-agent
// speaks inside every sandbox and that agent/client speaks from the host.
//
// The shapes are exactly those of the reference worker (docs/protocol.md);
// cordon's additions are optional fields or new routes, each announced in the
// Features list of GET /healthz.
package wire

import (
	"strings"
	"time"
)

// ProtocolVersion is the one version this release speaks. A host admits only
// an agent that reports exactly this number.
const ProtocolVersion = 2

// LeaseHeader on POST /executions/reserve, with the value LeaseSpare, marks
// the reservation as a host's spare (feature "spare-leases"): taken ahead of
// a command that may never come, it yields its slot when the agent is at
// MAX_TRACKED_EXECUTIONS, after the terminal records and before refusing
// another reservation. Its holder learns that at /execute
// (404 unknown_execution) and reserves again.
//
// On POST /execute, LeaseHeader with the value LeaseNext asks for the next
// spare with the answer (feature "next-lease"): an agent that admits the
// command reserves a spare and names it in NextLeaseHeader of its 200 answer
// as "<executionId> <leaseExpiresAt>" (Unix milliseconds), so that a host
// running commands one after another never spends a round trip on a
// reservation. An agent at capacity sends none.
const (
	LeaseHeader     = "Cordon-Lease"
	LeaseSpare      = "spare"
	LeaseNext       = "next"
	NextLeaseHeader = "Cordon-Next-Lease"
)

// BootIDHeader carries the agent's boot id (Health.BootID) on every answer
// to an authenticated request and at the head of every stream (feature
// "boot-id-header"): a host that sees it change is talking to a restarted
// agent, whatever it held before is gone.
const BootIDHeader = "Cordon-Boot-Id"

// HeartbeatHeader on /execute asks for a {"type":"heartbeat"} line every
// that many milliseconds (1000 to 60000) while the stream is otherwise
// silent (feature "stream-heartbeat"); an agent that honours it answers
// with the same header and value, so the host may judge a stream silent
// for several intervals stalled.
const HeartbeatHeader = "Cordon-Heartbeat"

// EventHeartbeat is the heartbeat line of an /execute stream.
const EventHeartbeat = "heartbeat"

// Routes of the agent wire. Matching is on the whole request URI: a query
// string or a trailing slash is a different (missing) route.
const (
	RouteHealthz    = "/healthz"
	RouteExecute    = "/execute"
	RouteReserve    = "/executions/reserve"
	RouteCancel     = "/cancel"
	RouteStdioWrite = "/executions/write"
	RouteReadFile   = "/read-file"
	RouteWriteFile  = "/write-file"
	// RouteFiles is cordon's raw file route (feature "raw-files"): GET and
	// PUT /files?path=P, bodies as raw bytes.
	RouteFiles = "/files"
	// The file-system routes (feature "fs-ops"), each taking ?path=P:
	// GET /fs/stat, GET /fs/list, POST /fs/mkdir, POST /fs/remove
	// (&recursive=1 removes a directory and what it holds).
	RouteStat   = "/fs/stat"
	RouteList   = "/fs/list"
	RouteMkdir  = "/fs/mkdir"
	RouteRemove = "/fs/remove"
	// RouteRename (feature "fs-rename"): POST /fs/rename?path=P&to=Q moves
	// P to Q, replacing what Q names as rename(2) does, and answers Q's
	// FileInfo.
	RouteRename = "/fs/rename"
	// RouteUsage (feature "usage"): GET /usage answers Usage, what the
	// sandbox's commands use now as the agent counts it.
	RouteUsage = "/usage"
)

// Usage is the agent's count of what the sandbox's commands use: every
// process in the sandbox but the agent itself.
type Usage struct {
	// CPUNanos is the CPU time they have used since the sandbox started,
	// the processes that ended included, to the kernel's clock tick.
	CPUNanos int64 `json:"cpuNanos"`
	// Tasks counts their processes and threads now.
	Tasks int64 `json:"tasks"`
	// CPUs is how many CPUs the sandbox's processes may run on (their
	// affinity: a virtual machine's own, a cpuset's).
	CPUs int64 `json:"cpus,omitempty"`
	// DiskUsedBytes and DiskTotalBytes are the workspace's file system's
	// (the writable space): what is in use and its size.
	DiskUsedBytes  int64 `json:"diskUsedBytes"`
	DiskTotalBytes int64 `json:"diskTotalBytes"`
	// MemoryBytes is the memory the sandbox holds now, where the agent
	// counts it (a pod's memory cgroup, a virtual machine's kernel): what
	// is used, less file cache the kernel can reclaim. 0 where it does
	// not (the host counts it).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// OOMKills, where the agent counts memory, is the processes killed
	// for memory in the sandbox so far.
	OOMKills int64 `json:"oomKills,omitempty"`
}

// Error codes carried in the "error" field of a JSON error body.
const (
	CodeUnauthorized             = "unauthorized"
	CodeWorkerRetiring           = "worker_retiring"
	CodeNotFound                 = "not_found"
	CodeInternal                 = "internal"
	CodeInvalidBody              = "invalid_body"
	CodeMissingCommand           = "missing_command"
	CodeInvalidStdio             = "invalid_stdio"
	CodeStdioRequiresReserved    = "stdio_requires_reserved_strict_execution"
	CodeInvalidNormalExitPolicy  = "invalid_normal_exit_policy"
	CodeComputerLifetimeDisabled = "computer_lifetime_not_enabled"
	CodeInvalidExecutionID       = "invalid_execution_id"
	CodeInvalidCwd               = "invalid_cwd"
	CodeInvalidTimeout           = "invalid_timeout"
	CodeUnknownExecution         = "unknown_execution"
	CodeExecutionNotReserved     = "execution_not_reserved"
	CodeMkdirFailed              = "mkdir_failed"
	CodeExecutionCancelled       = "execution_cancelled"
	CodeSpawnFailed              = "spawn_failed"
	CodeExecutionCapacity        = "execution_capacity"
	CodeCancellationUnconfirmed  = "cancellation_unconfirmed"
	CodeInvalidStdioWrite        = "invalid_stdio_write"
	CodeInvalidStdioBytes        = "invalid_stdio_bytes"
	CodeStdioNotRunning          = "stdio_not_running"
	CodeStdioDeliveryUnknown     = "stdio_delivery_unknown"
	CodeMissingPath              = "missing_path"
	CodeMissingPathOrContent     = "missing_path_or_content"
)

// Normal-exit policies of an execution.
const (
	PolicyStrict           = "strict"
	PolicyComputerLifetime = "computer-lifetime"
)

// Execution outcomes, as reported in a terminal payload's State.
const (
	OutcomeCompleted = "completed"
	OutcomeCancelled = "cancelled"
	OutcomeFailed    = "failed"
)

// NDJSON event types on an /execute stream.
const (
	EventStdout         = "stdout_delta"
	EventStderr         = "stderr_delta"
	EventResult         = "result"
	EventError          = "error"
	EventStdioStarted   = "stdio_started"
	EventStdioData      = "stdio_data"
	EventStdioHeartbeat = "stdio_heartbeat"
)

// FileRangeMaxBytes is the largest slice one ranged read may ask for.
const FileRangeMaxBytes = 32 << 20

// StdioWriteMaxChars bounds the base64 text of one /executions/write call.
const StdioWriteMaxChars = 2 << 20

// EgressPass opens a connection to the host's egress proxy that hands over
// a connection instead of carrying its bytes: on a tier that shares the
// host's kernel the agent's egress bridge writes this one byte with the
// TCP connection it accepted attached (SCM_RIGHTS), and the proxy serves
// that connection itself, the agent no longer on its path. Any other first
// byte begins the proxied request, as the bridge of every tier may send.
const EgressPass byte = 0

// ErrorBody is every JSON error answer: a snake_case code and, where useful,
// a sentence saying what went wrong.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
	// State accompanies execution_not_reserved and execution_cancelled.
	State string `json:"state,omitempty"`
}

// Health is the body of GET /healthz.
type Health struct {
	OK              bool `json:"ok"`
	ProtocolVersion int  `json:"protocolVersion"`
	// Features names cordon's additive capabilities. The reference worker
	// sends none; a host uses an addition only when it sees its name here.
	Features []string `json:"features,omitempty"`
	// BootID (feature "activity") is random per agent start: a host that
	// recorded it can tell a restarted agent from the one it admitted. It
	// and Activity are sent only to an authenticated caller.
	BootID string `json:"bootId,omitempty"`
	// Activity (feature "activity") says what the agent is doing, so a
	// host can tell a long build from an idle sandbox.
	Activity *Activity `json:"activity,omitempty"`
}

// ReadyRecord is what cordon-agent hands its host on a readiness
// descriptor once it listens (the process tier's pipe): what GET /healthz
// would answer the host, and a spare reservation (see LeaseSpare) for the
// host's first command. A host admits the agent from it without a round
// trip; it is at most MaxReadyRecordBytes of JSON.
type ReadyRecord struct {
	Health Health       `json:"health"`
	Spare  *Reservation `json:"spare,omitempty"`
	// CommandThread is the id, in the agent's PID namespace, of the thread
	// every command is forked from, when the agent has one (the process
	// tier holds that thread's pids apart from the agent's own).
	CommandThread int `json:"commandThread,omitempty"`
}

// MaxReadyRecordBytes bounds a ReadyRecord as a host reads it.
const MaxReadyRecordBytes = 64 << 10

// ValidExecutionID reports whether id has the shape of an execution id:
// "exec_" and 36 characters of lower-case hex and dashes (a UUID's shape,
// as the reference checks it).
func ValidExecutionID(id string) bool {
	rest, ok := strings.CutPrefix(id, "exec_")
	if !ok || len(rest) != 36 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}

// Activity is the agent's own account of its work.
type Activity struct {
	// Running counts executions that have started and not settled,
	// including detached ones (computer lifetime).
	Running int `json:"running"`
	// Requests counts requests in progress, this one excluded.
	Requests int `json:"requests"`
	// IdleMs is how long nothing has run and no request was in progress;
	// zero while something is.
	IdleMs int64 `json:"idleMs"`
}

// ExecuteRequest is the body of POST /execute.
type ExecuteRequest struct {
	ExecutionID string            `json:"executionId,omitempty"`
	Command     string            `json:"command"`
	Args        []string          `json:"args,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Stdin       *string           `json:"stdin,omitempty"`
	// StdinEncoding Base64 (feature "stdin-base64") says Stdin is
	// base64: a JSON string holds only UTF-8, and other bytes would reach
	// the command as U+FFFD.
	StdinEncoding string `json:"stdinEncoding,omitempty"`
	// OutputEncoding Base64 (feature "output-base64") asks for the data of
	// stdout_delta and stderr_delta events as base64 of the exact bytes
	// the command wrote; as text, bytes that are not UTF-8 arrive as
	// U+FFFD.
	OutputEncoding   string `json:"outputEncoding,omitempty"`
	TimeoutMs        int64  `json:"timeoutMs,omitempty"`
	MaxOutputBytes   int64  `json:"maxOutputBytes,omitempty"`
	Stdio            bool   `json:"stdio,omitempty"`
	NormalExitPolicy string `json:"normalExitPolicy,omitempty"`
	// RetainOutput (feature "retained-output"), with an ExecutionID, keeps
	// the command's output in the agent as a session's is kept (that many
	// bytes, MinRetainBytes to MaxRetainBytes; true: DefaultRetainBytes)
	// for GET /executions/ID/output to read from any offset and follow,
	// from any connection, until the execution's record expires.
	RetainOutput any `json:"retainOutput,omitempty"`
}

// Base64 is the one value of ExecuteRequest.StdinEncoding and
// OutputEncoding.
const Base64 = "base64"

// Event is one NDJSON line of an /execute stream. Which fields are set
// depends on Type.
type Event struct {
	Type string `json:"type"`
	// stdout_delta, stderr_delta: text; stdio_data: base64 bytes.
	Data string `json:"data,omitempty"`
	// stdio_data: "stdout" or "stderr".
	Stream string `json:"stream,omitempty"`
	// stdio_started, stdio_heartbeat.
	Version int `json:"version,omitempty"`
	// error: what went wrong before or while spawning.
	Error string `json:"error,omitempty"`
	// result: embedded so that the line is flat, as on the wire.
	*Result
}

// Result is how an execution ended.
type Result struct {
	ExitCode        int    `json:"exitCode"`
	TimedOut        bool   `json:"timedOut"`
	DurationMs      int64  `json:"durationMs"`
	Signal          string `json:"signal,omitempty"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	StderrTruncated bool   `json:"stderrTruncated"`
	// OOMKills counts the sandbox's processes the kernel killed for memory
	// while the command ran (its children included, which the command
	// may outlive): the host adds it from the sandbox's memory accounting;
	// the agent leaves it out unless told to count them itself
	// (CORDON_AGENT_COUNT_OOM=1, where the host cannot read that
	// accounting). (Commands running at the same time in one sandbox each
	// count all of them.)
	OOMKills int64 `json:"oomKills,omitempty"`
	// LeftoversStopped: the command's leader exited and the agent stopped
	// what it left running (feature "leader-exit"): members of its process
	// group, and processes still holding its output once the output had
	// drained for LeaderDrain. Programs meant to outlive a command are
	// started as sessions.
	LeftoversStopped bool `json:"leftoversStopped,omitempty"`
}

// LeaderDrain is how long, once a strict command's leader has exited, the
// agent still reads output that what it left running holds open, before it
// stops those processes and reports the leader's status.
const LeaderDrain = 250 * time.Millisecond

// StdioInfo describes stdio mode in a reservation.
type StdioInfo struct {
	Version       int   `json:"version"`
	MaxLifetimeMs int64 `json:"maxLifetimeMs"`
}

// Reservation is the body of a 201 from POST /executions/reserve.
type Reservation struct {
	OK               bool      `json:"ok"`
	ProtocolVersion  int       `json:"protocolVersion"`
	ExecutionID      string    `json:"executionId"`
	LeaseExpiresAt   int64     `json:"leaseExpiresAt"`
	NormalExitPolicy string    `json:"normalExitPolicy"`
	Stdio            StdioInfo `json:"stdio"`
}

// CancelRequest is the body of POST /cancel.
type CancelRequest struct {
	ExecutionID string `json:"executionId"`
}

// Terminal is what POST /cancel answers once an execution's end is known.
type Terminal struct {
	OK      bool    `json:"ok"`
	State   string  `json:"state"`
	Started bool    `json:"started"`
	Result  *Result `json:"result,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// StdioWriteRequest is the body of POST /executions/write.
type StdioWriteRequest struct {
	ExecutionID string `json:"executionId"`
	Data        string `json:"data"`
	// End closes the command's standard input once Data is written
	// (feature "stdin-end"): the command reads end of file, as from a
	// closed pipe. Later writes are refused (409 stdio_not_running).
	End bool `json:"end,omitempty"`
}

// StdioWriteResponse answers a delivered /executions/write.
type StdioWriteResponse struct {
	OK           bool `json:"ok"`
	BytesWritten int  `json:"bytesWritten"`
}

// Range asks for a slice of a file. Length nil means "to the end", bounded
// by FileRangeMaxBytes.
type Range struct {
	Version int    `json:"version"`
	Offset  int64  `json:"offset"`
	Length  *int64 `json:"length"`
}

// ReadFileRequest is the body of POST /read-file.
type ReadFileRequest struct {
	Path             string `json:"path,omitempty"`
	Encoding         string `json:"encoding,omitempty"`
	Range            *Range `json:"range,omitempty"`
	CapabilitiesOnly bool   `json:"capabilitiesOnly,omitempty"`
}

// ReadFileResponse answers a successful /read-file.
type ReadFileResponse struct {
	OK        bool   `json:"ok"`
	Content   string `json:"content"`
	SizeBytes int64  `json:"sizeBytes"`
	Encoding  string `json:"encoding"`
	Range     *Range `json:"range,omitempty"`
}

// ReadCapabilities answers /read-file with capabilitiesOnly.
type ReadCapabilities struct {
	OK             bool `json:"ok"`
	ReadFileRanges struct {
		Version  int   `json:"version"`
		MaxBytes int64 `json:"maxBytes"`
	} `json:"readFileRanges"`
}

// WriteFileRequest is the body of POST /write-file.
type WriteFileRequest struct {
	Path     string  `json:"path"`
	Content  *string `json:"content"`
	Encoding string  `json:"encoding,omitempty"`
}

// WriteFileResponse answers a successful /write-file.
type WriteFileResponse struct {
	OK           bool `json:"ok"`
	BytesWritten int  `json:"bytesWritten"`
	// Path is where the file now is, inside the sandbox (PUT /files).
	Path string `json:"path,omitempty"`
}

// FileError is how /read-file and /write-file refuse: a human sentence in
// "error", not a code.
type FileError struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// FileInfo describes one file (GET /fs/stat, and each entry of /fs/list).
type FileInfo struct {
	Name string `json:"name"`
	// Path is the absolute path inside the sandbox (stat only).
	Path string `json:"path,omitempty"`
	// Type is "file", "dir", "symlink" or "other".
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission bits
	ModTime int64  `json:"mtimeMs"`
	// Target is a symlink's target (list only).
	Target string `json:"target,omitempty"`
}

// ListResponse answers GET /fs/list. Entries are sorted by name; at most
// MaxListEntries are returned and Truncated says when there were more.
type ListResponse struct {
	Path      string     `json:"path"`
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

// MaxListEntries bounds one /fs/list answer.
const MaxListEntries = 10000

// OKResponse answers /fs/mkdir and /fs/remove.
type OKResponse struct {
	OK bool `json:"ok"`
}

// explanations says what each code a refusal may carry without a message of
// its own means (the reference's bodies carry only the code; cordon's
// agent says why). An unauthenticated caller's 401 stays the reference's
// bare {"error":"unauthorized"}: it learns nothing of the agent.
var explanations = map[string]string{
	CodeWorkerRetiring:           "the agent is retiring and takes no new work",
	CodeNotFound:                 "no such route or object",
	CodeMissingCommand:           "the request names no command (a non-empty string)",
	CodeInvalidStdio:             "stdio, when given, is true",
	CodeStdioRequiresReserved:    "stdio needs a reserved executionId, no stdin and the strict normal-exit policy",
	CodeInvalidNormalExitPolicy:  "normalExitPolicy is strict or computer-lifetime",
	CodeComputerLifetimeDisabled: "this agent does not allow the computer-lifetime normal-exit policy",
	CodeInvalidExecutionID:       "the executionId is not one this agent issues (reserve one first)",
	CodeUnknownExecution:         "no execution of that id (unknown, or forgotten since)",
	CodeExecutionNotReserved:     "the execution is not reserved: it has started or ended",
	CodeExecutionCancelled:       "the execution was cancelled",
	CodeInvalidStdioWrite:        "a stdio write names the execution's executionId and its bytes",
	CodeInvalidStdioBytes:        "the stdio bytes are not valid base64",
	CodeStdioNotRunning:          "the execution is not running with its stdio open",
	CodeStdioDeliveryUnknown:     "whether the bytes reached the command is not known",
	CodeMissingPath:              "the request names no path",
	CodeMissingPathOrContent:     "the request names no path, or no content",
	CodeQuiesceInProgress:        "a quiesce is already in progress",
}

// Explain fills in e's message from its code where it has none.
func (e ErrorBody) Explain() ErrorBody {
	if e.Message == "" {
		e.Message = explanations[e.Error]
	}
	return e
}
