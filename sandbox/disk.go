package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/connq"
	"github.com/cordon-sandbox/cordon/internal/disk"
)

// Persistent workspaces on a host's own tiers: the provider keeps each
// such sandbox's writable space (workspace, home, /tmp, /var/tmp) in an
// ext4 image of its own under a directory it was given (WithDisks), whose
// size is the sandbox's disk quota. A backend that can mount one
// (Capabilities.Disk) starts its instance on it; suspending the sandbox
// destroys the instance and keeps the image; resuming starts a new
// instance, with a new boot identity, on the same image. A sandbox whose
// instance is found gone when a later process adopts it (the host
// rebooted, its processes were killed) is taken back suspended.

// DefaultDiskBytes is a persistent workspace's quota when its spec gives
// none and WithDisks names no other.
const DefaultDiskBytes = 4 << 30

// WithDisks keeps persistent workspaces for tiers whose backends mount a
// disk (Capabilities.Disk) as images under dir, each of its spec's
// Limits.DiskBytes or, without one, defaultBytes (0: DefaultDiskBytes).
// Without it, only tiers that keep persistent workspaces themselves
// (Capabilities.PersistentWorkspace) take them.
func WithDisks(dir string, defaultBytes int64) Option {
	return func(p *Provider) {
		p.disks, p.diskDefault = dir, defaultBytes
		if p.diskDefault <= 0 {
			p.diskDefault = DefaultDiskBytes
		}
	}
}

// ownDisks reports whether the provider keeps the persistent workspaces
// of a tier with caps.
func (p *Provider) ownDisks(caps Capabilities) bool {
	return p.disks != "" && caps.Disk && !caps.PersistentWorkspace
}

// Capabilities is what the named tier offers through this provider: its
// backend's, with persistent workspaces where the provider keeps them.
func (p *Provider) Capabilities(tier string) (Capabilities, error) {
	b, err := p.Backend(tier)
	if err != nil {
		return Capabilities{}, err
	}
	caps := b.Capabilities()
	if p.ownDisks(caps) {
		caps.PersistentWorkspace = true
	}
	return caps, nil
}

// diskImage is where sandbox id's image is kept.
func (p *Provider) diskImage(id string) string {
	return filepath.Join(p.disks, id+".img")
}

// startOnDisk starts a sandbox whose writable space is a new image.
func (p *Provider) startOnDisk(ctx context.Context, b Backend, spec Spec) (*Sandbox, error) {
	if err := p.disksReady(b); err != nil {
		return nil, err
	}
	id := newID()
	image := p.diskImage(id)
	size := spec.Limits.DiskBytes
	if size == 0 {
		size = p.diskDefault
	}
	// A quota past what the disks' file system holds could never be kept:
	// the image would fail its writes (I/O errors in the sandbox, not
	// ENOSPC) long before.
	if total, err := disk.Capacity(p.disks); err == nil && size > total {
		return nil, fmt.Errorf("%w: limits.diskBytes %d: more than the file system persistent workspaces live on holds (%d bytes)", ErrInvalidSpec, size, total)
	}
	if err := disk.Create(ctx, image, size); err != nil {
		return nil, fmt.Errorf("%w: the sandbox's disk: %v", ErrUnavailable, err)
	}
	return p.startOnImage(ctx, b, spec, id)
}

// disksReady says why b's sandboxes cannot have disks here, or nil.
func (p *Provider) disksReady(b Backend) error {
	if err := disk.Available(); err != nil {
		return &UnsupportedError{Tier: b.Name(), What: "a persistent workspace here (" + err.Error() + ")"}
	}
	if err := os.MkdirAll(p.disks, 0o700); err != nil {
		return fmt.Errorf("%w: the disks' directory: %v", ErrUnavailable, err)
	}
	return nil
}

// startOnImage starts sandbox id on its image, which it then owns: a
// start that fails removes it.
func (p *Provider) startOnImage(ctx context.Context, b Backend, spec Spec, id string) (*Sandbox, error) {
	image := p.diskImage(id)
	l, err := p.launch(spec)
	if err != nil {
		os.Remove(image)
		return nil, err
	}
	l.Disk = image
	di := &diskInstance{b: b, launch: l, image: image}
	if err := di.wake(ctx); err != nil {
		os.Remove(image)
		return nil, err
	}
	return p.admit(ctx, id, spec, di) // (a failed one's Destroy removes the image)
}

