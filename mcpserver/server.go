// Package mcpserver offers cordon's sandboxes to a model as MCP tools:
// create a sandbox, run commands and code, read, write and list files,
// start background programs and read their output, expose ports, destroy;
// and a sandbox's files as resources. It is a client of a daemon, so
// every call is the daemon's caller's, with its quotas, pools and egress
// boundary.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/runs"
	"github.com/cordon-sandbox/cordon/server/api"
	"github.com/cordon-sandbox/cordon/server/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of what one tool call carries.
const (
	MaxOutputBytes      = 1 << 20 // a command's stdout and stderr, each
	MaxFileBytes        = 1 << 20 // a file read or written in one call
	DefaultTimeoutMs    = 60_000
	MaxTimeoutMs        = 10 * 60_000
	defaultSandboxTTL   = time.Hour
	maxProcessReadBytes = 256 << 10
)

// Config shapes the server.
type Config struct {
	// Daemon is the daemon the tools act on.
	Daemon *client.Client
	// Tier is the tier of sandboxes a create names none for.
	Tier string
	// Version is reported to clients.
	Version string
	// Reach bounds the hosts the model may let code reach
	// (create_sandbox's allow, run_code's net): each entry must be
	// within these rules (egress.Rule.Within). Empty, the model may let
	// code reach none, unless AnyHost. The model is not the operator: a
	// prompt it read may ask it to send what it holds anywhere.
	Reach   []egress.Rule
	AnyHost bool
	// Images bounds the images create_sandbox may name: exactly these
	// references. Empty, none, unless AnyImage. (The host fetches an
	// image it lacks from the registry the name says, and a name is as
	// good as a request for sending what it spells.)
	Images   []string
	AnyImage bool
}

// reachText says what field (allow, net) may name.
func (c *Config) reachText(field string) string {
	switch {
	case c.AnyHost:
		return field + " may name any host."
	case len(c.Reach) == 0:
		return "This server lets code reach no host: leave " + field + " empty."
	}
	return field + " may name only: " + strings.Join(c.reachNames(), ", ") + "."
}

// bounds says what create_sandbox may name.
func (c *Config) bounds() string {
	img := "image may be left empty only (the default image)."
	switch {
	case c.AnyImage:
		img = "image may name any image."
	case len(c.Images) > 0:
		img = "image may name only: " + strings.Join(c.Images, ", ") + "."
	}
	return c.reachText("allow") + " " + img
}

// reachNames are the Reach rules as written.
func (c *Config) reachNames() []string {
	var names []string
	for _, o := range c.Reach {
		name := o.Host
		for i, p := range o.Ports {
			name += map[bool]string{true: ":", false: ","}[i == 0] + strconv.Itoa(p)
		}
		names = append(names, name)
	}
	return names
}

// reachable refuses hosts the operator did not let the model name.
func (c *Config) reachable(field string, hosts []string) error {
	for _, h := range hosts {
		r, err := egress.ParseRule(h)
		if err != nil {
			return err
		}
		if c.AnyHost || r.Within(c.Reach) {
			continue
		}
		if len(c.Reach) == 0 {
			return fmt.Errorf("%s %q: this server lets sandboxes reach no host; its operator names the hosts the model may allow (cordon mcp --allow HOST[:PORT], or any with --allow-any-host)", field, h)
		}
		return fmt.Errorf("%s %q: this server lets sandboxes reach only %s (its operator's cordon mcp --allow)", field, h, strings.Join(c.reachNames(), ", "))
	}
	return nil
}

// image refuses an image the operator did not let the model name.
func (c *Config) image(ref string) error {
	if ref == "" || c.AnyImage || slices.Contains(c.Images, ref) {
		return nil
	}
	if len(c.Images) == 0 {
		return fmt.Errorf("image %q: this server runs the daemon's default image only; its operator names the images the model may use (cordon mcp --image REF, or any with --any-image)", ref)
	}
	return fmt.Errorf("image %q: this server runs only %s (its operator's cordon mcp --image)", ref, strings.Join(c.Images, ", "))
}

