// Package api holds the types of cordon's REST API (/v1), shared by the
// daemon (package server) and its Go client (package server/client). The
// OpenAPI document server/openapi.yaml describes the same shapes.
package api

import (
	"fmt"
	"math"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/seeds"
)

// Sandbox states.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StatePaused   = "paused"
	// StateSuspended: everything the sandbox ran is stopped and its
	// compute given back; its persistent workspace is kept until it
	// resumes.
	StateSuspended  = "suspended"
	StateDestroying = "destroying" // teardown started, not yet confirmed
	StateDestroyed  = "destroyed"
	// StateLost: the sandbox's agent exited on its own (killed, out of
	// memory, crashed); it can run nothing, and a delete removes what is
	// left of it.
	StateLost = "lost"
)

// Limits are a sandbox's resource limits; zero means none.
type Limits struct {
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	// DiskBytes bounds the writable space (default: half the memory
	// limit, where there is one, else the daemon's default).
	DiskBytes int64 `json:"diskBytes,omitempty"`
}

// Layout names host directories bound at /mnt/user-data/NAME. The daemon
// accepts only directories under its configured host-path roots.
type Layout struct {
	Outputs     string `json:"outputs,omitempty"`
	Uploads     string `json:"uploads,omitempty"`
	Scratch     string `json:"scratch,omitempty"`
	ToolResults string `json:"toolResults,omitempty"`
	Transcripts string `json:"transcripts,omitempty"`
	Skills      string `json:"skills,omitempty"`
	// Owner is the host user and group the sandbox writes the read-write
	// directories as; absent means each directory's owner (root refused).
	Owner *Owner `json:"owner,omitempty"`
}

// Owner is a host user and group.
type Owner struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Egress is a network policy: mode deny-all (the default), allow-all or
// static with rules; profile names a profile configured on the daemon,
// whose rules join the given ones.
type Egress struct {
	Mode    string        `json:"mode,omitempty"`
	Rules   []egress.Rule `json:"rules,omitempty"`
	Profile string        `json:"profile,omitempty"`
}

