package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/procid"
)

// Unkept lists the directories under stateDir whose names start with
// prefix and that kept does not hold: a tier's instances a later process
// has no record of, for its Sweep. A state directory not made yet holds
// none.
func Unkept(stateDir, prefix string, kept map[string]bool) ([]string, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && !kept[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Stale lists the directories under stateDir whose names start with
// prefix and whose record (a file of theirs, "PID START" as procid.Named
// reads it) names a process that no longer runs: what a creator killed
// before it could tear its instances down left behind. A directory without
// its record yet is an instance still starting, unless it is older than
// recordWait.
func Stale(stateDir, prefix, record string) []string {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(stateDir, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, record)); err == nil {
			if procid.Named(string(b)) {
				continue
			}
		} else if st, err := os.Stat(dir); err != nil || time.Since(st.ModTime()) < recordWait {
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// recordWait is how long an instance's directory may go without its
// record: its creator writes it milliseconds after making the directory.
const recordWait = time.Minute