// DiskClone is a copy-on-write copy of a sandbox's disk (CloneDisks),
// for CreateOnDisk; Discard removes one not used.
type DiskClone struct {
	id    string
	image string
}

// Discard removes a clone no sandbox took.
func (c *DiskClone) Discard() { os.Remove(c.image) }

// CloneDisks makes n copy-on-write copies of the disk of s, a sandbox on
// a disk (OnDisk), each in time independent of its size: its file system
// is frozen for the copies (its writes wait), so each holds what a crash
// at that moment would leave, the journal replayed at its first mount.
// It fails with ErrUnsupported where the disks' file system has no
// reflinks (ext4); then a fork copies the files instead.
func (p *Provider) CloneDisks(ctx context.Context, s *Sandbox, n int) ([]*DiskClone, error) {
	d, ok := s.inst.(*diskInstance)
	if !ok {
		return nil, &UnsupportedError{Tier: s.Tier(), What: "copying a sandbox's disk (a persistent workspace on a disk)"}
	}
	if !disk.Reflinks(p.disks) {
		return nil, fmt.Errorf("%w: copy-on-write copies of a disk: %v", ErrUnsupported, disk.ErrNoReflinks)
	}
	freeze := func() (func() error, error) { return disk.Freeze(d.image) }
	if cur := d.current(); cur != nil && !disk.Mounted(d.image) {
		// A running instance holds its file system where this host cannot
		// freeze it (a VM's guest, with writes in its own cache): it
		// freezes it itself, or the disk is not copied.
		f, ok := cur.(DiskFreezer)
		if !ok {
			return nil, fmt.Errorf("%w: copy-on-write copies of a disk a running %s sandbox holds", ErrUnsupported, s.Tier())
		}
		freeze = func() (func() error, error) { return f.FreezeDisk(ctx) }
	}
	thaw, err := freeze()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAgent, err)
	}
	var out []*DiskClone
	for range n {
		c := &DiskClone{id: newID()}
		c.image = p.diskImage(c.id)
		if err = disk.Clone(d.image, c.image); err != nil {
			break
		}
		out = append(out, c)
	}
	if terr := thaw(); err == nil {
		err = terr
	}
	if err != nil {
		for _, c := range out {
			c.Discard()
		}
		return nil, fmt.Errorf("%w: copy the sandbox's disk: %v", ErrUnavailable, err)
	}
	return out, nil
}

// CreateOnDisk creates a sandbox of spec (a persistent workspace) on a
// clone of another's disk, which it takes: whatever happens, the clone is
// the new sandbox's or gone.
func (p *Provider) CreateOnDisk(ctx context.Context, spec Spec, c *DiskClone) (*Sandbox, error) {
	fail := func(err error) (*Sandbox, error) {
		c.Discard()
		return nil, err
	}
	spec.PersistentWorkspace = true
	if err := spec.Validate(); err != nil {
		return fail(err)
	}
	b, spec, caps, err := p.resolve(spec)
	if err != nil {
		return fail(err)
	}
	if !p.ownDisks(b.Capabilities()) {
		return fail(&UnsupportedError{Tier: spec.Tier, What: "a sandbox on a disk of the provider's"})
	}
	if err := caps.Check(spec.Tier, &spec); err != nil {
		return fail(err)
	}
	if err := p.disksReady(b); err != nil {
		return fail(err)
	}
	release := func() {}
	if spec.Image != "" && !b.Capabilities().EngineImages {
		if spec, release, err = p.imageRoot(ctx, spec); err != nil {
			return fail(err)
		}
	}
	s, err := p.startOnImage(ctx, b, spec, c.id)
	if err != nil {
		release()
		return nil, err
	}
	s.releaseImage = release
	return s, nil
}

