//go:build !cgo

package sandboxinit

// cgoBuild: see cgo_linux.go.
const cgoBuild = false
