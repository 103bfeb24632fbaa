package testutil

import (
	"os"
	"sync"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/mounted"
)

var stateDirs sync.Map // testing.TB -> string

// StateDir is a tier's state directory of tb's own (the same one each time
// tb asks), under the temporary directory with a short name (unix sockets
// live in it) and traversable by the sandboxes' unprivileged users. When
// tb ends, whatever a runtime left mounted below it is detached and the
// directory removed.
func StateDir(tb testing.TB) string {
	if d, ok := stateDirs.Load(tb); ok {
		return d.(string)
	}
	d, err := os.MkdirTemp("", "cordon-state-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		tb.Fatal(err)
	}
	stateDirs.Store(tb, d)
	tb.Cleanup(func() {
		stateDirs.Delete(tb)
		if err := mounted.Remove(d); err != nil {
			tb.Errorf("removing the state directory: %v", err)
		}
	})
	return d
}
