// Package vminit is cordon-agent as a microVM's init (the microvm tier):
// it brings the guest up around itself (its devices, its root disk, the
// sandbox's writable space), takes its configuration from the host over
// the virtio-serial port the host reaches it by, and then serves the
// agent's wire on that port, many connections multiplexed over it
// (yamux), the guest's egress riding the same port back to the host.
// The guest has no network interface: the port is its only way out.
package vminit

import "time"

// EnvMarker is set (from the kernel's command line, which hands unknown
// name=value words to init as its environment) when cordon-agent is a
// microVM's init.
const EnvMarker = "cordon_vm"

// PortName is the virtio-serial port the host reaches the agent by.
const PortName = "org.cordon.agent"

// The guest's disks are found by their serial numbers, not by the order
// the kernel names them in: RootSerial's is the root (read-only ext4),
// DiskSerial's, when the host attached one, a persistent workspace's ext4
// file system, which holds the writable directories in place of tmpfs.
const (
	RootSerial = "cordon-root"
	DiskSerial = "cordon-disk"
)

// ControlPortName is the virtio-serial port the host asks the guest's
// init things by, a line each: PowerOff (the init flushes every file
// system, a persistent workspace's disk among them, and powers the guest
// off), Freeze and Thaw (of a persistent workspace's disk, for a
// copy-on-write copy of it; each answered with a line, Done or an error),
// and Dump (the guest's state written to its console, for a host about to
// tear down a guest whose agent stopped answering; answered with Done
// once written).
const ControlPortName = "org.cordon.control"

// The control port's requests, and the answer that says one was done.
const (
	PowerOff = "poweroff\n"
	Freeze   = "freeze\n"
	Thaw     = "thaw\n"
	Dump     = "dump\n"
	Done     = "ok\n"
)

// FreezeBound is how long the guest holds a freeze its host never thaws.
const FreezeBound = 30 * time.Second

// Rejoin starts what a host that reconnects to the agent's port (a
// restarted daemon taking the VM back) writes before its multiplexer
// starts: Rejoin, a nonce of the host's and a newline. The guest's agent,
// which outlives its host's going, answers RejoinAck, the nonce and a
// newline, and then serves a new session on the port. The guest may not
// yet have seen the last host go when the next one writes: its old
// session then takes the request (and ends, on a byte no frame starts
// with), and the host, without an answer, asks again.
const (
	Rejoin    = 0x01
	RejoinAck = "cordon-vm-rejoined "
)

// Ready is the line the guest writes on the port once it is up, before
// the host sends its Config.
const Ready = "cordon-vm-ready v1\n"

// MaxConfigBytes bounds the configuration line.
const MaxConfigBytes = 1 << 20

// Config is what the host sends the guest, as one line of JSON, once the
// guest is Ready: the one way the token reaches it (never the kernel's
// command line, which the workload can read in /proc/cmdline).
type Config struct {
	// Token is the agent's credential.
	Token string `json:"token"`
	// Env is the agent's environment (host.AgentEnv), token excluded.
	Env []string `json:"env"`
	// Seed is mixed into the guest's random pool: two guests restored
	// from one snapshot must not share a random stream.
	Seed []byte `json:"seed"`
	// TimeNs is the host's clock, which the guest's takes.
	TimeNs int64 `json:"timeNs"`
	// UID is the workload's uid (and gid).
	UID int `json:"uid"`
	// ScratchBytes bounds the writable space (its directories share it as
	// on the container tiers); 0 leaves each tmpfs the kernel's default.
	ScratchBytes int64 `json:"scratchBytes,omitempty"`
	// DiskBytes, when set, says a persistent workspace's disk (serial
	// DiskSerial) of that size is attached: the writable directories are
	// bound from it, over their tmpfs, before the agent is configured.
	DiskBytes int64 `json:"diskBytes,omitempty"`
	// Pids, when set, is the workload's pids limit: its commands run in a
	// cgroup of their own holding that many, apart from the agent's
	// threads.
	Pids int64 `json:"pids,omitempty"`
	// Run, when set, makes the guest a test bed rather than a sandbox: no
	// agent starts; Run runs as the guest's root, with RunEnv, every
	// cgroup v2 controller delegated below the root, its output written
	// on the port and then ExitMarker and its exit status, and the guest
	// powers off. The files the host put in the initramfs under extra/
	// are at ExtraDir.
	Run    []string `json:"run,omitempty"`
	RunEnv []string `json:"runEnv,omitempty"`
}

// ExitMarker precedes a test run's exit status on the port.
const ExitMarker = "\ncordon-vm-exit "

// ExtraDir is where a test run finds the host's extra files.
const ExtraDir = "/run/extra"