// adoptOnDisk takes back a sandbox on a disk: its running instance from
// the backend, or, where that is gone or its agent is not the one
// recorded, the sandbox suspended on its disk.
func (p *Provider) adoptOnDisk(ctx context.Context, b Backend, a Adoption, spec Spec) (*Sandbox, error) {
	var st diskState
	if err := json.Unmarshal(a.State, &st); err != nil {
		return nil, fmt.Errorf("%w: the sandbox's recorded state: %v", ErrAgent, err)
	}
	image := p.diskImage(a.ID)
	if st.Image != image {
		return nil, fmt.Errorf("%w: the sandbox's disk %s is not this provider's (%s)", ErrAgent, st.Image, image)
	}
	if _, err := os.Stat(image); err != nil {
		return nil, fmt.Errorf("%w: the sandbox's disk: %v", ErrAgent, err)
	}
	spec.Tier = b.Name()
	release := func() {}
	launchSpec := spec
	if spec.Image != "" && !b.Capabilities().EngineImages {
		var err error
		if launchSpec, release, err = p.imageRoot(ctx, spec); err != nil {
			return nil, err
		}
	}
	l, err := p.launch(launchSpec)
	if err != nil {
		release()
		return nil, err
	}
	l.Token, l.Disk = a.Token, image
	di := &diskInstance{b: b, launch: l, image: image}
	c, health := client.New(di.Endpoint()), &wire.Health{BootID: a.BootID}
	suspended := true
	if ad, ok := b.(Adopter); ok && st.Instance != nil && !a.Suspended {
		if inst, err := ad.Adopt(ctx, st.Instance, a.Token); err == nil {
			if c2, h2, err := readmit(ctx, a, inst); err == nil {
				di.attach(inst)
				c.Close()
				c, health, suspended = c2, h2, false
			} else if err := inst.Destroy(context.WithoutCancel(ctx)); err != nil {
				release()
				return nil, err
			}
		} else if !errors.Is(err, ErrAgent) {
			release()
			return nil, err
		}
		// An instance that is gone left what the backend's Sweep removes.
	}
	s := newSandbox(a.ID, launchSpec, di, c, health)
	s.releaseImage, s.grace, s.suspended = release, p.grace(), suspended
	if err := p.attachEgress(ctx, s, di, spec); err != nil {
		c.Close()
		release()
		return nil, errors.Join(err, di.Suspend(context.WithoutCancel(ctx)))
	}
	return s, nil
}

// diskState is a disk-backed instance's description for Adopt: its
// image, and its backend's description of the running instance (none
// while suspended).
type diskState struct {
	Image    string          `json:"image"`
	Instance json.RawMessage `json:"instance,omitempty"`
}

// diskInstance is a sandbox on a disk of the provider's: a backend's
// instance while it runs, none while it is suspended.
type diskInstance struct {
	b      Backend
	launch Launch
	image  string
	relay  relayListener

	mu  sync.Mutex
	cur Instance // nil while suspended
	gen int      // counts instances, so an old one's exit is not the new one's
	// exited closes when the running instance exits on its own (not when
	// it is suspended or destroyed); each instance has its own.
	exited chan struct{}
	ep     client.Endpoint
	diag   string
}

var (
	_ Suspender  = (*diskInstance)(nil)
	_ Persistent = (*diskInstance)(nil)
	_ EgressPort = (*diskInstance)(nil)
	_ Pauser     = (*diskInstance)(nil)
	_ OOMCounter = (*diskInstance)(nil)
	_ Readier    = (*diskInstance)(nil)
)

// wake starts an instance on the disk.
func (d *diskInstance) wake(ctx context.Context) error {
	inst, err := d.b.Start(ctx, d.launch)
	if err != nil {
		return err
	}
	d.attach(inst)
	return nil
}

// attach makes inst the sandbox's running instance.
func (d *diskInstance) attach(inst Instance) {
	d.mu.Lock()
	d.cur, d.ep = inst, inst.Endpoint()
	d.gen++
	gen, exited := d.gen, make(chan struct{})
	d.exited = exited
	d.mu.Unlock()
	if port, ok := inst.(EgressPort); ok {
		d.relay.serve(port.EgressListener())
	}
	go func() {
		<-inst.Exited()
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen && d.cur != nil {
			d.diag = inst.Diagnostics()
			close(exited)
		}
	}()
}

func (d *diskInstance) current() Instance {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur
}

func (d *diskInstance) Endpoint() client.Endpoint {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		return d.cur.Endpoint()
	}
	return d.ep
}

// Exited is the running instance's: it closes if that exits on its own.
// While suspended, it is a channel that never closes.
func (d *diskInstance) Exited() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.exited == nil {
		d.exited = make(chan struct{})
	}
	return d.exited
}

