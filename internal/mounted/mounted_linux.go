package mounted

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func detachBelow(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	points, err := below(dir)
	if err != nil {
		return err
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
	if left, err := below(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("still mounted below %s: %v (%v)", dir, left, err)
	}
	return nil
}

// below lists the mount points under dir in this process's mount table.
func below(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if p := Unescape(fields[4]); strings.HasPrefix(p, dir+string(filepath.Separator)) {
			points = append(points, p)
		}
	}
	return points, sc.Err()
}

// Unescape undoes /proc/*/mountinfo's octal escapes of a path (\040 for
// a space, and of tab, newline and backslash).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
