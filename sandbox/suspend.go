package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
)

// A sandbox's compute stopped and started again: in place (Pause, where
// the tier can freeze it) or given back, keeping a persistent workspace
// (Suspend, where the tier keeps one).

// ErrNotPausable: the sandbox's tier (or host) cannot pause it.
var ErrNotPausable = fmt.Errorf("%w: pause and resume", ErrUnsupported)

// CanPause reports whether Pause and Resume work for this sandbox.
func (s *Sandbox) CanPause() bool {
	p, ok := s.inst.(Pauser)
	return ok && p.CanPause()
}

// Pause stops every process of the sandbox in place, its agent included,
// until Resume: a paused sandbox answers nothing.
func (s *Sandbox) Pause(ctx context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.CanPause() {
		return ErrNotPausable
	}
	return s.inst.(Pauser).Pause(ctx)
}

// ErrSuspended: the sandbox is suspended; Resume starts it again.
var ErrSuspended = errors.New("the sandbox is suspended: resume it first")

// CanSuspend reports whether Suspend works for this sandbox: its tier
// can, and it was created with a persistent workspace.
func (s *Sandbox) CanSuspend() bool {
	_, ok := s.inst.(Suspender)
	return ok && s.Spec().PersistentWorkspace
}

// Suspended reports whether the sandbox is suspended.
func (s *Sandbox) Suspended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended
}

// Suspend stops everything the sandbox runs (quiesce), has its agent
// flush the workspace to its storage, and gives its compute back, keeping
// the workspace; Resume starts it again on the same workspace, with a new
// boot identity. Work on a suspended sandbox is refused with ErrSuspended.
func (s *Sandbox) Suspend(ctx context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.CanSuspend() {
		return &UnsupportedError{Tier: s.Tier(), What: "suspending a sandbox (a tier that keeps a persistent workspace, asked for at create)"}
	}
	if s.hasFeature("quiesce") {
		if err := s.Quiesce(ctx, 2*time.Second); err != nil {
			return fmt.Errorf("quiesce before suspending: %w", err)
		}
		if err := s.Flush(ctx, 30*time.Second); err != nil {
			return fmt.Errorf("flush before suspending: %w", err)
		}
	}
	return s.giveBack(ctx)
}

// giveBack marks the sandbox suspended and has its instance give its
// compute back. A failure leaves it suspended: nothing of it is to be
// trusted.
func (s *Sandbox) giveBack(ctx context.Context) error {
	s.mu.Lock()
	if s.suspended || s.destroyed {
		s.mu.Unlock()
		return s.live()
	}
	s.suspended = true
	s.mu.Unlock()
	if err := s.inst.(Suspender).Suspend(ctx); err != nil {
		return err
	}
	s.agent().Close()
	return nil
}

// OnDisk reports whether the sandbox's persistent workspace is a disk of
// its provider's (WithDisks): then it outlives every instance of the
// sandbox, and one that exits on its own can be given back (GiveBack)
// rather than lost.
func (s *Sandbox) OnDisk() bool {
	_, ok := s.inst.(*diskInstance)
	return ok
}

// GiveBack suspends a sandbox on a disk whose instance exited on its own
// (its agent killed, or crashed): what is left of the instance is torn
// down, the disk kept, and Resume starts it again. Nothing is asked of
// the agent, which is gone.
func (s *Sandbox) GiveBack(ctx context.Context) error {
	if !s.OnDisk() {
		return &UnsupportedError{Tier: s.Tier(), What: "giving a sandbox back without its agent (a persistent workspace on a disk)"}
	}
	return s.giveBack(ctx)
}

// resumeSuspended starts a suspended sandbox again: its instance wakes on
// the same workspace, and the new agent is admitted.
func (s *Sandbox) resumeSuspended(ctx context.Context) error {
	inst := s.inst.(Suspender)
	if err := inst.Wake(ctx); err != nil {
		return err
	}
	c := client.New(s.inst.Endpoint())
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	health, err := waitReady(rctx, c, s.inst)
	if err != nil {
		c.Close()
		// Given back again: the sandbox stays suspended, and may be
		// resumed once more.
		err = fmt.Errorf("%w: after resuming: %w", ErrAgent, err)
		if d := s.inst.Diagnostics(); d != "" {
			err = fmt.Errorf("%w; agent said: %s", err, d)
		}
		return errors.Join(err, inst.Suspend(context.WithoutCancel(ctx)))
	}
	s.client.Store(c)
	s.health.Store(health)
	s.mu.Lock()
	s.suspended = false
	s.mu.Unlock()
	return nil
}

// Resume thaws a paused sandbox, or starts a suspended one again.
func (s *Sandbox) Resume(ctx context.Context) error {
	if s.Suspended() {
		s.mu.Lock()
		destroyed := s.destroyed
		s.mu.Unlock()
		if destroyed {
			return ErrDestroyed
		}
		return s.resumeSuspended(ctx)
	}
	if err := s.live(); err != nil {
		return err
	}
	if !s.CanPause() {
		return ErrNotPausable
	}
	return s.inst.(Pauser).Resume(ctx)
}
