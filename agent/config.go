package agent

import (
	"fmt"
	"github.com/cordon-sandbox/cordon/baseline"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix marks every variable the agent reads its own configuration from
// (baseline.EnvPrefix): the agent strips them all from the environment it
// gives commands.
const EnvPrefix = baseline.EnvPrefix

// InstallArg makes cordon-agent copy itself (Install); AccountsArg write
// the sandbox's accounts (Accounts).
const (
	InstallArg  = "install"
	AccountsArg = "accounts"
)

// Config is the agent's whole configuration. FromEnv builds it from
// CORDON_AGENT_* variables; see docs/protocol.md for each one.
type Config struct {
	// Token is the per-instance bearer credential. Empty means
	// unauthenticated, which Validate allows only on loopback or a unix
	// socket, or with AllowUnauthenticated.
	Token                string
	tokenSet             bool
	AllowUnauthenticated bool
	allowRaw             string

	Bind   string // TCP bind address; ignored when Socket is set
	Port   int    // TCP port; 0 picks a free one
	Socket string // unix socket path; when set, the agent listens only there

	// EgressSocket is the host's egress proxy for this sandbox (a unix
	// socket); when set, the agent bridges EgressListen to it and points
	// commands' proxy variables there.
	EgressSocket string
	EgressListen string
	// EgressPass hands each bridged connection to the proxy itself
	// (wire.EgressPass): set by tiers that share the host's kernel, where
	// a socket can pass from the sandbox to the host.
	EgressPass bool

	Workspace  string
	ReadRoots  []string // workspace first, then extra read-only roots
	WriteRoots []string // workspace first, then extra writable roots

	MaxBodyBytes           int64
	MaxTimeout             time.Duration
	IdleTimeout            time.Duration // 0 disables the idle exit
	ExecutionLeaseTTL      time.Duration
	ExecutionTerminalTTL   time.Duration
	MaxTrackedExecutions   int
	CancelGrace            time.Duration
	CancelConfirmTimeout   time.Duration
	NormalExitPolicy       string
	DefaultTimeout         time.Duration
	DefaultMaxOutputBytes  int64
	StdioHeartbeatInterval time.Duration
	// SpareThreads is how many idle OS threads the agent keeps against a
	// sandbox whose pids limit is exhausted (see ReserveThreads).
	SpareThreads int
	// LocalGuests: the agent serves TCP in a network namespace it shares
	// with a workload apart from it (CORDON_AGENT_WORKLOAD_USER set: a
	// cluster's pod), so a peer at one of the namespace's own addresses is
	// the workload, held to a guest's share of connections.
	LocalGuests bool
	// CountOOM: the agent reports the OOM kills in its sandbox's memory
	// cgroup in each command's result (CORDON_AGENT_COUNT_OOM=1), for a
	// host that cannot read that cgroup itself. With
	// CORDON_AGENT_COUNT_OOM=kernel the count is the kernel's own
	// (/proc/vmstat): the sandbox's where the kernel is the sandbox's
	// alone (a microVM's guest).
	CountOOM   bool
	OOMKernels bool
}

// ReserveThreads is how many spare OS threads the agent makes at start
// unless told otherwise (CORDON_AGENT_SPARE_THREADS, at most
// MaxSpareThreads). Hosts ask for them only under a pids limit: without
// one, a sandbox's task ceiling (RLIMIT_NPROC) stops a fork bomb, and the
// bomb may take the agent, and so the sandbox, down with it; nor where the
// workload's pids are held apart from the agent's (the process tier on
// cgroup v1, sandboxinit.Config.CommandsApart). Each costs some 0.2 ms of
// the first command's start; an agent serving two dozen requests at once
// under a bomb that holds every pid has needed none
// (TestForkBombUnderLoad), so 16 is a margin, not a measure.
const (
	ReserveThreads  = baseline.ReserveThreads
	MaxSpareThreads = baseline.MaxSpareThreads
)

// DefaultConfig is the configuration with nothing set.
func DefaultConfig() Config {
	return Config{
		Bind:                   "0.0.0.0",
		Port:                   2024,
		Workspace:              "/workspace",
		MaxBodyBytes:           8 << 20,
		MaxTimeout:             30 * time.Minute,
		IdleTimeout:            5 * time.Minute,
		ExecutionLeaseTTL:      30 * time.Second,
		ExecutionTerminalTTL:   60 * time.Second,
		MaxTrackedExecutions:   1024,
		CancelGrace:            250 * time.Millisecond,
		CancelConfirmTimeout:   5 * time.Second,
		NormalExitPolicy:       "strict",
		DefaultTimeout:         baseline.DefaultTimeout,
		DefaultMaxOutputBytes:  100 << 20,
		StdioHeartbeatInterval: 30 * time.Second,
		SpareThreads:           ReserveThreads,
	}
}

// ConfigError is a configuration the agent refuses to start with. Its
// message names the variable and the ways out.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

func refuse(format string, args ...any) error {
	return &ConfigError{Msg: fmt.Sprintf(format, args...)}
}

// FromEnv reads the configuration from CORDON_AGENT_* variables in env
// (os.Environ's shape) and validates it.
func FromEnv(env []string) (Config, error) {
	c := DefaultConfig()
	vars := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, EnvPrefix) {
			vars[strings.TrimPrefix(k, EnvPrefix)] = v
		}
	}
	c.Token, c.tokenSet = vars["TOKEN"]
	c.allowRaw = vars["ALLOW_UNAUTHENTICATED"]
	switch strings.ToLower(c.allowRaw) {
	case "1", "true", "yes", "on":
		c.AllowUnauthenticated = true
	}
	if v, ok := vars["BIND"]; ok && v != "" {
		c.Bind = v
	}
	c.Socket = vars["SOCKET"]
	c.LocalGuests = vars["WORKLOAD_USER"] != ""
	c.CountOOM = vars["COUNT_OOM"] == "1" || vars["COUNT_OOM"] == "kernel"
	c.OOMKernels = vars["COUNT_OOM"] == "kernel"
	c.EgressSocket = vars["EGRESS_SOCKET"]
	c.EgressListen = "127.0.0.1:3128"
	c.EgressPass = vars["EGRESS_PASS"] == "1"
	if v := vars["EGRESS_LISTEN"]; v != "" {
		c.EgressListen = v
	}
	if v, ok := vars["WORKSPACE"]; ok && v != "" {
		c.Workspace = v
	}
	var err error
	num := func(name string, dst *int64) {
		v, ok := vars[name]
		if err != nil || !ok || v == "" {
			return
		}
		n, perr := strconv.ParseFloat(v, 64)
		if perr != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 || n != math.Trunc(n) || n > 1<<53 {
			err = refuse("CORDON_AGENT_%s=%q is not a whole, non-negative number. Fix it or unset it to use the default.", name, v)
			return
		}
		*dst = int64(n)
	}
	ms := func(name string, dst *time.Duration) {
		n := int64(*dst / time.Millisecond)
		num(name, &n)
		*dst = time.Duration(n) * time.Millisecond
	}
	port := int64(c.Port)
	num("PORT", &port)
	if port > 65535 {
		return c, refuse("CORDON_AGENT_PORT=%d is not a TCP port (0-65535).", port)
	}
	c.Port = int(port)
	num("MAX_BODY_BYTES", &c.MaxBodyBytes)
	ms("MAX_TIMEOUT_MS", &c.MaxTimeout)
	ms("IDLE_TIMEOUT_MS", &c.IdleTimeout)
	ms("EXECUTION_LEASE_TTL_MS", &c.ExecutionLeaseTTL)
	ms("EXECUTION_TERMINAL_TTL_MS", &c.ExecutionTerminalTTL)
	tracked := int64(c.MaxTrackedExecutions)
	num("MAX_TRACKED_EXECUTIONS", &tracked)
	c.MaxTrackedExecutions = int(tracked)
	ms("CANCEL_GRACE_MS", &c.CancelGrace)
	ms("CANCEL_CONFIRM_TIMEOUT_MS", &c.CancelConfirmTimeout)
	ms("STDIO_HEARTBEAT_MS", &c.StdioHeartbeatInterval)
	spare := int64(c.SpareThreads)
	num("SPARE_THREADS", &spare)
	c.SpareThreads = int(spare)
	if err != nil {
		return c, err
	}
	if v, ok := vars["NORMAL_EXIT_POLICY"]; ok {
		c.NormalExitPolicy = v
	}
	c.ReadRoots = normalizeRoots(append([]string{c.Workspace}, filepath.SplitList(vars["READ_ROOTS"])...))
	c.WriteRoots = normalizeRoots(append([]string{c.Workspace}, filepath.SplitList(vars["WRITE_ROOTS"])...))
	err = c.Validate()
	return c, err
}