// New returns an MCP server offering cordon's tools.
func New(cfg Config) *mcp.Server {
	t := &tools{cfg: cfg, d: cfg.Daemon}
	s := mcp.NewServer(&mcp.Implementation{Name: "cordon", Title: "cordon sandboxes", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: "Each sandbox is an isolated Linux machine for running untrusted code: create one, run commands and code in it, " +
			"read and write its files, start background programs, expose their ports, and destroy it when done. " +
			"run_code runs a program once in a fresh sandbox of its own.",
	})
	mcp.AddTool(s, &mcp.Tool{Name: "create_sandbox", Description: "Create a sandbox and return its id. Network access is denied unless allow names host[:port] entries. " + cfg.bounds()}, t.create)
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Description: "Run a shell command (sh -c) in a sandbox and return its output and exit code. The command is ended at timeoutMs (default 60000, at most 600000)."}, t.runCommand)
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: "Run source code once in a fresh sandbox of its own and return its result: javascript or typescript (a module whose default export is called with input), python (the value of a final expression) or shell. " + cfg.reachText("net")}, t.runCode)
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Description: "Read a file in a sandbox (at most 1 MiB a call; use offset for more). Text comes as text, anything else as base64."}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Description: "Write a file in a sandbox (creating its directories), from text or base64."}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Description: "List a directory in a sandbox."}, t.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "start_process", Description: "Start a background program (sh -c) in a sandbox; it runs until it exits or the sandbox goes. Returns a process id for read_process_output, write_process_input (with stdin true) and stop_process."}, t.startProcess)
	mcp.AddTool(s, &mcp.Tool{Name: "read_process_output", Description: "Read a background program's output from an offset (0 for all that is kept), whether it still runs, and (done) whether its output has ended with this read."}, t.readProcess)
	mcp.AddTool(s, &mcp.Tool{Name: "write_process_input", Description: "Write text to the standard input of a background program started with stdin true (an interpreter's lines, answers to its prompts); end closes it."}, t.writeProcessInput)
	mcp.AddTool(s, &mcp.Tool{Name: "stop_process", Description: "Stop a background program (TERM, then KILL after a grace) and confirm it gone."}, t.stopProcess)
	mcp.AddTool(s, &mcp.Tool{Name: "expose_port", Description: "Give a port a program in the sandbox listens on a URL of the daemon, with a token of its own."}, t.exposePort)
	mcp.AddTool(s, &mcp.Tool{Name: "list_sandboxes", Description: "List your sandboxes."}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_usage", Description: "What a sandbox uses now against its limits: CPU time and use, memory, its writable space (disk) and tasks, and how many processes were killed for memory. Check it before a large build or download, or when a command was killed."}, t.usage)
	mcp.AddTool(s, &mcp.Tool{Name: "destroy_sandbox", Description: "Destroy a sandbox and everything in it."}, t.destroy)
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-file", Title: "A file in a sandbox", URITemplate: "cordon://sandboxes/{id}/files/{+path}",
		Description: "The content of a file in a sandbox (a path relative to its workspace, or absolute)."}, t.readResource)
	return s
}

type tools struct {
	cfg Config
	d   *client.Client
}

// CreateIn is create_sandbox's input.
type CreateIn struct {
	Tier       string            `json:"tier,omitempty" jsonschema:"the isolation tier (process, container, gvisor, docker, kubernetes); the daemon's default when empty"`
	Image      string            `json:"image,omitempty" jsonschema:"an OCI image to run, for example python:3.12-slim"`
	MemoryMb   int64             `json:"memoryMb,omitempty" jsonschema:"the memory limit in MiB (none when 0)"`
	TTLSeconds int64             `json:"ttlSeconds,omitempty" jsonschema:"how long the sandbox may live (default 3600)"`
	Allow      []string          `json:"allow,omitempty" jsonschema:"hosts the sandbox may reach, host or host:port; none when empty"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command"`
}

// CreateOut is create_sandbox's output.
type CreateOut struct {
	ID   string `json:"id"`
	Tier string `json:"tier"`
}

