package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// specFlags are the flags that shape a sandbox, shared by run (daemonless)
// and create (through a daemon).
type specFlags struct {
	tier, rootfs, image, profile *string
	memory, disk, pids           *int64
	runtimeClass                 *string
	mountOwner                   *string
	cpus                         *float64
	user                         *int // -1 until --user is given
	allowAll                     *bool
	env                          envFlag
	allow                        egress.Rules
	layout                       sandbox.Layout
}

// addSpecFlags registers the flags on fs; withTier is false where the
// daemon picks the default tier.
func addSpecFlags(fs *flag.FlagSet, local bool) *specFlags {
	f := &specFlags{env: envFlag{}}
	def := ""
	if local {
		def = defaultTier
	}
	f.tier = fs.String("tier", def, "isolation tier")
	fs.Var(f.env, "env", "set an environment variable `K=V` (or K, taken from here); repeatable")
	f.memory = size(fs, "memory", 0, true, "memory limit, e.g. 512m or 2g (the command is OOM-killed past it; 0: none)")
	f.disk = size(fs, "disk", 0, true, "writable space (the workspace, /tmp, the home directory), e.g. 1g: memory, at most --memory (default or 0: half of it); full, it is ENOSPC")
	f.pids = fs.Int64("pids", 0, fmt.Sprintf("limit on processes and threads, with a reserve that keeps the agent alive (without one, the sandbox's tasks stop at %d, with no reserve)", baseline.DefaultTasks))
	f.cpus = fs.Float64("cpus", 0, "CPU limit in cores, e.g. 0.5")
	f.rootfs = fs.String("rootfs", "", "use `DIR` as the read-only root filesystem (default: the host's system directories)")
	f.runtimeClass = fs.String("runtime-class", "", "the kubernetes tier's RuntimeClass `NAME` for the sandbox's pod, e.g. gvisor (default: the daemon's --kube-runtime-class)")
	f.image = fs.String("image", "", "use an image's root filesystem: a cached `NAME` or digest (cordon image ls), or a registry reference, pulled if missing")
	f.user = new(int)
	*f.user = -1
	fs.Var(uidFlag{f.user}, "user", "run as this `UID` inside (default 1000)")
	fs.Var(&f.allow, "allow", "let the sandbox reach `HOST[:PORT,...]` (exact name, *.suffix, IP or CIDR; ports 80,443 when none); repeatable")
	f.profile = fs.String("egress-profile", "", "read an egress profile (JSON: {\"name\": ..., \"hosts\": [{\"host\": ..., \"ports\": [...]}]}) from `FILE`")
	f.allowAll = fs.Bool("allow-all-egress", false, "let the sandbox reach any public address (private, loopback, link-local and metadata addresses stay refused)")
	fs.Var(layoutFlag{&f.layout}, "mount", "bind a layout directory, `NAME=DIR`, at /mnt/user-data/NAME: outputs and scratch read-write; uploads, tool-results, transcripts and skills read-only; repeatable")
	f.mountOwner = fs.String("mount-owner", "", "the host user (and group) the sandbox writes read-write --mount directories as, `UID[:GID]` (default: each directory's owner; root is refused)")
	return f
}

// uidFlag is --user: a uid, 0 or more, once given. (An int flag with -1
// for "not given" showed "(default -1)" in the help and took a negative
// uid as not given.)
type uidFlag struct{ uid *int }

func (u uidFlag) String() string {
	if u.uid == nil || *u.uid < 0 {
		return ""
	}
	return strconv.Itoa(*u.uid)
}

func (u uidFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return fmt.Errorf("want a uid, a number from 0 to %d", math.MaxInt32)
	}
	*u.uid = int(n)
	return nil
}

// noOutputCap is the output bound cordon run and cordon exec ask for when
// --max-output is not given: none that a command reaches. Their output goes
// to a terminal, file or pipe, which the agent's default (100 MiB per
// stream, meant for callers that hold output in memory) would silently cut.
const noOutputCap = 1 << 62

// maxOutputFlag registers --max-output on fs and returns what reads it.
func maxOutputFlag(fs *flag.FlagSet) func() int64 {
	n := size(fs, "max-output", 0, true, "stop passing on each of stdout and stderr past this much, e.g. 10m, and say so (default or 0: no limit)")
	return func() int64 {
		if *n == 0 {
			return noOutputCap
		}
		return *n
	}
}

// spec is the sandbox the flags describe.
func (f *specFlags) spec() (sandbox.Spec, error) {
	spec := sandbox.Spec{Tier: *f.tier, Env: f.env, RootFS: *f.rootfs, Image: *f.image, Layout: f.layout, RuntimeClass: *f.runtimeClass,
		Limits: sandbox.Limits{Pids: *f.pids, CPUs: *f.cpus, MemoryBytes: *f.memory, DiskBytes: *f.disk}}
	if *f.user >= 0 {
		u := *f.user
		spec.User = &u
	}
	if *f.mountOwner != "" {
		o, err := parseOwner(*f.mountOwner)
		if err != nil {
			return spec, fmt.Errorf("--mount-owner: %v", err)
		}
		spec.Layout.Owner = o
	}
	policy, err := egressPolicy(f.allow, *f.profile, *f.allowAll)
	if err != nil {
		return spec, err
	}
	spec.Egress = policy
	return spec, nil
}

// parseOwner reads UID[:GID] (the group defaults to the uid).
func parseOwner(s string) (*sandbox.HostOwner, error) {
	u, g, hasGroup := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("%q: want UID or UID:GID", s)
	}
	gid := uid
	if hasGroup {
		if gid, err = strconv.ParseUint(g, 10, 32); err != nil {
			return nil, fmt.Errorf("%q: want UID or UID:GID", s)
		}
	}
	return &sandbox.HostOwner{UID: int(uid), GID: int(gid)}, nil
}
