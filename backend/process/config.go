package process

// Name is the tier name.
const Name = "process"

// Config configures the backend.
type Config struct {
	// AgentPath is the cordon-agent binary; empty means agentbin.Find.
	AgentPath string
	// StateDir holds each sandbox's host-side directory; empty means
	// /run/cordon when root, else $XDG_RUNTIME_DIR/cordon or a directory
	// under the system temp dir. It must belong to this user and be
	// writable by no other (see checkStateDir): creates are refused
	// otherwise.
	StateDir string
	// Prestart keeps this many sandbox inits started and waiting for
	// their configuration, so that a create skips the process start. Worth
	// it for hosts that create many sandboxes (a daemon); each waiting init
	// costs a few MiB. Zero starts every sandbox from scratch.
	Prestart int
	// Detached sandboxes outlive the process that created them (a daemon
	// that restarts takes them back with Adopt); otherwise a sandbox dies
	// with its creator.
	Detached bool
	// Spawner matters only where clonexec cannot start inits (an
	// architecture other than amd64); elsewhere this process starts them
	// itself without copying its memory. Where it matters, it starts every
	// sandbox init through a small helper process (started at the first
	// create, living as long as this one; see internal/spawner) rather
	// than by forking this process, whose fork costs more the more memory
	// it holds. Without it the first init is forked from this process (a
	// one-shot `cordon run` would pay the helper's start), and the helper,
	// started in the background at the second create, serves the creates
	// after it; and every create uses it once this process holds more than
	// SpawnerRSS resident.
	Spawner bool
	// Tasks caps the processes and threads of a sandbox whose spec sets no
	// pids limit (see baseline.DefaultTasks): 0 means that, negative means
	// no cap.
	Tasks int64
}