// Spec is what shapes a sandbox when it starts: two creates with equal
// specs get interchangeable sandboxes, which is what lets a warm pool serve
// a create.
type Spec struct {
	Tier         string            `json:"tier,omitempty"`
	Image        string            `json:"image,omitempty"`
	RootFS       string            `json:"rootfs,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Limits       Limits            `json:"limits,omitzero"`
	Layout       Layout            `json:"layout,omitzero"`
	Egress       *Egress           `json:"egress,omitempty"`
	User         *int              `json:"user,omitempty"`
	MaxTimeoutMs int64             `json:"maxTimeoutMs,omitempty"`
	// RuntimeClass names the cluster's RuntimeClass for the sandbox's pod
	// (the kubernetes tier; others refuse it).
	RuntimeClass string `json:"runtimeClass,omitempty"`
	// PersistentWorkspace keeps the sandbox's writable space on storage
	// of its own, so that it can be suspended (stopped) and resumed
	// (started) on it, across daemon restarts and host reboots: a disk
	// image of limits.diskBytes (the daemon's default without one) on the
	// process, container and gvisor tiers, a claim on the kubernetes tier.
	PersistentWorkspace bool `json:"persistentWorkspace,omitempty"`
	// Autostart starts a persistent sandbox again when the daemon starts
	// and finds it stopped though it was running (its host rebooted, its
	// processes killed); without it, such a sandbox is left suspended.
	// A sandbox suspended on purpose stays suspended either way.
	Autostart bool `json:"autostart,omitempty"`
}

// UpdateRequest is the body of PATCH /v1/sandboxes/{id}: each field given
// replaces the sandbox's, as a create would set it, counted from now (a
// TTL extended or cut, E2B's setTimeout).
type UpdateRequest struct {
	TTLSeconds         *int64 `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds *int64 `json:"idleTimeoutSeconds,omitempty"`
}

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Spec
	// TTLSeconds is a hard limit on the sandbox's life; zero means the
	// daemon's default.
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
	// IdleTimeoutSeconds reaps the sandbox after this long without
	// activity inside it (running commands, requests, egress traffic);
	// zero means the daemon's default, negative means never.
	IdleTimeoutSeconds int64             `json:"idleTimeoutSeconds,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	// Pool names a warm pool to claim from; a create whose spec equals a
	// pool's claims from it without naming it.
	Pool string `json:"pool,omitempty"`
	// FromSnapshot restores a snapshot into the new sandbox (its spec is
	// the snapshot's unless the request gives one).
	FromSnapshot string `json:"fromSnapshot,omitempty"`
	// Template makes the sandbox from a saved template (its spec unless
	// the request gives one).
	Template string `json:"template,omitempty"`
}

// Sandbox describes one sandbox.
type Sandbox struct {
	ID           string            `json:"id"`
	Tenant       string            `json:"tenant,omitempty"`
	State        string            `json:"state"`
	Spec         Spec              `json:"spec"`
	Labels       map[string]string `json:"labels,omitempty"`
	Pool         string            `json:"pool,omitempty"`
	CreatedAt    time.Time         `json:"createdAt"`
	ExpiresAt    *time.Time        `json:"expiresAt,omitempty"`
	IdleTimeout  int64             `json:"idleTimeoutSeconds,omitempty"`
	LastActivity time.Time         `json:"lastActivity"`
	Features     []string          `json:"features,omitempty"`
	Pausable     bool              `json:"pausable"`
	// BootID is the running agent's boot identity: a new one each time
	// the sandbox starts (a suspended sandbox resumed, a new instance).
	BootID string `json:"bootId,omitempty"`
	// Reason says why a destroyed sandbox ended: deleted, ttl, idle,
	// lost (its agent stopped answering) or restart.
	Reason string `json:"reason,omitempty"`
}

// Metrics is the body of GET /v1/sandboxes/ID/metrics: what a running
// sandbox uses at one moment, against its limits. A count its tier does
// not keep is absent.
type Metrics struct {
	Timestamp time.Time `json:"timestamp"`
	// CPUSeconds is the CPU time its commands have used since it started.
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUUsedPct is their use of CPUCount cores since the previous read of
	// its metrics (at least 100 ms before; else since it was created), in
	// percent.
	CPUUsedPct float64 `json:"cpuUsedPct"`
	// CPUCount is the cores it may use: its CPU limit, or the CPUs it may
	// run on (a virtual machine's, a cpuset's) where they are fewer.
	CPUCount float64 `json:"cpuCount"`
	// MemoryBytes is what it holds now, less file cache the kernel can
	// reclaim; MemoryLimitBytes its memory limit (absent: none).
	MemoryBytes      *int64 `json:"memoryBytes,omitempty"`
	MemoryLimitBytes int64  `json:"memoryLimitBytes,omitempty"`
	// DiskUsedBytes and DiskTotalBytes are its writable space's (the
	// workspace's file system).
	DiskUsedBytes  int64 `json:"diskUsedBytes"`
	DiskTotalBytes int64 `json:"diskTotalBytes"`
	// Tasks counts its commands' processes and threads; TasksLimit is its
	// pids limit (absent: none).
	Tasks      int64 `json:"tasks"`
	TasksLimit int64 `json:"tasksLimit,omitempty"`
	// OOMKills counts the processes killed for memory in it so far.
	OOMKills *int64 `json:"oomKills,omitempty"`
}

// FileURLRequest is the body of POST /v1/sandboxes/ID/file-urls.
type FileURLRequest struct {
	// Path is the file's, as the file routes take it.
	Path string `json:"path"`
	// Method is GET (read it; the default) or PUT (write it).
	Method string `json:"method,omitempty"`
	// ExpiresInSeconds is how long the URL works: 1 to 86400 (0: 3600).
	ExpiresInSeconds int `json:"expiresInSeconds,omitempty"`
}

// FileURL is a URL of the daemon that reads or writes one file of a
// sandbox without an API key, until ExpiresAt.
type FileURL struct {
	URL       string    `json:"url"`
	Method    string    `json:"method"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// UploadedFile is one file a POST /v1/sandboxes/ID/files wrote (its answer
// is a list of them, as E2B's envd answers an upload).
type UploadedFile struct {
	// Path is where the file is inside the sandbox; Name its last element.
	Path string `json:"path"`
	Name string `json:"name"`
	// Type is always "file".
	Type string `json:"type"`
	// Size is the bytes written.
	Size int64 `json:"size"`
}