// Validate is the start-up decision, taken before any socket exists.
func (c *Config) Validate() error {
	if c.NormalExitPolicy != "strict" && c.NormalExitPolicy != "computer-lifetime" {
		return refuse("CORDON_AGENT_NORMAL_EXIT_POLICY=%q: it must be strict or computer-lifetime, with no surrounding whitespace.", c.NormalExitPolicy)
	}
	if c.MaxTimeout <= 0 {
		return refuse("CORDON_AGENT_MAX_TIMEOUT_MS must be above zero, or every command would be refused.")
	}
	// A command that names no timeout gets the default, held to the
	// ceiling: a sandbox made for short commands runs no longer one.
	c.DefaultTimeout = min(c.DefaultTimeout, c.MaxTimeout)
	if c.MaxBodyBytes <= 0 {
		return refuse("CORDON_AGENT_MAX_BODY_BYTES must be above zero, or every request would be refused.")
	}
	if c.MaxTrackedExecutions <= 0 {
		return refuse("CORDON_AGENT_MAX_TRACKED_EXECUTIONS must be above zero, or no execution could be reserved.")
	}
	if c.SpareThreads > MaxSpareThreads {
		return refuse("CORDON_AGENT_SPARE_THREADS=%d is above %d; each is an OS thread the agent makes before its first command.", c.SpareThreads, MaxSpareThreads)
	}
	if c.tokenSet || c.Token != "" {
		if c.Token == "" || jsTrim(c.Token) != c.Token {
			return refuse("CORDON_AGENT_TOKEN is set but empty, or has whitespace around it. An empty value is what an injected secret looks like when the injection failed, and a padded one can never be presented in a (trimmed) Authorization header, so the agent would refuse every caller, its host included. Set it to a per-instance value with no surrounding whitespace, or unset it and bind to loopback or a unix socket.")
		}
		if !tokenPresentable(c.Token) {
			return refuse("CORDON_AGENT_TOKEN has a character an HTTP header cannot carry (a control character other than tab, DEL, or a code point above U+00FF), so no client could present it and the agent would refuse every caller. Mint the token from random bytes as base64url or hex.")
		}
		return nil
	}
	if c.Socket != "" || isLoopbackBind(c.Bind) || c.AllowUnauthenticated {
		return nil
	}
	if c.allowRaw != "" {
		return refuse("CORDON_AGENT_ALLOW_UNAUTHENTICATED=%q is not a recognised spelling, so it is read as off, and no CORDON_AGENT_TOKEN is set for CORDON_AGENT_BIND=%s. It turns unauthenticated serving on only as exactly 1, true, yes or on (any case, no surrounding whitespace); better, set CORDON_AGENT_TOKEN.", c.allowRaw, c.Bind)
	}
	return refuse("no CORDON_AGENT_TOKEN is set, and CORDON_AGENT_BIND=%s accepts connections from anything that can route to it, where every route but /healthz runs commands or touches files. Set CORDON_AGENT_TOKEN to a per-instance secret and present it as \"Authorization: Bearer <token>\"; or bind 127.0.0.1 or a unix socket (CORDON_AGENT_SOCKET); or set CORDON_AGENT_ALLOW_UNAUTHENTICATED=1 (exactly 1, true, yes or on) to serve without any credential on purpose.", c.Bind)
}

