// Package sandbox is cordon's public Go SDK: create a sandbox from a Spec on
// any registered tier, run commands and move files through its agent, and
// tear it down with confirmation. It holds the contracts every tier
// implements (Backend, Instance); it imports no backend.
package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/egress"
)

// Provider creates sandboxes on the backends it was given.
type Provider struct {
	egressOnce  sync.Once
	egress      *egress.Proxy
	images      Images // WithImages
	backends    map[string]Backend
	defaultTier string
	disks       string // WithDisks
	diskDefault int64
	defaults    Limits // WithDefaultLimits
	log         *slog.Logger
	readyWait   time.Duration
	hostGrace   time.Duration
}

// Option configures a Provider.
type Option func(*Provider)

// WithDefaultTier sets the tier used when a Spec names none.
func WithDefaultTier(name string) Option { return func(p *Provider) { p.defaultTier = name } }

// WithLogger sets the provider's logger.
func WithLogger(l *slog.Logger) Option { return func(p *Provider) { p.log = l } }

// WithEgressProxy sets the proxy that enforces sandboxes' egress policies
// (by default the provider makes one with the host's resolver).
func WithEgressProxy(p *egress.Proxy) Option { return func(pr *Provider) { pr.egress = p } }

func (p *Provider) egressProxy() *egress.Proxy {
	p.egressOnce.Do(func() {
		if p.egress == nil {
			p.egress = egress.New(egress.Config{})
		}
	})
	return p.egress
}

// WithImages sets where sandboxes' images come from. Without it a spec
// naming an image is refused on every tier that does not pull images
// itself.
func WithImages(i Images) Option { return func(p *Provider) { p.images = i } }

// WithHostGrace sets how long past a command's timeout the host waits for
// its end before tearing the sandbox down (default HostGrace).
func WithHostGrace(d time.Duration) Option { return func(p *Provider) { p.hostGrace = d } }

// WithDefaultLimits sets the limits a sandbox gets where its spec names
// none, each where the sandbox's tier can enforce it (elsewhere the spec
// goes on without it, as it would have). A host shared by tenants needs
// some: a sandbox without a pids limit has only its tier's task ceiling,
// which keeps no reserve for the agent, and one without a memory limit
// gets half the host's memory as its writable space, memory that no OOM
// kill frees. DiskBytes is the writable space of a sandbox whose spec
// names neither it nor a memory limit (with a memory limit, the space is
// half of it, as without defaults), at most the memory limit a default
// gives; a persistent workspace's disk has its own default (WithDisks),
// and a tier whose sandboxes have memory of their own (a VM's) needs none.
func WithDefaultLimits(l Limits) Option { return func(p *Provider) { p.defaults = l } }

