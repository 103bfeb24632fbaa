// Package procid identifies a process across pid reuse: a pid and its
// start time (from /proc) name one process for as long as it lives.
package procid

import (
	"os"
	"strconv"
	"strings"
)

// StartTime is pid's start time in clock ticks since boot, or "" when no
// such process lives. A zombie counts as dead: on hosts whose PID 1 is not
// an init, nobody reaps orphans.
func StartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return f[19] // field 22 of stat
}

// Alive reports whether the process pid that started at start still runs.
func Alive(pid int, start string) bool {
	return pid > 0 && start != "" && StartTime(pid) == start
}

// Self names this process as "PID START", for Named.
func Self() string {
	pid := os.Getpid()
	return strconv.Itoa(pid) + " " + StartTime(pid)
}

// Named reports whether the process a Self string names still runs.
func Named(s string) bool {
	p, start, _ := strings.Cut(strings.TrimSpace(s), " ")
	pid, err := strconv.Atoi(p)
	return err == nil && Alive(pid, start)
}
