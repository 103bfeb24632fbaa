// Package runs is cordon's one-shot run API: hand over source code and get
// its result, in a fresh sandbox taken from the daemon. It serves cordon's
// own POST /v1/runs and, for hosts written against @questpie/sandbox, that
// server's POST /run with its admission headers and result shape.
package runs

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"unicode"

	"github.com/cordon-sandbox/cordon/baseline"
)

// Limits a run request is held to. The capability bounds, the body cap, the
// stderr cap and the binding RPC caps are the questpie server's, so a host
// written against it sees the same answers.
const (
	DefaultTimeoutMs = 5_000
	MinTimeoutMs     = 1
	MaxTimeoutMs     = 30_000
	DefaultMemoryMb  = 128
	MinMemoryMb      = 16
	MaxMemoryMb      = 1024

	MaxRequestBodyBytes = 2 << 20
	MaxSourceBytes      = 1 << 20
	MaxHostsPerAxis     = 32
	MaxTotalHosts       = 32
	MaxStderrBytes      = 256 << 10
	MaxRPCCount         = 256
	MaxInflightRPCs     = 16
	MaxSecrets          = 64
	MaxSecretBytes      = 64 << 10
	MaxTotalSecretBytes = 256 << 10
	MaxInputBytes       = 1 << 20
	MaxBindingsURLBytes = 2048
	MaxBindingsTokenLen = 8192
	MaxFiles            = 64
	MaxFileBytes        = 1 << 20
	MaxTotalFileBytes   = 8 << 20
	MaxStdinBytes       = 1 << 20

	// BrokerHTTPBodyCap bounds an http.fetch body each way, decoded.
	BrokerHTTPBodyCap = 5 << 20
	// brokerFrameCap bounds one framed line between guest and host: a
	// maximal http.fetch body in base64 plus room for its envelope.
	brokerFrameCap = (BrokerHTTPBodyCap+2)/3*4 + 128<<10 + 1024
	// MaxStdoutBytes bounds a run's stdout: one maximal frame each way.
	MaxStdoutBytes = 2 * brokerFrameCap
	// runtimeOverheadMb is what a sandbox's memory limit adds to the
	// requested memoryMb for the runtime itself (Deno, Python).
	runtimeOverheadMb = 128
)

// Languages a run may name.
const (
	JavaScript = "javascript"
	TypeScript = "typescript"
	Python     = "python"
	Shell      = "shell"
)

// Request is the body of POST /v1/runs.
type Request struct {
	// Language is javascript (the default), typescript, python or shell.
	Language string `json:"language,omitempty"`
	// Source is the program. In JavaScript and TypeScript it is a module
	// whose default export, a function, is called with Input; its value is
	// the result. In Python the value of a final expression is the result,
	// and Input is the global INPUT. A shell script has no result value.
	Source       string            `json:"source"`
	Input        json.RawMessage   `json:"input,omitempty"`
	Capabilities *Capabilities     `json:"capabilities,omitempty"`
	Stdin        *string           `json:"stdin,omitempty"`
	Files        []File            `json:"files,omitempty"`
	Bindings     *Bindings         `json:"bindings,omitempty"`
	Secrets      map[string]string `json:"secrets,omitempty"`
}

// Capabilities is what a run may do beyond computing.
type Capabilities struct {
	// Net lists host[:port] the code may reach directly (with bindings,
	// only through the host's http.fetch).
	Net []string `json:"net"`
	// Import lists host[:port] modules may be loaded from.
	Import    []string `json:"import"`
	TimeoutMs *int64   `json:"timeoutMs,omitempty"`
	MemoryMb  *int64   `json:"memoryMb,omitempty"`
}

// File is placed in the sandbox's workspace before the run starts.
type File struct {
	Path string `json:"path"`
	// Content is UTF-8 text, or base64 when Encoding is "base64".
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty"`
	Mode     int    `json:"mode,omitempty"`
}

// Bindings connect a run to its host's broker: the guest gets no network
// of its own; its binding calls are relayed by cordon.
type Bindings struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// Reasons a run ends without a result of its own.
const (
	ReasonTimeout   = "timeout"
	ReasonMemory    = "memory"
	ReasonOutput    = "output_limit"
	ReasonCancelled = "cancelled"
	ReasonError     = "error"    // the program failed (threw, exited non-zero)
	ReasonEgress    = "egress"   // a net or import host was refused before start
	ReasonBindings  = "bindings" // the bindings were refused or a binding call failed
	ReasonSandbox   = "sandbox"  // no sandbox could be had or it failed
)