// withDefaults is spec with the provider's default limits, where its tier
// (caps) can enforce them.
func (p *Provider) withDefaults(spec Spec, caps Capabilities) Spec {
	d, l := p.defaults, &spec.Limits
	ownMemory := l.MemoryBytes > 0
	if l.MemoryBytes == 0 && caps.MemoryLimit {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Pids == 0 && caps.PidsLimit {
		l.Pids = d.Pids
	}
	if l.CPUs == 0 && caps.CPULimit {
		l.CPUs = d.CPUs
	}
	if l.DiskBytes == 0 && !ownMemory && !spec.PersistentWorkspace && caps.DiskLimit && !caps.OwnMemory && d.DiskBytes > 0 {
		l.DiskBytes = d.DiskBytes
		if l.MemoryBytes > 0 {
			l.DiskBytes = min(l.DiskBytes, l.MemoryBytes)
		}
	}
	if spec.PersistentWorkspace && l.DiskBytes == 0 && p.disks != "" && caps.Disk {
		// A disk of the provider's: its default quota (WithDisks), said.
		l.DiskBytes = p.diskDefault
	}
	return spec
}

// Effective is spec as Create would start it: its tier resolved, and the
// provider's defaults where it leaves limits out (a persistent
// workspace's disk quota among them).
func (p *Provider) Effective(spec Spec) (Spec, error) {
	_, spec, _, err := p.resolve(spec)
	return spec, err
}

// resolve finds spec's backend and gives spec its tier's name and the
// provider's defaults; caps are what the tier offers through this
// provider.
func (p *Provider) resolve(spec Spec) (Backend, Spec, Capabilities, error) {
	b, err := p.Backend(spec.Tier)
	if err != nil {
		return nil, spec, Capabilities{}, err
	}
	spec.Tier = b.Name()
	caps, _ := p.Capabilities(spec.Tier)
	return b, p.withDefaults(spec, caps), caps, nil
}

// WithReadyTimeout bounds how long Create waits for the agent to be ready.
func WithReadyTimeout(d time.Duration) Option { return func(p *Provider) { p.readyWait = d } }

// NewProvider returns a provider over the given backends. The first backend
// is the default tier unless WithDefaultTier says otherwise.
func NewProvider(backends []Backend, opts ...Option) *Provider {
	p := &Provider{backends: map[string]Backend{}, log: slog.New(slog.DiscardHandler), readyWait: 30 * time.Second}
	for i, b := range backends {
		p.backends[b.Name()] = b
		if i == 0 {
			p.defaultTier = b.Name()
		}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Tiers lists the registered tier names.
func (p *Provider) Tiers() []string {
	var out []string
	for n := range p.backends {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Backend returns the backend registered under name.
func (p *Provider) Backend(name string) (Backend, error) {
	if name == "" {
		name = p.defaultTier
	}
	b, ok := p.backends[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownTier, name, p.Tiers())
	}
	return b, nil
}

// NewToken mints a 256-bit per-instance agent credential.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sbx_" + hex.EncodeToString(b[:])
}

// Create starts a sandbox and returns once its agent is admitted (it reports
// exactly wire.ProtocolVersion). Anything that fails on the way is torn
// down before Create returns.
func (p *Provider) Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	b, spec, caps, err := p.resolve(spec)
	if err != nil {
		return nil, err
	}
	if err := caps.Check(spec.Tier, &spec); err != nil {
		return nil, err
	}
	release := func() {}
	if spec.Image != "" && !b.Capabilities().EngineImages {
		var err error
		if spec, release, err = p.imageRoot(ctx, spec); err != nil {
			return nil, err
		}
	}
	s, err := p.start(ctx, b, spec)
	if err != nil {
		release()
		return nil, err
	}
	s.releaseImage = release
	return s, nil
}

func (p *Provider) start(ctx context.Context, b Backend, spec Spec) (*Sandbox, error) {
	if spec.PersistentWorkspace && p.ownDisks(b.Capabilities()) {
		return p.startOnDisk(ctx, b, spec)
	}
	l, err := p.launch(spec)
	if err != nil {
		return nil, err
	}
	inst, err := b.Start(ctx, l)
	if err != nil {
		return nil, err
	}
	return p.admit(ctx, newID(), spec, inst)
}

// launch is what a backend is given to start spec's instance, with a new
// token.
func (p *Provider) launch(spec Spec) (Launch, error) {
	token, err := NewToken()
	if err != nil {
		return Launch{}, err
	}
	agentEnv := map[string]string{
		"IDLE_TIMEOUT_MS": strconv.FormatInt(spec.IdleTimeout.Milliseconds(), 10),
	}
	if spec.MaxTimeout > 0 {
		agentEnv["MAX_TIMEOUT_MS"] = strconv.FormatInt(spec.MaxTimeout.Milliseconds(), 10)
	}
	if spec.Limits.Pids == 0 {
		// The spare threads keep the agent alive when a workload exhausts
		// its pids limit. Without one only the tier's task ceiling stops a
		// fork bomb, and surviving that is not worth the 2–3 ms that
		// making them costs every first command.
		agentEnv["SPARE_THREADS"] = "0"
	}
	return Launch{Spec: spec, Token: token, AgentEnv: agentEnv}, nil
}

// admit waits for inst's agent, and makes it sandbox id with its egress
// boundary; an instance whose agent does not become ready is destroyed.
func (p *Provider) admit(ctx context.Context, id string, spec Spec, inst Instance) (*Sandbox, error) {
	c := client.New(inst.Endpoint())
	readyCtx, cancel := context.WithTimeout(ctx, p.readyWait)
	defer cancel()
	health, err := waitReady(readyCtx, c, inst)
	if err != nil {
		c.Close()
		diag := inst.Diagnostics()
		derr := inst.Destroy(context.WithoutCancel(ctx))
		err = fmt.Errorf("%w: %w", ErrAgent, err)
		if diag != "" {
			err = fmt.Errorf("%w; agent said: %s", err, diag)
		}
		return nil, errors.Join(err, derr)
	}
	s := newSandbox(id, spec, inst, c, health)
	s.grace = p.grace()
	if err := p.attachEgress(ctx, s, inst, spec); err != nil {
		c.Close()
		return nil, errors.Join(err, inst.Destroy(context.WithoutCancel(ctx)))
	}
	p.log.Debug("sandbox created", "id", s.id, "tier", spec.Tier)
	return s, nil
}

func (p *Provider) grace() time.Duration { return cmp.Or(p.hostGrace, HostGrace) }

// attachEgress serves inst's egress listener, if it has one, with the
// egress proxy under spec's policy.
func (p *Provider) attachEgress(ctx context.Context, s *Sandbox, inst Instance, spec Spec) error {
	port, ok := inst.(EgressPort)
	if !ok {
		return nil
	}
	policy := egress.Policy{Mode: egress.DenyAll}
	if spec.Egress != nil {
		policy = *spec.Egress
	}
	b, err := p.egressProxy().Attach(ctx, s.id, port.EgressListener(), policy)
	if err != nil {
		return err
	}
	s.egress = b
	return nil
}

// Readier is an Instance that signals when its agent listens, so that
// admission asks once instead of polling.
type Readier interface {
	Ready() <-chan struct{}
}

// ReadyReporter is a Readier whose agent hands its host a wire.ReadyRecord
// as it becomes ready: admission then needs no request at all.
type ReadyReporter interface {
	Readier
	// ReadyRecord is the record, once Ready has closed; nil if none came.
	ReadyRecord() []byte
}

func waitReady(ctx context.Context, c *client.Client, inst Instance) (*wire.Health, error) {
	if r, ok := inst.(Readier); ok && r.Ready() != nil {
		select {
		case <-r.Ready():
			if rr, ok := inst.(ReadyReporter); ok {
				if rec := rr.ReadyRecord(); len(rec) > 0 {
					return c.AdmitRecord(rec)
				}
			}
		case <-inst.Exited():
		case <-ctx.Done():
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-inst.Exited():
			cancel()
		case <-ctx.Done():
		}
	}()
	h, err := c.WaitReady(ctx)
	if err != nil {
		select {
		case <-inst.Exited():
			return nil, errors.New("the agent exited before it was ready")
		default:
		}
	}
	return h, err
}

// Sandbox is one live sandbox. Its methods are safe for concurrent use.
type Sandbox struct {
	id   string
	spec Spec
	inst Instance
	// The agent's client and what it said when admitted: new ones when a
	// suspended sandbox resumes on a new instance of its agent.
	client atomic.Pointer[client.Client]
	health atomic.Pointer[wire.Health]

	egress       *egress.Binding
	releaseImage func()        // the image lease, held until teardown is confirmed
	grace        time.Duration // see HostGrace

	mu        sync.Mutex
	destroyed bool
	suspended bool
	teardown  *teardown
}

// ErrNoEgressBoundary: the sandbox's tier has no egress boundary to change.
var ErrNoEgressBoundary = errors.New("this sandbox's tier has no egress boundary")

// SetNetworkPolicy changes what the sandbox may reach: new connections
// follow the new policy at once, and open tunnels it no longer allows are
// closed.
func (s *Sandbox) SetNetworkPolicy(ctx context.Context, policy egress.Policy) error {
	if err := s.live(); err != nil {
		return err
	}
	if s.egress == nil {
		e, ok := s.inst.(EgressEnforcer)
		if !ok {
			return ErrNoEgressBoundary
		}
		if err := e.SetEgress(ctx, policy); err != nil {
			return err
		}
	} else if err := s.egress.SetPolicy(ctx, policy); err != nil {
		return err
	}
	s.mu.Lock()
	s.spec.Egress = &policy
	s.mu.Unlock()
	return nil
}

type teardown struct {
	done chan struct{}
	err  error
}

// ID is the sandbox's identifier.
func (s *Sandbox) ID() string { return s.id }

// Tier is the backend the sandbox runs on.
func (s *Sandbox) Tier() string { return s.Spec().Tier }

// Spec returns the sandbox's spec (with its current egress policy).
func (s *Sandbox) Spec() Spec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spec
}

// Features lists the agent's additive capabilities (healthz features).
func (s *Sandbox) Features() []string { return s.admitted().Features }

// Exited is closed when the sandbox's agent has exited, by a teardown or
// on its own (killed, crashed): a sandbox whose agent exited on its own
// can run nothing more.
func (s *Sandbox) Exited() <-chan struct{} { return s.inst.Exited() }

// Diagnostics is what the sandbox's agent has logged (bounded), for error
// reports.
func (s *Sandbox) Diagnostics() string { return s.inst.Diagnostics() }

// Client is the agent client, for the wire routes the SDK does not wrap.
func (s *Sandbox) Client() *client.Client { return s.client.Load() }

// agent is the agent's client (Client), admitted what it said.
func (s *Sandbox) agent() *client.Client  { return s.client.Load() }
func (s *Sandbox) admitted() *wire.Health { return s.health.Load() }

// newSandbox is a sandbox of inst, whose agent c admitted with health.
func newSandbox(id string, spec Spec, inst Instance, c *client.Client, health *wire.Health) *Sandbox {
	s := &Sandbox{id: id, spec: spec, inst: inst}
	s.client.Store(c)
	s.health.Store(health)
	return s
}

func (s *Sandbox) live() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return ErrDestroyed
	}
	if s.suspended {
		return ErrSuspended
	}
	return nil
}

