package sandbox

import (
	"errors"
	"fmt"
)

// Sentinel errors of the SDK. Backends wrap them with %w; callers test them
// with errors.Is.
var (
	// ErrUnknownTier: no backend is registered under the requested name.
	ErrUnknownTier = errors.New("unknown sandbox tier")
	// ErrUnsupported: the tier cannot enforce something the spec asks for.
	// Create refuses rather than silently ignoring the request.
	ErrUnsupported = errors.New("not supported by this tier")
	// ErrUnavailable: the tier's host prerequisites are missing.
	ErrUnavailable = errors.New("tier unavailable on this host")
	// ErrDestroyed: the sandbox has been destroyed.
	ErrDestroyed = errors.New("sandbox destroyed")
	// ErrAgent: the sandbox's agent failed to start or was not admitted.
	ErrAgent = errors.New("sandbox agent failed")
	// ErrTeardown: teardown could not be confirmed; the sandbox may still
	// hold resources and Destroy should be retried.
	ErrTeardown = errors.New("sandbox teardown not confirmed")
	// ErrInvalidSpec: the spec is malformed.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrDeadline: the host's deadline for a command passed with no end
	// reported, and the host tore the sandbox down (see DeadlineError).
	ErrDeadline = errors.New("sandbox torn down at the host's deadline")
)

// UnsupportedError names what a tier refused.
type UnsupportedError struct {
	Tier string
	What string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("tier %q cannot enforce %s; choose a tier that can, or drop the request", e.Tier, e.What)
}

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }
