// Package sandboxtest is the test kit for what drives sandbox backends:
// FakeBackend, a backend that needs no root and can be told to fail.
package sandboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// FakeBackend is a sandbox.Backend for testing the daemon's life cycles
// (reaper, pools, quotas, keys, restarts) without root. Each sandbox is a
// real cordon-agent started as an unconfined child (the passthrough tier),
// so exec and files work; the fake counts starts and destroys, can be told
// to fail or hang either, and keeps its instances across servers in one
// test process: its instances are Persistent and it is an Adopter, so a
// second server takes them back as a restarted daemon takes back the
// process tier's. It isolates nothing and enforces no limit, though it
// claims the limits (FakeConfig.Limits) so that specs carrying them pass.
type FakeBackend struct {
	inner *passthrough.Backend
	cfg   FakeConfig

	mu                       sync.Mutex
	live                     map[string]*FakeInstance
	next                     int
	starts, destroys         int
	startErr, destroyErr     error
	sweepErr                 error
	hangStart, hangDestroy   bool
	startCalls, destroyCalls int
}

// FakeConfig configures a FakeBackend.
type FakeConfig struct {
	// Name is the tier name it answers to: "process" when empty, so that
	// a server's default tier reaches it.
	Name string
	// AgentPath is the cordon-agent binary (testutil.BuildAgent).
	AgentPath string
	// StateDir holds each agent's private directory (t.TempDir()).
	StateDir string
	// Limits: claim every limit (without enforcing any).
	Limits bool
}

var (
	_ sandbox.Backend    = (*FakeBackend)(nil)
	_ sandbox.Adopter    = (*FakeBackend)(nil)
	_ sandbox.Instance   = (*FakeInstance)(nil)
	_ sandbox.Persistent = (*FakeInstance)(nil)
)

// NewFake returns a FakeBackend.
func NewFake(cfg FakeConfig) *FakeBackend {
	if cfg.Name == "" {
		cfg.Name = "process"
	}
	return &FakeBackend{
		inner: passthrough.New(passthrough.Config{AgentPath: cfg.AgentPath, StateDir: cfg.StateDir}),
		cfg:   cfg,
		live:  map[string]*FakeInstance{},
	}
}

func (f *FakeBackend) Name() string { return f.cfg.Name }

func (f *FakeBackend) Capabilities() sandbox.Capabilities {
	c := sandbox.Capabilities{Isolated: true}
	if f.cfg.Limits {
		c.MemoryLimit, c.PidsLimit, c.CPULimit, c.DiskLimit = true, true, true, true
	}
	return c
}

func (f *FakeBackend) Probe(ctx context.Context) error { return f.inner.Probe(ctx) }

// FailStarts makes every later Start fail with err (nil: succeed again).
func (f *FakeBackend) FailStarts(err error) { f.mu.Lock(); f.startErr = err; f.mu.Unlock() }

// HangStarts makes every later Start wait for its context to end.
func (f *FakeBackend) HangStarts(on bool) { f.mu.Lock(); f.hangStart = on; f.mu.Unlock() }

// FailSweeps makes every later Sweep fail with err (nil: succeed again).
func (f *FakeBackend) FailSweeps(err error) { f.mu.Lock(); f.sweepErr = err; f.mu.Unlock() }

// FailDestroys makes every later Destroy fail with err, wrapped in
// sandbox.ErrTeardown, the sandbox left running (nil: succeed again).
func (f *FakeBackend) FailDestroys(err error) { f.mu.Lock(); f.destroyErr = err; f.mu.Unlock() }

// HangDestroys makes every later Destroy wait for its context to end.
func (f *FakeBackend) HangDestroys(on bool) { f.mu.Lock(); f.hangDestroy = on; f.mu.Unlock() }

// Counts are what the fake has done.
type Counts struct {
	// StartCalls and DestroyCalls count every call; Starts and Destroys
	// only those that succeeded. Live is how many sandboxes run now.
	StartCalls, Starts, DestroyCalls, Destroys, Live int
}

// Counts returns what the fake has done so far.
func (f *FakeBackend) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Counts{f.startCalls, f.starts, f.destroyCalls, f.destroys, len(f.live)}
}

func (f *FakeBackend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	f.mu.Lock()
	f.startCalls++
	err, hang := f.startErr, f.hangStart
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	// The passthrough tier refuses limits; the fake claimed them.
	l.Spec.Limits = sandbox.Limits{}
	inner, err := f.inner.Start(ctx, l)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	inst := &FakeInstance{Instance: inner, f: f, id: fmt.Sprintf("fake-%d", f.next)}
	f.live[inst.id] = inst
	f.starts++
	return inst, nil
}

// Adopt takes back a live instance by its State; one that was killed (or
// never was) is an error wrapping sandbox.ErrAgent, as a dead sandbox is
// on a real tier.
func (f *FakeBackend) Adopt(ctx context.Context, state []byte, token string) (sandbox.Instance, error) {
	var st struct{ ID string }
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%w: fake state %q: %v", sandbox.ErrAgent, state, err)
	}
	f.mu.Lock()
	inst, ok := f.live[st.ID]
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: fake sandbox %s is gone", sandbox.ErrAgent, st.ID)
	}
	select {
	case <-inst.Exited():
		return nil, fmt.Errorf("%w: fake sandbox %s has exited", sandbox.ErrAgent, st.ID)
	default:
	}
	return inst, nil
}

// Sweep destroys every live instance keep does not hold.
func (f *FakeBackend) Sweep(ctx context.Context, keep []sandbox.Instance) error {
	f.mu.Lock()
	err := f.sweepErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	held := map[sandbox.Instance]bool{}
	for _, k := range keep {
		held[k] = true
	}
	f.mu.Lock()
	var gone []*FakeInstance
	for _, inst := range f.live {
		if !held[inst] {
			gone = append(gone, inst)
		}
	}
	f.mu.Unlock()
	for _, inst := range gone {
		if err := inst.Destroy(ctx); err != nil {
			return err
		}
	}
	return nil
}

// FakeInstance is one of a FakeBackend's sandboxes.
type FakeInstance struct {
	sandbox.Instance
	f  *FakeBackend
	id string
}

// ID names the instance in the fake.
func (i *FakeInstance) ID() string { return i.id }

// State names the instance for Adopt.
func (i *FakeInstance) State() ([]byte, error) { return json.Marshal(struct{ ID string }{i.id}) }

// Kill ends the instance's agent as a crash would: no destroy is counted,
// and an Adopt of it fails.
func (i *FakeInstance) Kill(ctx context.Context) error {
	err := i.Instance.Destroy(ctx)
	i.f.mu.Lock()
	delete(i.f.live, i.id)
	i.f.mu.Unlock()
	return err
}

// Destroy tears the instance down, unless the fake was told to fail or
// hang destroys.
func (i *FakeInstance) Destroy(ctx context.Context) error {
	f := i.f
	f.mu.Lock()
	f.destroyCalls++
	err, hang := f.destroyErr, f.hangDestroy
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return fmt.Errorf("%w: %w", sandbox.ErrTeardown, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("%w: %w", sandbox.ErrTeardown, err)
	}
	if err := i.Instance.Destroy(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	if _, ok := f.live[i.id]; ok {
		delete(f.live, i.id)
		f.destroys++
	}
	f.mu.Unlock()
	return nil
}