// Result is the answer to a run.
type Result struct {
	OK       bool            `json:"ok"`
	Output   json.RawMessage `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	TimedOut bool            `json:"timedOut,omitempty"`
	Logs     []string        `json:"logs"`
	Stdout   string          `json:"stdout"`
	Stderr   string          `json:"stderr"`
	// StdoutTruncated and StderrTruncated say the output was cut at its
	// cap (which ends the run with reason output_limit).
	StdoutTruncated bool    `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool    `json:"stderrTruncated,omitempty"`
	ExitCode        int     `json:"exitCode"`
	Signal          string  `json:"signal,omitempty"`
	Sandbox         string  `json:"sandbox,omitempty"`
	Timings         Timings `json:"timings"`
	// Ms is the whole run as the server measured it.
	Ms int64 `json:"ms"`
}

// Timings break a run's time down, in milliseconds.
type Timings struct {
	Screen  float64 `json:"screenMs"`  // resolving and screening net/import hosts
	Sandbox float64 `json:"sandboxMs"` // taking a sandbox (from a pool when one matches)
	Setup   float64 `json:"setupMs"`   // egress policy and files
	Run     float64 `json:"runMs"`     // the program itself
}

// Invalid is a request refused before anything ran; Field names what is
// wrong.
type Invalid struct {
	Field string
	Msg   string
}

