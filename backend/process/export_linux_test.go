package process

// NoClone makes b start its inits as where clonexec is unavailable (other
// architectures): through the spawner or by a fork, so that those paths
// are tested here too.
func NoClone(b *Backend) { b.noClone = true }

// HelperRoots is how many of b's sandboxes had their root built by a
// helper while their init started.
func HelperRoots(b *Backend) int64 { return b.helperRoots.Load() }
