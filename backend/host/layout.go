package host

// LayoutMount is one layout directory to bind: Host at Target inside,
// its host user and group UID and GID the sandbox user inside. DirUID and
// DirGID are the directory's own owner, when UID and GID are not.
type LayoutMount struct {
	Host, Target   string
	ReadOnly       bool
	UID, GID       int
	DirUID, DirGID int
}