func (t *tools) create(ctx context.Context, _ *mcp.CallToolRequest, in CreateIn) (*mcp.CallToolResult, CreateOut, error) {
	spec := api.Spec{Tier: in.Tier, Image: in.Image, Env: in.Env, Limits: api.Limits{MemoryBytes: in.MemoryMb << 20}}
	if spec.Tier == "" {
		spec.Tier = t.cfg.Tier
	}
	if in.MemoryMb < 0 || in.MemoryMb > 1<<20 {
		return nil, CreateOut{}, fmt.Errorf("memoryMb %d: want 0 (none) to %d", in.MemoryMb, 1<<20)
	}
	if err := t.cfg.reachable("allow", in.Allow); err != nil {
		return nil, CreateOut{}, err
	}
	if err := t.cfg.image(in.Image); err != nil {
		return nil, CreateOut{}, err
	}
	if len(in.Allow) > 0 {
		eg := &api.Egress{Mode: "static"}
		for _, h := range in.Allow {
			r, err := egress.ParseRule(h)
			if err != nil {
				return nil, CreateOut{}, err
			}
			eg.Rules = append(eg.Rules, r)
		}
		spec.Egress = eg
	}
	ttl := in.TTLSeconds
	if ttl == 0 {
		ttl = int64(defaultSandboxTTL / time.Second)
	}
	req := api.CreateRequest{Spec: spec, TTLSeconds: ttl, Labels: map[string]string{"cordon.mcp": "1"}}
	sb, err := t.d.Create(ctx, req)
	if ae := (*api.Error)(nil); in.TTLSeconds == 0 && errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.HasPrefix(ae.Message, "ttlSeconds ") {
		// The model named no TTL and the daemon allows less than this
		// server's default: the daemon's own, held to its maximum.
		req.TTLSeconds = 0
		sb, err = t.d.Create(ctx, req)
	}
	if err != nil {
		return nil, CreateOut{}, err
	}
	return nil, CreateOut{ID: sb.ID, Tier: sb.Spec.Tier}, nil
}

// CommandIn is run_command's input.
type CommandIn struct {
	Sandbox   string            `json:"sandbox" jsonschema:"the sandbox's id"`
	Command   string            `json:"command" jsonschema:"a shell command line, run by sh -c"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"the working directory (the workspace when empty)"`
	Env       map[string]string `json:"env,omitempty"`
	Stdin     string            `json:"stdin,omitempty"`
	TimeoutMs int64             `json:"timeoutMs,omitempty" jsonschema:"end the command after this long (default 60000, at most 600000)"`
}

// CommandOut is run_command's output.
type CommandOut struct {
	ExitCode        int    `json:"exitCode"`
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
}

func timeout(ms int64) (time.Duration, error) {
	switch {
	case ms == 0:
		return DefaultTimeoutMs * time.Millisecond, nil
	case ms < 1 || ms > MaxTimeoutMs:
		return 0, fmt.Errorf("timeoutMs %d: want 1 to %d", ms, MaxTimeoutMs)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (t *tools) runCommand(ctx context.Context, _ *mcp.CallToolRequest, in CommandIn) (*mcp.CallToolResult, CommandOut, error) {
	to, err := timeout(in.TimeoutMs)
	if err != nil {
		return nil, CommandOut{}, err
	}
	if in.Sandbox == "" || in.Command == "" {
		return nil, CommandOut{}, errors.New("sandbox and command are both needed")
	}
	var stdout, stderr bytes.Buffer
	o := client.ExecOptions{Args: []string{"-c", in.Command}, Cwd: in.Cwd, Env: in.Env, Timeout: to, MaxOutputBytes: MaxOutputBytes, Stdout: &stdout, Stderr: &stderr}
	if in.Stdin != "" {
		o.Stdin = &in.Stdin
	}
	r, err := t.d.Exec(ctx, in.Sandbox, "/bin/sh", o)
	if err != nil {
		return nil, CommandOut{}, err
	}
	out := CommandOut{ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, Stdout: stdout.String(), Stderr: stderr.String(),
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated}
	if r.TimedOut {
		// The model is told plainly; the output so far comes with it.
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("the command timed out after %d ms and was ended; its output so far is in the structured result", to.Milliseconds())}}}, out, nil
	}
	return nil, out, nil
}

// CodeIn is run_code's input.
type CodeIn struct {
	Language  string   `json:"language,omitempty" jsonschema:"javascript (default), typescript, python or shell"`
	Source    string   `json:"source"`
	Input     any      `json:"input,omitempty" jsonschema:"JSON handed to the program (javascript: the default export's argument; python: the global INPUT)"`
	Net       []string `json:"net,omitempty" jsonschema:"hosts the code may reach, host or host:port"`
	TimeoutMs int64    `json:"timeoutMs,omitempty" jsonschema:"1 to 30000 (default 5000)"`
	MemoryMb  int64    `json:"memoryMb,omitempty" jsonschema:"16 to 1024 (default 128)"`
}

