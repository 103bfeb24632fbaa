// Package memcg reads what a memory cgroup holds, for the host (a
// sandbox's cgroup) and for the agent (its pod's, as the runtime mounts
// it).
package memcg

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// InUse is the memory charged to the cgroup whose directory is dir (v1's
// memory.usage_in_bytes, or v2's memory.current), less the inactive file
// cache the kernel can reclaim, as docker stats counts it; ok is false
// where dir holds neither.
func InUse(dir string) (n int64, ok bool) {
	used, inactive := "memory.usage_in_bytes", "total_inactive_file"
	b, err := os.ReadFile(filepath.Join(dir, used))
	if err != nil {
		used, inactive = "memory.current", "inactive_file"
		if b, err = os.ReadFile(filepath.Join(dir, used)); err != nil {
			return 0, false
		}
	}
	if n, err = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err != nil {
		return 0, false
	}
	return max(n-Fields(filepath.Join(dir, "memory.stat"), "")[inactive], 0), true
}

// Fields reads a file of "name value" lines, as memory.stat and
// /proc/meminfo are (sep, if any, ends each name there: ":").
func Fields(file, sep string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(file)
	if err != nil {
		return out
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil {
			out[string(bytes.TrimSuffix(f[0], []byte(sep)))] = v
		}
	}
	return out
}