func (e *Invalid) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, a ...any) error {
	return &Invalid{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// plan is a checked request with every default applied.
type plan struct {
	Request
	timeoutMs, memoryMb int64
	net, imports        []string
	files               []decodedFile
}

type decodedFile struct {
	path string
	data []byte
	mode int
}

// check validates r and applies defaults; every refusal names its field
// and the range it wanted.
func check(r Request) (*plan, error) {
	p := &plan{Request: r, timeoutMs: DefaultTimeoutMs, memoryMb: DefaultMemoryMb}
	switch r.Language {
	case "":
		p.Language = JavaScript
	case JavaScript, TypeScript, Python, Shell:
	default:
		return nil, invalid("language", "%q: want javascript, typescript, python or shell", r.Language)
	}
	if r.Source == "" || len(r.Source) > MaxSourceBytes {
		return nil, invalid("source", "want 1 to %d bytes, got %d", MaxSourceBytes, len(r.Source))
	}
	if len(r.Input) > MaxInputBytes {
		return nil, invalid("input", "at most %d bytes of JSON", MaxInputBytes)
	}
	if c := r.Capabilities; c != nil {
		var err error
		if p.net, err = checkHosts("capabilities.net", c.Net); err != nil {
			return nil, err
		}
		if p.imports, err = checkHosts("capabilities.import", c.Import); err != nil {
			return nil, err
		}
		if len(p.net)+len(p.imports) > MaxTotalHosts {
			return nil, invalid("capabilities", "at most %d net and import hosts together", MaxTotalHosts)
		}
		if t := c.TimeoutMs; t != nil {
			if *t < MinTimeoutMs || *t > MaxTimeoutMs {
				return nil, invalid("capabilities.timeoutMs", "%d: want %d to %d", *t, MinTimeoutMs, MaxTimeoutMs)
			}
			p.timeoutMs = *t
		}
		if m := c.MemoryMb; m != nil {
			if *m < MinMemoryMb || *m > MaxMemoryMb {
				return nil, invalid("capabilities.memoryMb", "%d: want %d to %d", *m, MinMemoryMb, MaxMemoryMb)
			}
			p.memoryMb = *m
		}
	}
	if len(p.imports) > 0 && p.Language != JavaScript && p.Language != TypeScript {
		return nil, invalid("capabilities.import", "module hosts apply to javascript and typescript only")
	}
	if r.Stdin != nil && len(*r.Stdin) > MaxStdinBytes {
		return nil, invalid("stdin", "at most %d bytes", MaxStdinBytes)
	}
	if len(r.Secrets) > MaxSecrets {
		return nil, invalid("secrets", "at most %d", MaxSecrets)
	}
	total := 0
	for k, v := range r.Secrets {
		total += len(k) + len(v)
		if !secretName(k) || len(v) > MaxSecretBytes || total > MaxTotalSecretBytes {
			return nil, invalid("secrets", "names of letters, digits, '_', '.' and '-'; values of at most %d bytes, %d in all", MaxSecretBytes, MaxTotalSecretBytes)
		}
	}
	if b := r.Bindings; b != nil {
		if b.URL == "" || len(b.URL) > MaxBindingsURLBytes || b.Token == "" || len(b.Token) > MaxBindingsTokenLen {
			return nil, invalid("bindings", "url (1 to %d bytes) and token (1 to %d bytes) are both needed", MaxBindingsURLBytes, MaxBindingsTokenLen)
		}
		if p.Language != JavaScript && p.Language != TypeScript {
			return nil, invalid("bindings", "bindings are offered to javascript and typescript runs")
		}
	}
	if len(r.Files) > MaxFiles {
		return nil, invalid("files", "at most %d", MaxFiles)
	}
	total = 0
	placed := map[string]bool{}
	for i, f := range r.Files {
		field := fmt.Sprintf("files[%d]", i)
		if f.Path == "" || strings.ContainsRune(f.Path, 0) || len(f.Path) > 4096 {
			return nil, invalid(field+".path", "want a path of 1 to 4096 bytes")
		}
		where, err := placement(f.Path, placed)
		if err != nil {
			return nil, invalid(field+".path", "%q: %v", f.Path, err)
		}
		placed[where] = true
		var data []byte
		switch f.Encoding {
		case "", "utf-8", "utf8":
			data = []byte(f.Content)
		case "base64":
			var err error
			if data, err = decodeBase64(f.Content); err != nil {
				return nil, invalid(field+".content", "not base64: %v", err)
			}
		default:
			return nil, invalid(field+".encoding", "%q: want utf-8 or base64", f.Encoding)
		}
		if f.Mode < 0 || f.Mode > 0o777 {
			return nil, invalid(field+".mode", "%#o: want 0 to 0777", f.Mode)
		}
		total += len(data)
		if len(data) > MaxFileBytes || total > MaxTotalFileBytes {
			return nil, invalid(field+".content", "at most %d bytes a file, %d in all", MaxFileBytes, MaxTotalFileBytes)
		}
		p.files = append(p.files, decodedFile{path: where, data: data, mode: f.Mode})
	}
	return p, nil
}

// placement is where a run's file at p goes: p is relative to the
// workspace, or absolute in one of the sandbox's writable directories,
// and names a file that stays there, apart from every file placed
// before (which it is neither below nor above). What a caller gets wrong
// here is refused before any sandbox is taken.
func placement(p string, placed map[string]bool) (string, error) {
	where := path.Clean(p)
	if !path.IsAbs(p) {
		where = path.Join(baseline.Workspace, p)
	}
	var dir string
	for _, d := range baseline.ScratchDirs {
		if where == d.Path || strings.HasPrefix(where, d.Path+"/") {
			dir = d.Path
		}
	}
	switch {
	case dir == "" && !path.IsAbs(p):
		return "", fmt.Errorf("want a path inside the workspace (no .. out of it)")
	case dir == "":
		return "", fmt.Errorf("want a path relative to the workspace, or inside %s", scratchPaths())
	case where == dir || strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/.."):
		return "", fmt.Errorf("names a directory: want a file's path")
	}
	for up := path.Dir(where); up != dir; up = path.Dir(up) {
		if placed[up] {
			return "", fmt.Errorf("is below %s, which is a file of this run", up)
		}
	}
	for q := range placed {
		if strings.HasPrefix(q, where+"/") {
			return "", fmt.Errorf("is a directory of %s, a file of this run", q)
		}
	}
	return where, nil
}

// scratchPaths names the sandbox's writable directories.
func scratchPaths() string {
	var names []string
	for _, d := range baseline.ScratchDirs {
		names = append(names, d.Path)
	}
	return strings.Join(names, ", ")
}

// checkHosts admits host[:port] entries as the questpie server does: no
// wildcards, paths or spaces, at most MaxHostsPerAxis of them.
func checkHosts(field string, hosts []string) ([]string, error) {
	if len(hosts) > MaxHostsPerAxis {
		return nil, invalid(field, "at most %d hosts", MaxHostsPerAxis)
	}
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if h == "" || len(h) > 253 || strings.ContainsAny(h, "*/@") || strings.IndexFunc(h, unicode.IsSpace) >= 0 {
			return nil, invalid(field, "%q: want host or host:port, without wildcards, paths or spaces", h)
		}
		out = append(out, h)
	}
	return out, nil
}

func secretName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c == '.' || c == '-' || c < 128 && (unicode.IsLetter(c) || unicode.IsDigit(c))) {
			return false
		}
	}
	return true
}