func (t *tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, in CodeIn) (*mcp.CallToolResult, any, error) {
	if err := t.cfg.reachable("net", in.Net); err != nil {
		return nil, nil, err
	}
	req := runs.Request{Language: in.Language, Source: in.Source, Capabilities: &runs.Capabilities{Net: in.Net, Import: []string{}}}
	if in.Input != nil {
		b, err := json.Marshal(in.Input)
		if err != nil {
			return nil, nil, err
		}
		req.Input = b
	}
	if in.TimeoutMs != 0 {
		req.Capabilities.TimeoutMs = &in.TimeoutMs
	}
	if in.MemoryMb != 0 {
		req.Capabilities.MemoryMb = &in.MemoryMb
	}
	var res runs.Result
	if err := t.d.Call(ctx, http.MethodPost, "/v1/runs", req, &res); err != nil {
		return nil, nil, err
	}
	if !res.OK {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("the run failed (%s): %s", res.Reason, res.Error)}}}, &res, nil
	}
	return nil, &res, nil
}

// FileIn names a file.
type FileIn struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path" jsonschema:"relative to the workspace, or absolute"`
	Offset  int64  `json:"offset,omitempty" jsonschema:"the byte to start at"`
}

// FileOut is a file's content.
type FileOut struct {
	Content  string `json:"content"`
	Encoding string `json:"encoding" jsonschema:"utf-8 or base64"`
	Size     int64  `json:"size"`
	// More says the file goes on past this read, from Next.
	More bool  `json:"more,omitempty"`
	Next int64 `json:"next" jsonschema:"the offset to read from next"`
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in FileIn) (*mcp.CallToolResult, FileOut, error) {
	if in.Offset < 0 {
		return nil, FileOut{}, errors.New("offset must not be negative")
	}
	info, err := t.d.Stat(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, FileOut{}, err
	}
	if info.Type != "file" {
		kind := map[string]string{"dir": "a directory (list_files lists it)", "symlink": "a symbolic link"}[info.Type]
		if kind == "" {
			kind = "a device, FIFO or socket"
		}
		return nil, FileOut{}, fmt.Errorf("%s is %s, not a regular file", in.Path, kind)
	}
	var buf bytes.Buffer
	if in.Offset < info.Size {
		if _, err := t.d.Download(ctx, in.Sandbox, in.Path, in.Offset, min(MaxFileBytes, info.Size-in.Offset), &buf); err != nil {
			return nil, FileOut{}, err
		}
	}
	out := FileOut{Size: info.Size, More: in.Offset+int64(buf.Len()) < info.Size}
	// A read that stops before the file's end may stop inside a
	// character: its first bytes are left to the next read.
	if cut := wire.CompleteUTF8(buf.Bytes()); out.More && cut > 0 {
		buf.Truncate(cut)
	}
	out.Next = in.Offset + int64(buf.Len())
	if utf8.Valid(buf.Bytes()) {
		out.Content, out.Encoding = buf.String(), "utf-8"
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(buf.Bytes()), "base64"
	}
	return nil, out, nil
}

// WriteIn is write_file's input.
type WriteIn struct {
	Sandbox  string `json:"sandbox"`
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	Mode     int    `json:"mode,omitempty" jsonschema:"permission bits, for example 493 (0755); 0644 when 0"`
}

// WriteOut is write_file's output.
type WriteOut struct {
	Bytes int `json:"bytes"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in WriteIn) (*mcp.CallToolResult, WriteOut, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteOut{}, fmt.Errorf("content is not base64: %v", err)
		}
	default:
		return nil, WriteOut{}, fmt.Errorf("encoding %q: want utf-8 or base64", in.Encoding)
	}
	if len(data) > MaxFileBytes {
		return nil, WriteOut{}, fmt.Errorf("content of %d bytes: at most %d a call", len(data), MaxFileBytes)
	}
	if in.Mode < 0 || in.Mode > 0o777 {
		return nil, WriteOut{}, fmt.Errorf("mode %#o: want 0 to 0777", in.Mode)
	}
	mode := in.Mode
	if mode == 0 {
		mode = 0o644
	}
	if err := t.d.UploadMode(ctx, in.Sandbox, in.Path, bytes.NewReader(data), int64(len(data)), mode); err != nil {
		return nil, WriteOut{}, err
	}
	return nil, WriteOut{Bytes: len(data)}, nil
}

// ListIn names a directory.
type ListIn struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path,omitempty" jsonschema:"the workspace when empty"`
}

