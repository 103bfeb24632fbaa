package wire

// Quiesce and flush (features "quiesce" and "flush").
//
//	POST /quiesce {graceMs?} → 200 QuiesceResponse once nothing the agent
//	    runs is left: executions in flight (they end cancelled), sessions,
//	    and every process below the agent (orphans that called setsid and
//	    were reparented to it included), stopped in rounds of TERM, grace,
//	    KILL; 500 quiesce_failed naming what survived. The agent serves on;
//	    while a quiesce runs, starting anything answers 409
//	    quiesce_in_progress.
//	POST /flush {timeoutMs?} → 200 FlushResponse once syncfs has returned
//	    on every writable root; 504 flush_unconfirmed when it has not
//	    within the timeout (the writes may still be in flight).
//
// SIGTERM does both before the agent exits, within its shutdown deadline.
const (
	RouteQuiesce = "/quiesce"
	RouteFlush   = "/flush"
)

// Quiesce bounds.
const (
	DefaultQuiesceGraceMs = 1000
	MaxQuiesceGraceMs     = 4000 // below the cancel confirmation bound
	QuiesceMaxRounds      = 8
	QuiesceDeadlineMs     = 20000
	DefaultFlushTimeoutMs = 10000
	MaxFlushTimeoutMs     = 60000
)

// Error codes of quiesce and flush.
const (
	CodeQuiesceInProgress = "quiesce_in_progress"
	CodeQuiesceFailed     = "quiesce_failed"
	CodeFlushUnconfirmed  = "flush_unconfirmed"
)

// QuiesceRequest and FlushRequest are the bodies (both optional).
type QuiesceRequest struct {
	GraceMs int64 `json:"graceMs,omitempty"`
}

type FlushRequest struct {
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// QuiesceResponse says how many rounds it took and how many processes
// were signalled.
type QuiesceResponse struct {
	OK       bool  `json:"ok"`
	Rounds   int   `json:"rounds"`
	Stopped  int   `json:"stopped"`
	Survived []int `json:"survived,omitempty"`
}

// FlushResponse lists the file systems synced, by a root on each.
type FlushResponse struct {
	OK     bool     `json:"ok"`
	Synced []string `json:"synced"`
}