// ExecOptions shapes one command; see client.ExecOptions.
type ExecOptions = client.ExecOptions

// Result is how a command ended. Result.OOMKills counts the processes
// the kernel killed for memory while it ran, whichever they were.
type Result struct {
	wire.Result
	// OOMKilled: the command itself was killed because the sandbox reached
	// its memory limit (Signal is then SIGKILL).
	OOMKilled bool
}

// Dumper is implemented by instances whose sandbox can write what its
// processes are doing into its diagnostics (the microvm tier's guest, to
// its console): what a host asks before it tears down a sandbox whose
// agent stopped answering, so that the reason is not lost with it. The
// dump may end the agent; it is bounded in time (a few seconds).
type Dumper interface {
	Dump(ctx context.Context)
}

// DumpState has the sandbox write what its processes are doing into its
// Diagnostics, where its tier can (Dumper), before a teardown: the agent
// may end.
func (s *Sandbox) DumpState(ctx context.Context) {
	if d, ok := s.inst.(Dumper); ok {
		d.Dump(ctx)
	}
}

// OOMCounter is implemented by instances that can count OOM kills inside
// the sandbox.
type OOMCounter interface {
	OOMKills() uint64
}

// OOMKills counts the OOM kills inside the sandbox so far; ok is false
// where the tier cannot count them.
func (s *Sandbox) OOMKills() (n uint64, ok bool) {
	if oc, ok := s.inst.(OOMCounter); ok {
		return oc.OOMKills(), true
	}
	return 0, false
}