// MetricsHistory is the body of GET /v1/sandboxes/ID/metrics/history: the
// daemon's readings of a sandbox's metrics in a window, oldest first,
// taken every IntervalMs while it ran (absent: the daemon keeps none).
// Each one's CPUUsedPct is since the reading before it.
type MetricsHistory struct {
	IntervalMs int64     `json:"intervalMs,omitempty"`
	Metrics    []Metrics `json:"metrics"`
}

// CPUUsedPct is the use, in percent to two places, of cores by cpu time
// over wall time: Metrics.CPUUsedPct, between two reads of the metrics.
func CPUUsedPct(cpu, wall time.Duration, cores float64) float64 {
	if wall <= 0 || cpu <= 0 || cores <= 0 {
		return 0
	}
	return math.Round(min(100, 100*cpu.Seconds()/(wall.Seconds()*cores))*100) / 100
}

// List is the body of GET /v1/sandboxes.
type List struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// Key is an API key's record; Secret is set only in the answer to its
// creation and is never stored.
type Key struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Admin     bool      `json:"admin,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	Secret    string    `json:"secret,omitempty"`
}

// KeyRequest is the body of POST /v1/keys.
type KeyRequest struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name,omitempty"`
	Admin  bool   `json:"admin,omitempty"`
}

// Pool is a warm pool: Size ready sandboxes of Spec.
type Pool struct {
	Name  string `json:"name"`
	Spec  Spec   `json:"spec"`
	Size  int    `json:"size"`
	Ready int    `json:"ready"`
	// Template, with its Tenant, keeps sandboxes made from that tenant's
	// template ready (its snapshot restored, its seed present, its start
	// program running) for that tenant's creates that name it; the spec
	// is the template's.
	Template string `json:"template,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
}

// Event is one lifecycle event of GET /v1/events.
type Event struct {
	Seq     uint64         `json:"seq"`
	Type    string         `json:"type"`
	Sandbox string         `json:"sandbox,omitempty"`
	Tenant  string         `json:"tenant,omitempty"`
	Time    time.Time      `json:"time"`
	Data    map[string]any `json:"data,omitempty"`
}

// Event types.
const (
	EventCreated       = "created"
	EventReady         = "ready"
	EventExecStarted   = "exec.started"
	EventExecFinished  = "exec.finished"
	EventOOM           = "oom"
	EventPolicyChanged = "policy.changed"
	EventEgressRefused = "egress.refused"
	EventPaused        = "paused"
	EventResumed       = "resumed"
	EventSuspended     = "suspended"
	EventReaped        = "reaped"
	EventDestroyed     = "destroyed"
	EventLost          = "lost"
	EventSeeded        = "seeded"
	EventSnapshot      = "snapshot"
	EventUpdated       = "updated"
)

// Error is every refusal's body: a stable code and a sentence.
type Error struct {
	Code    string `json:"error"`
	Message string `json:"message"`
	// Status is the HTTP status (filled in by the client).
	Status int `json:"-"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message) }

// Error codes.
const (
	CodeUnauthorized   = "unauthorized"
	CodeForbidden      = "forbidden"
	CodeNotFound       = "not_found"
	CodeInvalid        = "invalid_request"
	CodeTooLarge       = "too_large"
	CodeLengthRequired = "length_required"
	CodeUnsupported    = "unsupported"
	CodeUnavailable    = "unavailable"
	CodeQuota          = "quota_exceeded"
	CodeConflict       = "conflict"
	CodePaused         = "paused"
	CodeSuspended      = "suspended"
	CodeAgent          = "agent_error"
	CodeDeadline       = "deadline"
	CodeLost           = "lost"
	CodeMethod         = "method_not_allowed"
	CodeRegistry       = "registry_unreachable"
	CodeTeardown       = "teardown_failed"
	CodeShuttingDown   = "shutting_down"
	CodeInternal       = "internal"
	// CodeFileError: the agent refused a file operation (the message says
	// why: outside the roots, not a regular file, ...).
	CodeFileError = "file_error"
	CodeRange     = "range_not_satisfiable"
	// CodeNoSpace: the sandbox's writable space is full (507).
	CodeNoSpace = "no_space"
)