func (t *tools) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, *wire.ListResponse, error) {
	p := in.Path
	if p == "" {
		p = "."
	}
	l, err := t.d.ListDir(ctx, in.Sandbox, p)
	return nil, l, err
}

// ProcessIn starts a background program.
type ProcessIn struct {
	Sandbox string            `json:"sandbox"`
	Command string            `json:"command" jsonschema:"a shell command line, run by sh -c"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Stdin   bool              `json:"stdin,omitempty" jsonschema:"give it a standard input of its own, which write_process_input writes (else it reads nothing)"`
	// TimeoutMs is the agent's to check, up to its 30 days.
	TimeoutMs int64 `json:"timeoutMs,omitempty" jsonschema:"end it, and what it left running, this long after its start (default: none; it runs until it exits or stop_process)"`
}

// ProcessOut names a started program.
type ProcessOut struct {
	Process string `json:"process"`
	Pid     int    `json:"pid"`
}

func (t *tools) startProcess(ctx context.Context, _ *mcp.CallToolRequest, in ProcessIn) (*mcp.CallToolResult, ProcessOut, error) {
	if in.Sandbox == "" || in.Command == "" {
		return nil, ProcessOut{}, errors.New("sandbox and command are both needed")
	}
	ac := t.d.Agent(in.Sandbox)
	defer ac.Close()
	s, err := ac.StartSession(ctx, wire.SessionRequest{Command: "/bin/sh", Args: []string{"-c", in.Command}, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin, TimeoutMs: in.TimeoutMs})
	if err != nil {
		return nil, ProcessOut{}, err
	}
	return nil, ProcessOut{Process: s.ID, Pid: s.Pid}, nil
}

// InputIn writes to a program's standard input.
type InputIn struct {
	Sandbox string `json:"sandbox"`
	Process string `json:"process"`
	Input   string `json:"input" jsonschema:"the text to write (end each line with a newline); at most 1 MiB"`
	End     bool   `json:"end,omitempty" jsonschema:"then close its standard input: it reads its end"`
}

// InputOut says what was written.
type InputOut struct {
	Written int  `json:"written"`
	Ended   bool `json:"ended,omitempty"`
}

func (t *tools) writeProcessInput(ctx context.Context, _ *mcp.CallToolRequest, in InputIn) (*mcp.CallToolResult, InputOut, error) {
	ac := t.d.Agent(in.Sandbox)
	defer ac.Close()
	var err error
	if in.End {
		err = ac.CloseSessionStdin(ctx, in.Process, []byte(in.Input))
	} else {
		err = ac.SessionInput(ctx, in.Process, []byte(in.Input))
	}
	if err != nil {
		return nil, InputOut{}, err
	}
	return nil, InputOut{Written: len(in.Input), Ended: in.End}, nil
}

// OutputIn reads a program's output.
type OutputIn struct {
	Sandbox string `json:"sandbox"`
	Process string `json:"process"`
	Offset  int64  `json:"offset,omitempty" jsonschema:"where to read from: 0 for all that is kept, else the next offset of the last read"`
}

// OutputOut is a piece of a program's output.
type OutputOut struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Next     int64  `json:"next" jsonschema:"the offset to read from next"`
	Running  bool   `json:"running"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty" jsonschema:"its timeout ended it"`
	// More says there is output past this read already.
	More bool `json:"more,omitempty"`
	// Done says the output has ended and this read took the last of it.
	Done bool `json:"done,omitempty" jsonschema:"the output has ended and this read has the last of it: nothing more will come"`
}

var errEnough = errors.New("enough for one read")