// DefaultExecTimeout is a command's timeout when ExecOptions names none,
// unless the sandbox's ceiling (Spec.MaxTimeout) is lower.
const DefaultExecTimeout = 5 * time.Minute

// defaultMaxTimeout is the ceiling of a sandbox whose spec sets none (the
// agent's own default).
const defaultMaxTimeout = 30 * time.Minute

// HostGrace is how long past a command's timeout the host waits for the
// agent to report its end before it tears the sandbox down itself: the
// agent holds the timeout, and the host holds it too, so a frozen or
// killed agent never turns into an unbounded command.
const HostGrace = 10 * time.Second

// DeadlineError: a command outlived its timeout and the host's grace
// without the agent reporting its end (a frozen or dead agent), so the
// host tore the sandbox down. It wraps ErrDeadline.
type DeadlineError struct {
	Timeout, Grace time.Duration
	// Teardown is the teardown's own error, nil when it was confirmed.
	Teardown error
}

func (e *DeadlineError) Error() string {
	msg := fmt.Sprintf("the command ran past its timeout (%v) and the sandbox's agent did not report its end within %v more; the host tore the sandbox down", e.Timeout, e.Grace)
	if e.Teardown != nil {
		msg += " (teardown not confirmed: " + e.Teardown.Error() + ")"
	}
	return msg
}

func (e *DeadlineError) Unwrap() []error { return []error{ErrDeadline, e.Teardown} }