// isLoopbackBind recognises only addresses nothing outside this network
// namespace can reach; anything it does not recognise counts as routable.
func isLoopbackBind(bind string) bool {
	h := strings.ToLower(strings.TrimSpace(bind))
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return h == "localhost" || h == "::1" || strings.HasPrefix(h, "127.")
}

// tokenPresentable reports whether every character survives a trip in an
// HTTP header value: tab, printable ASCII, and U+0080-U+00FF (as latin-1).
func tokenPresentable(s string) bool {
	for _, r := range s {
		switch {
		case r == '\t', r >= 0x20 && r <= 0x7e, r >= 0x80 && r <= 0xff:
		default:
			return false
		}
	}
	return true
}

// jsTrim trims exactly what ECMAScript's String.prototype.trim trims, so the
// padded-token rule agrees with the reference worker's.
func jsTrim(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		switch r {
		case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
			return true
		}
		return r >= 0x2000 && r <= 0x200a
	})
}

func normalizeRoots(roots []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range roots {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		abs, err := filepath.Abs(r)
		if err != nil || seen[abs] {
			continue
		}
		seen[abs] = true
		out = append(out, abs)
	}
	return out
}

// childEnvironment is the agent's environment without its own settings: the
// base every command starts from.
func childEnvironment(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvPrefix) {
			out = append(out, kv)
		}
	}
	return out
}
