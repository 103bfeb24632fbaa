package wire

// File watch (feature "watch"): GET /watch?path=P[&recursive=1] streams
// NDJSON WatchEvents for the directory P (inside the read roots) as they
// happen, until the caller goes away or P is removed (a "removed" event
// for P itself, path "", then the end). Recursive watches the directories
// below too, as they appear (at most MaxWatches in all). When events come
// faster than the caller reads, those that do not fit the bounded queue
// are dropped and one "overflow" event says so.
const RouteWatch = "/watch"

// Watch event types.
const (
	WatchCreate   = "create"
	WatchWrite    = "write"
	WatchRemove   = "remove"
	WatchRename   = "rename" // Path is the new name, From the old (when seen)
	WatchOverflow = "overflow"
	WatchReady    = "ready" // the watch is in place: every later change is reported
)

// MaxWatches bounds the directories one recursive watch follows, and
// WatchQueue the events held for a slow reader.
const (
	MaxWatches = 8192
	WatchQueue = 4096
)

// WatchEvent is one change, its Path relative to the watched directory.
type WatchEvent struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
	From string `json:"from,omitempty"`
	Dir  bool   `json:"dir,omitempty"`
}