// HostGrace is how long past a command's timeout the host waits for its
// end before it tears the sandbox down (WithHostGrace).
func (s *Sandbox) HostGrace() time.Duration { return s.grace }

// ExecTimeout is the timeout a command gets: o's, or DefaultExecTimeout
// held to the sandbox's ceiling.
func (s *Sandbox) ExecTimeout(o ExecOptions) time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	ceiling := cmp.Or(s.Spec().MaxTimeout, defaultMaxTimeout)
	return min(DefaultExecTimeout, ceiling)
}

// Exec runs a command in the sandbox. When ctx ends, the command is
// cancelled through the agent and Exec returns once the stop is confirmed.
// The host holds the command's timeout too: past it and HostGrace with no
// end reported, the sandbox is torn down (DeadlineError).
func (s *Sandbox) Exec(ctx context.Context, command string, o ExecOptions) (*Result, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if client.StdinNeedsBase64(o.Stdin) && !s.hasFeature("stdin-base64") {
		return nil, fmt.Errorf("%w: stdin that is not UTF-8 (this agent takes text stdin only)", ErrUnsupported)
	}
	if o.RawOutput && !s.hasFeature("output-base64") {
		return nil, fmt.Errorf("%w: raw output (this agent sends output as text only)", ErrUnsupported)
	}
	if o.RetainOutput > 0 && !s.hasFeature("retained-output") {
		return nil, fmt.Errorf("%w: retained output (this agent keeps none)", ErrUnsupported)
	}
	if o.StdinStream != nil && !s.hasFeature("stdin-end") {
		return nil, fmt.Errorf("%w: streamed stdin (this agent's input cannot end)", ErrUnsupported)
	}
	oc, counts := s.inst.(OOMCounter)
	var before uint64
	if counts {
		before = oc.OOMKills()
	}
	o.Timeout = s.ExecTimeout(o)
	type outcome struct {
		res *wire.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.agent().Exec(ctx, command, o)
		done <- outcome{res, err}
	}()
	deadline := time.NewTimer(o.Timeout + s.grace)
	defer deadline.Stop()
	var got outcome
	select {
	case got = <-done:
	case <-deadline.C:
		// Nothing is asked of the agent, which did not keep its own
		// deadline: the teardown ends the command, and the stream with it.
		s.DumpState(context.WithoutCancel(ctx))
		err := &DeadlineError{Timeout: o.Timeout, Grace: s.grace, Teardown: s.Destroy(context.WithoutCancel(ctx))}
		if err.Teardown == nil {
			select { // the stream ends with the sandbox
			case <-done:
			case <-time.After(5 * time.Second):
			}
		}
		return nil, err
	}
	res, err := got.res, got.err
	if res == nil {
		return nil, err
	}
	out := &Result{Result: *res}
	if counts {
		// The kernel counts a kill before the process is reaped, so a
		// SIGKILL reported after the count rose is an OOM kill.
		if after := oc.OOMKills(); after > before {
			out.OOMKills = int64(after - before)
		}
		out.OOMKilled = res.Signal == "SIGKILL" && out.OOMKills > 0
	} else if res.OOMKills > 0 {
		// The agent counted them (a host that cannot).
		out.OOMKilled = res.Signal == "SIGKILL"
	}
	return out, err
}

// HasFeature reports whether the sandbox's agent announced feature name.
func (s *Sandbox) HasFeature(name string) bool { return s.hasFeature(name) }

func (s *Sandbox) hasFeature(name string) bool {
	for _, f := range s.admitted().Features {
		if f == name {
			return true
		}
	}
	return false
}

// ReadFile reads a file inside the sandbox's read roots.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if s.hasFeature("raw-files") {
		var b bytes.Buffer
		_, err := s.agent().Download(ctx, path, 0, 0, &b)
		return b.Bytes(), err
	}
	return s.agent().ReadFile(ctx, path)
}

// WriteFile atomically writes a file inside the sandbox's write roots.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte) error {
	if err := s.live(); err != nil {
		return err
	}
	if s.hasFeature("raw-files") {
		return s.agent().Upload(ctx, path, bytes.NewReader(data), int64(len(data)))
	}
	return s.agent().WriteFile(ctx, path, data)
}

