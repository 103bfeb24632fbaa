//go:build linux && !amd64 && !arm64

package sandboxinit

import "golang.org/x/sys/unix"

// compiledFilter: the baseline has no filter for this architecture
// (buildFilter refuses).
var compiledFilter []unix.SockFilter
