package process

// NoClone makes b start its inits as where clonexec is unavailable (other
// architectures, or tracing not allowed): through the spawner or by a fork,
// so that those paths are tested here too.
func NoClone(b *Backend) { b.noClone = true }