// ExecutionHeader carries an exec stream's execution id, for cancel.
const ExecutionHeader = "Cordon-Execution-Id"

// PortRequest exposes a port of the sandbox's own loopback at a URL of the
// daemon (POST /v1/sandboxes/{id}/ports).
type PortRequest struct {
	Port int `json:"port"`
}

// Port is an exposed port: URL (a path on the daemon, /v1/ports/TOKEN/)
// reaches it over HTTP or WebSocket with the token in the URL as the only
// credential, for as long as the sandbox lives or until it is revoked.
type Port struct {
	Port int `json:"port"`
	// URL is its path on the daemon, /v1/ports/TOKEN/, which every client
	// reaches; a browser is sent on from there to OriginURL.
	URL string `json:"url"`
	// OriginURL is the port's URL on an origin of its own, where the
	// daemon has a ports URL: http://pt-….localhost:PORT/ on a loopback
	// listener, whose name a browser resolves and many programs do not.
	OriginURL string `json:"originUrl,omitempty"`
	Token     string `json:"token"`
}

// PortList is GET /v1/sandboxes/{id}/ports's answer.
type PortList struct {
	Ports []Port `json:"ports"`
}

// MaxPorts bounds the ports one sandbox exposes.
const MaxPorts = 16

// SeedRequest is the body of POST /v1/sandboxes/{id}/seed: a seed's
// repositories made present under Root (relative paths are the
// workspace's).
type SeedRequest struct {
	seeds.Seed
	Root string `json:"root"`
}

// SeedResult is what a seed found or did, a repository each.
type SeedResult struct {
	Repositories []seeds.Outcome `json:"repositories"`
}

// SeedDrift is the 409 refusal of a seed whose repositories drifted.
type SeedDrift struct {
	Code    string        `json:"error"`
	Message string        `json:"message"`
	Drift   []seeds.Drift `json:"drift"`
}

// Codes of a seed's refusals.
const (
	CodeSeedDrift  = "seed_drift"
	CodeSeedFailed = "seed_failed"
	// CodeSnapshotFailed: a capture or a restore did not complete.
	CodeSnapshotFailed = "snapshot_failed"
	// CodeTemplateFailed: a template's seed or start did not complete in
	// a new sandbox (which was destroyed).
	CodeTemplateFailed = "template_failed"
)

// Snapshot is a sandbox's writable state (its workspace and its user's
// home) captured as a compressed tar in the daemon's store. Running
// processes are not captured.
type Snapshot struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
	// Source is the sandbox it was taken from.
	Source string `json:"source"`
	Spec   Spec   `json:"spec"`
	// Paths are the directories captured, as the sandbox saw them.
	Paths []string `json:"paths"`
	// Digest is the sha256 of the artifact (a gzip-compressed tar); equal
	// states share one artifact.
	Digest    string     `json:"digest"`
	Size      int64      `json:"size"`
	Files     int        `json:"files"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshot.
type SnapshotRequest struct {
	// TTLSeconds bounds the snapshot's life (zero: the daemon's default,
	// none unless configured).
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

// SnapshotList is GET /v1/snapshots's answer.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	Count int `json:"count"`
	// TTLSeconds, IdleTimeoutSeconds and Labels are the forks' (as a
	// create's).
	TTLSeconds         int64             `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds int64             `json:"idleTimeoutSeconds,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
}

// ForkResult lists the forks.
type ForkResult struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// MaxForks bounds one fork request.
const MaxForks = 32

// Template is a named recipe for sandboxes: a spec, and optionally a
// snapshot's state, a seed's repositories and a program to start, each
// applied to every sandbox created from it (POST /v1/sandboxes with
// template).
type Template struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	Spec   Spec   `json:"spec"`
	// FromSnapshot, when the template is saved, is the snapshot whose
	// state it keeps (as a snapshot of its own, Snapshot).
	FromSnapshot string `json:"fromSnapshot,omitempty"`
	Snapshot     string `json:"snapshot,omitempty"`
	// Seed's repositories are made present in each new sandbox.
	Seed *SeedRequest `json:"seed,omitempty"`
	// Start is run (sh -c) as a session of each new sandbox.
	Start     string    `json:"start,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// TemplateList is GET /v1/templates's answer.
type TemplateList struct {
	Templates []Template `json:"templates"`
}
