package sandboxinit

import "syscall"

// SpawnerArg selects the spawner: a small host-side helper that starts
// sandbox inits for a long-lived host (see internal/spawner). A fork that
// creates a user namespace cannot share the parent's memory (vfork), so it
// copies the parent's page tables and every page the parent then writes;
// its cost grows with the parent's memory, some 4.5 ms per 100 MB here. The
// spawner's memory stays a few megabytes however large its host grows.
const SpawnerArg = "spawner"

// SpawnerFD is the spawner's end of its SOCK_SEQPACKET socket to the host.
const SpawnerFD = 3

// Bounds of one spawn request: its JSON and the descriptors it carries
// (standard input, output and error first, then the extra files).
const (
	MaxSpawnRequestBytes = 256 << 10
	MaxSpawnFiles        = 64
)

// SpawnRequest asks the spawner to start one process. Files travel with it
// as SCM_RIGHTS, in order: they become descriptors 0, 1, 2, 3, ….
type SpawnRequest struct {
	Path string               `json:"path"`
	Args []string             `json:"args"`
	Env  []string             `json:"env"`
	Dir  string               `json:"dir"`
	Sys  *syscall.SysProcAttr `json:"sys"`
}

// SpawnMessage is what the spawner sends: the answer to a request (Pid, or
// Error; a pidfd for the process travels with a successful answer), or
// later the process's exit (Exited, with its raw wait status). Answers come
// in the order of the requests, and a process's answer always precedes its
// exit.
type SpawnMessage struct {
	Pid    int    `json:"pid,omitempty"`
	Error  string `json:"error,omitempty"`
	Exited int    `json:"exited,omitempty"`
	Status int    `json:"status,omitempty"`
}