func (d *diskInstance) Diagnostics() string {
	if cur := d.current(); cur != nil {
		return cur.Diagnostics()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.diag
}

// Suspend destroys the running instance; the image stays.
func (d *diskInstance) Suspend(ctx context.Context) error {
	d.mu.Lock()
	cur := d.cur
	d.gen++ // its exit now is the suspension's
	if cur != nil {
		d.exited = make(chan struct{})
	}
	d.mu.Unlock()
	if cur == nil {
		return nil
	}
	if err := cur.Destroy(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	d.cur = nil
	d.mu.Unlock()
	return nil
}

// Wake starts a new instance on the image.
func (d *diskInstance) Wake(ctx context.Context) error {
	if cur := d.current(); cur != nil {
		return fmt.Errorf("%w: the sandbox is running", ErrAgent)
	}
	return d.wake(ctx)
}

// Destroy tears the running instance down, then removes the image.
func (d *diskInstance) Destroy(ctx context.Context) error {
	if err := d.Suspend(ctx); err != nil {
		return err
	}
	d.relay.Close()
	if err := os.Remove(d.image); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: the sandbox's disk: %v", ErrTeardown, err)
	}
	return nil
}

func (d *diskInstance) State() ([]byte, error) {
	st := diskState{Image: d.image}
	if cur := d.current(); cur != nil {
		ps, ok := cur.(Persistent)
		if !ok {
			return nil, &UnsupportedError{Tier: d.b.Name(), What: "sandboxes that outlive their creator"}
		}
		b, err := ps.State()
		if err != nil {
			return nil, err
		}
		st.Instance = b
	}
	return json.Marshal(st)
}

func (d *diskInstance) EgressListener() net.Listener { return &d.relay }

func (d *diskInstance) CanPause() bool {
	p, ok := d.current().(Pauser)
	return ok && p.CanPause()
}

func (d *diskInstance) Pause(ctx context.Context) error {
	if p, ok := d.current().(Pauser); ok {
		return p.Pause(ctx)
	}
	return ErrNotPausable
}

func (d *diskInstance) Resume(ctx context.Context) error {
	if p, ok := d.current().(Pauser); ok {
		return p.Resume(ctx)
	}
	return ErrNotPausable
}

func (d *diskInstance) OOMKills() uint64 {
	if c, ok := d.current().(OOMCounter); ok {
		return c.OOMKills()
	}
	return 0
}

func (d *diskInstance) Dump(ctx context.Context) {
	if dm, ok := d.current().(Dumper); ok {
		dm.Dump(ctx)
	}
}

func (d *diskInstance) MemoryInUse() (int64, bool) {
	if g, ok := d.current().(MemoryGauge); ok {
		return g.MemoryInUse()
	}
	return 0, false
}

func (d *diskInstance) Ready() <-chan struct{} {
	if r, ok := d.current().(Readier); ok {
		return r.Ready()
	}
	return nil
}

// unwrap is the backend's own instance, for its Sweep: nil while the
// sandbox is suspended.
func unwrap(inst Instance) Instance {
	if d, ok := inst.(*diskInstance); ok {
		return d.current()
	}
	return inst
}

// relayListener is the egress listener of a sandbox whose instances come
// and go: it hands out the connections of whichever instance runs, so
// the egress proxy's binding, and its policy, outlive a suspension.
type relayListener struct {
	once   sync.Once
	q      *connq.Listener
	mu     sync.Mutex
	inner  net.Listener
	closed bool
}

func (r *relayListener) queue() *connq.Listener {
	r.once.Do(func() { r.q = connq.New(&net.UnixAddr{Name: "relay", Net: "unix"}) })
	return r.q
}

// serve relays ln's connections until ln is closed (its instance gone).
func (r *relayListener) serve(ln net.Listener) {
	q := r.queue()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ln.Close()
		return
	}
	r.inner = ln
	r.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				return
			}
			if !q.Push(c) {
				return
			}
		}
	}()
}

func (r *relayListener) Accept() (net.Conn, error) { return r.queue().Accept() }

func (r *relayListener) Close() error {
	q := r.queue()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		q.Close()
		if r.inner != nil {
			r.inner.Close()
		}
	}
	return nil
}

func (r *relayListener) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inner != nil {
		return r.inner.Addr()
	}
	return &net.UnixAddr{Name: "suspended", Net: "unix"}
}
