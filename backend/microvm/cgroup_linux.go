package microvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The VMM of a sandbox with a CPU limit runs in a cgroup of its own whose
// CPU bandwidth is the limit: the guest's vCPUs together get that share
// of a host core's time.

const (
	cpuV1     = "/sys/fs/cgroup/cpu"
	unified   = "/sys/fs/cgroup"
	cgroupDir = "cordon-microvm"
	period    = 100000 // µs
)

// cpuRoot is the hierarchy CPU bandwidth is set in ("" where there is
// none), and whether it is cgroup v2's.
func cpuRoot() (string, bool) {
	if _, err := os.Stat(filepath.Join(cpuV1, "cpu.cfs_quota_us")); err == nil {
		return cpuV1, false
	}
	if b, err := os.ReadFile(filepath.Join(unified, "cgroup.controllers")); err == nil && strings.Contains(" "+string(b)+" ", " cpu ") {
		return unified, true
	}
	return "", false
}

// limitCPU puts pid in a new cgroup named id whose bandwidth is cpus
// cores, and returns the cgroup's directory (removeCgroup's).
func limitCPU(id string, pid int, cpus float64) (string, error) {
	root, v2 := cpuRoot()
	if root == "" {
		return "", errors.New("no cpu cgroup controller")
	}
	parent := filepath.Dir(cgroupOf(id))
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if v2 {
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return "", err
		}
	}
	dir := cgroupOf(id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	quota := strconv.FormatInt(int64(cpus*period), 10)
	var err error
	if v2 {
		err = os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(quota+" "+strconv.Itoa(period)), 0)
	} else {
		err = os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(quota), 0)
		}
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	}
	if err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("limit the VM's CPU: %w", err)
	}
	return dir, nil
}

// cgroupOf is where limitCPU makes VM id's cgroup ("" without a cpu
// controller).
func cgroupOf(id string) string {
	root, _ := cpuRoot()
	if root == "" {
		return ""
	}
	return filepath.Join(root, cgroupDir, id)
}

// removeCgroup removes a cgroup limitCPU made, once its VMM is gone.
func removeCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
