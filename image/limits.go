package image

import "errors"

// Limits bound what one image may unpack to (a layer bomb stops here).
type Limits struct {
	MaxBytes   int64 // total file bytes across all layers
	MaxEntries int   // total tar entries across all layers
}

// DefaultLimits: 16 GiB and a million entries.
var DefaultLimits = Limits{MaxBytes: 16 << 30, MaxEntries: 1 << 20}

// ErrHostileLayer marks a layer that tried to write outside its root or
// past the limits.
var ErrHostileLayer = errors.New("hostile image layer")
