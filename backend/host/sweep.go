package host

import (
	"errors"
	"os"
	"strings"
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
