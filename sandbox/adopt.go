package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// Adoption is what a later process needs to take a sandbox over: its
// identity, spec, agent token and boot identity, and the backend's own
// description of the instance. It holds the agent token: keep it where
// only the host's owner can read it.
type Adoption struct {
	ID     string          `json:"id"`
	Tier   string          `json:"tier"`
	Token  string          `json:"token"`
	BootID string          `json:"bootId"`
	State  json.RawMessage `json:"state"`
	// Suspended: the sandbox was suspended (Sandbox.Suspend); it is taken
	// back suspended, its agent not asked, until it resumes.
	Suspended bool `json:"suspended,omitempty"`
	// Disk: the sandbox's persistent workspace is a disk of the
	// provider's (WithDisks); State is then the provider's, naming the
	// disk and the backend's state of its running instance.
	Disk bool `json:"disk,omitempty"`
}

// Persist describes the sandbox for a later Provider.Adopt; it fails for a
// tier whose sandboxes cannot outlive their creator.
func (s *Sandbox) Persist() (*Adoption, error) {
	ps, ok := s.inst.(Persistent)
	if !ok {
		return nil, &UnsupportedError{Tier: s.Tier(), What: "sandboxes that outlive their creator"}
	}
	st, err := ps.State()
	if err != nil {
		return nil, err
	}
	_, onDisk := s.inst.(*diskInstance)
	return &Adoption{ID: s.id, Tier: s.Tier(), Token: s.agent().Endpoint().Token, BootID: s.admitted().BootID, State: st, Suspended: s.Suspended(), Disk: onDisk}, nil
}

// Adopt takes over a sandbox a previous process created (see Persist): the
// instance is taken back from its backend, thawed if it was paused, and its
// agent admitted only if it answers with the recorded boot identity; the
// egress boundary is attached again under spec's policy. A sandbox that
// cannot be adopted is torn down as far as it exists.
func (p *Provider) Adopt(ctx context.Context, a Adoption, spec Spec) (*Sandbox, error) {
	b, err := p.Backend(a.Tier)
	if err != nil {
		return nil, err
	}
	ad, ok := b.(Adopter)
	if !ok && !a.Disk {
		return nil, &UnsupportedError{Tier: a.Tier, What: "adopting sandboxes"}
	}
	if a.Disk {
		if p.disks == "" {
			return nil, fmt.Errorf("%w: the sandbox's persistent workspace is a disk, and this provider keeps none (WithDisks)", ErrUnavailable)
		}
		return p.adoptOnDisk(ctx, b, a, spec)
	}
	inst, err := ad.Adopt(ctx, a.State, a.Token)
	if err != nil {
		return nil, err
	}
	spec.Tier = b.Name()
	if a.Suspended {
		// Taken back as it was left: its compute given back (again, where
		// a suspension was cut short), its agent not asked until it
		// resumes.
		sp, ok := inst.(Suspender)
		if !ok {
			return nil, errors.Join(&UnsupportedError{Tier: a.Tier, What: "suspended sandboxes"}, inst.Destroy(context.WithoutCancel(ctx)))
		}
		if err := sp.Suspend(ctx); err != nil {
			return nil, errors.Join(err, inst.Destroy(context.WithoutCancel(ctx)))
		}
		s := newSandbox(a.ID, spec, inst, client.New(inst.Endpoint()), &wire.Health{BootID: a.BootID})
		s.grace, s.suspended = p.grace(), true
		return s, nil
	}
	return p.takeBack(ctx, a, spec, inst)
}

// takeBack makes an adopted running instance sandbox a.ID again (see
// readmit), its egress boundary attached under spec's policy. One that
// cannot be is torn down.
func (p *Provider) takeBack(ctx context.Context, a Adoption, spec Spec, inst Instance) (*Sandbox, error) {
	fail := func(err error) (*Sandbox, error) {
		return nil, errors.Join(err, inst.Destroy(context.WithoutCancel(ctx)))
	}
	release := func() {}
	var err error
	if spec.Image != "" {
		if _, release, _, err = p.rootFromImage(ctx, spec.Image); err != nil {
			return fail(fmt.Errorf("image %s: %w", spec.Image, err))
		}
	}
	c, health, err := readmit(ctx, a, inst)
	if err != nil {
		release()
		return fail(err)
	}
	s := newSandbox(a.ID, spec, inst, c, health)
	s.releaseImage, s.grace = release, p.grace()
	if err := p.attachEgress(ctx, s, inst, spec); err != nil {
		c.Close()
		release()
		return fail(err)
	}
	return s, nil
}

// readmit thaws an adopted instance if it was paused and admits its agent
// only if it answers with the recorded boot identity.
func readmit(ctx context.Context, a Adoption, inst Instance) (*client.Client, *wire.Health, error) {
	if pz, ok := inst.(Pauser); ok && pz.CanPause() {
		if err := pz.Resume(ctx); err != nil {
			return nil, nil, err
		}
	}
	c := client.New(inst.Endpoint())
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	health, err := c.Admit(actx)
	cancel()
	if err == nil && a.BootID != "" && health.BootID != a.BootID {
		err = fmt.Errorf("the agent restarted (boot id %q, recorded %q)", health.BootID, a.BootID)
	}
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	return c, health, nil
}
