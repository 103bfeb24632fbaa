//go:build linux && (amd64 || arm64)

package startnofile

// prlimit is prlimit64(0, RLIMIT_NOFILE, NULL, &saved); it returns the
// system call's result (0, or a negative errno).
func prlimit() (ret int64)

func init() { read = prlimit() == 0 }