// Download streams a file to w in constant memory; with length > 0, only
// that many bytes from offset. It needs an agent with raw file routes.
func (s *Sandbox) Download(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error) {
	if err := s.live(); err != nil {
		return 0, err
	}
	if !s.hasFeature("raw-files") {
		return 0, fmt.Errorf("%w: this sandbox's agent has no raw file routes", ErrUnsupported)
	}
	return s.agent().Download(ctx, path, offset, length, w)
}

// Upload streams size bytes from r into a file, replacing it atomically.
func (s *Sandbox) Upload(ctx context.Context, path string, r io.Reader, size int64) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.hasFeature("raw-files") {
		return fmt.Errorf("%w: this sandbox's agent has no raw file routes", ErrUnsupported)
	}
	return s.agent().Upload(ctx, path, r, size)
}

// BootID is the agent's boot identity as admitted (empty for an agent
// without the "activity" feature).
func (s *Sandbox) BootID() string { return s.admitted().BootID }

// Activity is what the sandbox is doing, as its agent and its egress
// boundary see it.
type Activity struct {
	// Agent is the agent's own report; nil if its agent does not offer one.
	Agent *wire.Activity
	// EgressOpen counts open egress connections; EgressLast is when the
	// last one ended (zero if none has, or the tier has no boundary).
	EgressOpen int
	EgressLast time.Time
}

// Activity asks the agent what it is doing and reads the egress boundary's
// counters. An agent that answers with a different boot identity than the
// one admitted is an error: the sandbox is not the one created.
func (s *Sandbox) Activity(ctx context.Context) (*Activity, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	h, err := s.agent().Health(ctx)
	if err != nil {
		return nil, err
	}
	if s.admitted().BootID != "" && h.BootID != s.admitted().BootID {
		return nil, fmt.Errorf("%w: the agent restarted (boot id %q, admitted %q)", ErrAgent, h.BootID, s.admitted().BootID)
	}
	a := &Activity{Agent: h.Activity}
	if s.egress != nil {
		a.EgressOpen, a.EgressLast = s.egress.Activity()
	}
	return a, nil
}

// Sweep asks every backend that can adopt to tear down its sandboxes that
// keep does not hold (a daemon's start, after adopting what it recorded).
func (p *Provider) Sweep(ctx context.Context, keep []*Sandbox) error {
	var errs []error
	for _, name := range p.Tiers() {
		b, _ := p.Backend(name)
		ad, ok := b.(Adopter)
		if !ok {
			continue
		}
		var insts []Instance
		for _, s := range keep {
			if inst := unwrap(s.inst); inst != nil && s.Tier() == name {
				insts = append(insts, inst)
			}
		}
		err := ad.Sweep(ctx, insts)
		if len(insts) == 0 && errors.Is(err, ErrUnavailable) {
			// A tier this host does not offer (no engine, no cluster
			// configured) holds none of the kept sandboxes; what it may
			// hold from before is swept once it is back.
			continue
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Destroy tears the sandbox down and returns once teardown is confirmed.
// Concurrent calls share one teardown; after a failed one, Destroy may be
// called again. Destroying a destroyed sandbox returns nil.
func (s *Sandbox) Destroy(ctx context.Context) error { return s.destroy(ctx, false) }

// Discard is Destroy for a sandbox whose work is over, as a one-shot
// run's is once its command has ended: where its tier can (Discarder),
// every process in it is killed at once, without the agent first
// stopping them with SIGTERM and a grace period and syncing the file
// systems, which a one-shot run would wait for.
func (s *Sandbox) Discard(ctx context.Context) error { return s.destroy(ctx, true) }

func (s *Sandbox) destroy(ctx context.Context, discard bool) error {
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return nil
	}
	t := s.teardown
	if t == nil {
		t = &teardown{done: make(chan struct{})}
		s.teardown = t
		go func() {
			s.agent().Close()
			if s.egress != nil {
				s.egress.Close()
			}
			var err error
			if d, ok := s.inst.(Discarder); ok && discard {
				err = d.Discard(context.WithoutCancel(ctx))
			} else {
				err = s.inst.Destroy(context.WithoutCancel(ctx))
			}
			s.mu.Lock()
			t.err = err
			if err == nil {
				s.destroyed = true
				if s.releaseImage != nil {
					s.releaseImage()
				}
			}
			s.teardown = nil
			s.mu.Unlock()
			close(t.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrTeardown, ctx.Err())
	}
}