func (t *tools) readProcess(ctx context.Context, _ *mcp.CallToolRequest, in OutputIn) (*mcp.CallToolResult, OutputOut, error) {
	ac := t.d.Agent(in.Sandbox)
	defer ac.Close()
	var out OutputOut
	var stdout, stderr bytes.Buffer
	var last *bytes.Buffer // the stream of the read's last piece
	var lastEnd int64
	n := 0
	next, done, err := ac.SessionOutput(ctx, in.Process, in.Offset, false, func(stream string, offset int64, data []byte) error {
		if n+len(data) > maxProcessReadBytes {
			out.More = true
			return errEnough
		}
		n += len(data)
		last = &stdout
		if stream == "stderr" {
			last = &stderr
		}
		last.Write(data)
		out.Next = offset + int64(len(data))
		lastEnd = out.Next
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, out, err
	}
	if !out.More {
		out.Next = max(next, out.Next)
	}
	s, err := ac.Session(ctx, in.Process)
	if err != nil {
		return nil, out, err
	}
	// Where the output goes on, a read may end inside a character: its
	// first bytes are left to the next read, which starts on the
	// character rather than in it (each read would show U+FFFD otherwise).
	// Whether it goes on is the output's own end, not the program's: a
	// program that ended after its output was read, or whose last bytes
	// the agent has yet to take from the pipe, has not ended its output.
	out.Done = done && !out.More
	if last != nil && lastEnd == out.Next && !out.Done {
		held := last.Len() - wire.CompleteUTF8(last.Bytes())
		last.Truncate(last.Len() - held)
		out.Next -= int64(held)
	}
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	out.Running, out.ExitCode, out.Signal, out.TimedOut = s.State == "running", s.ExitCode, s.Signal, s.TimedOut
	return nil, out, nil
}

// StopIn names a program to stop.
type StopIn struct {
	Sandbox string `json:"sandbox"`
	Process string `json:"process"`
}

func (t *tools) stopProcess(ctx context.Context, _ *mcp.CallToolRequest, in StopIn) (*mcp.CallToolResult, *wire.Session, error) {
	ac := t.d.Agent(in.Sandbox)
	defer ac.Close()
	s, err := ac.KillSession(ctx, in.Process, "TERM", 2*time.Second)
	return nil, s, err
}

// PortIn names a port.
type PortIn struct {
	Sandbox string `json:"sandbox"`
	Port    int    `json:"port" jsonschema:"1 to 65535"`
}

func (t *tools) exposePort(ctx context.Context, _ *mcp.CallToolRequest, in PortIn) (*mcp.CallToolResult, *api.Port, error) {
	p, err := t.d.ExposePort(ctx, in.Sandbox, in.Port)
	if err != nil {
		return nil, nil, err
	}
	if u, err := url.Parse(p.URL); err == nil && !u.IsAbs() {
		p.URL = strings.TrimSuffix(t.d.Base(), "/") + p.URL
	}
	return nil, p, nil
}

// SandboxIn names a sandbox.
type SandboxIn struct {
	Sandbox string `json:"sandbox"`
}

// ListOut lists sandboxes.
type ListOut struct {
	Sandboxes []api.Sandbox `json:"sandboxes"`
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	l, err := t.d.List(ctx, client.ListOptions{})
	var live []api.Sandbox
	for _, s := range l {
		// run_code's own sandboxes are not the caller's to use (and
		// go once the run is over).
		if _, run := s.Labels[runs.Label]; s.State != api.StateDestroyed && !run {
			live = append(live, s)
		}
	}
	return nil, ListOut{Sandboxes: live}, err
}

func (t *tools) usage(ctx context.Context, _ *mcp.CallToolRequest, in SandboxIn) (*mcp.CallToolResult, *api.Metrics, error) {
	m, err := t.d.Metrics(ctx, in.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	return nil, m, nil
}

// DestroyOut confirms a teardown.
type DestroyOut struct {
	Destroyed string `json:"destroyed"`
}

func (t *tools) destroy(ctx context.Context, _ *mcp.CallToolRequest, in SandboxIn) (*mcp.CallToolResult, DestroyOut, error) {
	if err := t.d.Delete(ctx, in.Sandbox); err != nil {
		return nil, DestroyOut{}, err
	}
	return nil, DestroyOut{Destroyed: in.Sandbox}, nil
}

// readResource serves cordon://sandboxes/{id}/files/{+path}.
func (t *tools) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, "cordon://sandboxes/")
	id, p, ok2 := strings.Cut(rest, "/files/")
	if !ok || !ok2 || id == "" || p == "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if up, err := url.PathUnescape(p); err == nil {
		p = up
	}
	var buf bytes.Buffer
	if _, err := t.d.Download(ctx, id, p, 0, MaxFileBytes, &buf); err != nil {
		if client.IsNotFound(err) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	c := &mcp.ResourceContents{URI: uri}
	if utf8.Valid(buf.Bytes()) {
		c.MIMEType, c.Text = "text/plain", buf.String()
	} else {
		c.MIMEType, c.Blob = "application/octet-stream", buf.Bytes()
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}
