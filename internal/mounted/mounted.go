// Package mounted removes directories below which something may still be
// mounted: a runtime's state (runsc binds a network namespace into its
// root), a loop-mounted disk. Removing such a directory without detaching
// those first would fail at a busy mount point, or, worse, descend into
// what is mounted and delete it.
package mounted

import "os"

// Remove detaches every mount below dir, deepest first, and removes dir.
// If a mount below it remains, it removes nothing and says which.
func Remove(dir string) error {
	if err := detachBelow(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
