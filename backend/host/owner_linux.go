package host

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/procid"
)

// ownerFile, in a sandbox's directory, names the process that made it
// (procid.Self), unless the sandbox is detached (it outlives its maker).
const ownerFile = "owner"

// MarkOwner records in a sandbox's directory that this process made it,
// for the sweep of a later process (Orphans).
func MarkOwner(dir string) error {
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(procid.Self()), 0o600)
}

// Orphans are the sandbox directories (named cordon-…) under stateDir
// whose maker is gone: killed before it could tear them down. A directory
// without an owner is a detached sandbox's, or one whose maker died before
// it recorded itself: with noOwnerAge above zero, such a directory older
// than that counts too (one younger may be a create under way).
func Orphans(stateDir string, noOwnerAge time.Duration) []string {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "cordon-") {
			continue
		}
		dir := filepath.Join(stateDir, e.Name())
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		switch {
		case err == nil && procid.Named(string(owner)):
			continue
		case err != nil:
			if noOwnerAge <= 0 {
				continue
			}
			if st, err := os.Stat(dir); err != nil || time.Since(st.ModTime()) < noOwnerAge {
				continue
			}
		}
		out = append(out, dir)
	}
	return out
}
