package agent

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"golang.org/x/sys/unix"
)

// watchMask: what is reported, on directories only. Each watch is added
// through /proc/self/fd/N, the magic link of a descriptor the jail
// checked, which inotify follows to exactly that directory (so no
// IN_DONT_FOLLOW, which would watch the link itself).
const watchMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watcher follows one directory (and, recursive, those below it).
type watcher struct {
	ino       int
	root      int            // the watched directory, open (O_PATH)
	dirs      map[int]string // watch descriptor -> path relative to the root
	recursive bool
	full      bool // MaxWatches reached: deeper directories are not followed
}

// handleWatch streams changes under a directory (wire.RouteWatch).
func (s *Server) handleWatch(w httpd.ResponseWriter, r *httpd.Request) {
	q := r.URL.Query()
	fd, _, err := jailedOpen(q.Get("path"), s.cfg.Workspace, s.cfg.ReadRoots, unix.O_DIRECTORY)
	if err != nil {
		fsError(w, err)
		return
	}
	ino, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		writeJSON(w, httpd.StatusInternalServerError, wire.ErrorBody{Error: wire.CodeInternal, Message: "inotify: " + err.Error()})
		return
	}
	f := os.NewFile(uintptr(ino), "inotify")
	defer f.Close()
	defer unix.Close(fd)
	wt := &watcher{ino: ino, root: fd, dirs: map[int]string{}, recursive: q.Get("recursive") == "1" || q.Get("recursive") == "true"}
	if err := wt.add(fd, ""); err != nil {
		fsError(w, err)
		return
	}
	if wt.recursive {
		wt.below(fd, "", nil)
	}

	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(httpd.StatusOK)
	out := newEventStream(w)
	out.send(wire.WatchEvent{Type: wire.WatchReady})

	// The reader of inotify never waits on the caller: what does not fit
	// the queue is dropped and said so once.
	queue := make(chan wire.WatchEvent, wire.WatchQueue)
	overflow := make(chan struct{}, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		wt.read(f, func(ev wire.WatchEvent) {
			select {
			case queue <- ev:
			default:
				select {
				case overflow <- struct{}{}:
				default:
				}
			}
		})
	}()
	beat := time.NewTicker(s.cfg.StdioHeartbeatInterval)
	defer beat.Stop()
	// The watch holds the directory open, which keeps inotify from saying
	// it was removed until it is closed: its link count tells.
	gone := time.NewTicker(250 * time.Millisecond)
	defer gone.Stop()
	for {
		select {
		case <-gone.C:
			if s.watchedGone(fd, q.Get("path")) {
				for len(queue) > 0 {
					out.send(<-queue)
				}
				out.send(wire.WatchEvent{Type: wire.WatchRemove, Dir: true})
				return
			}
		case ev := <-queue:
			out.send(ev)
		case <-overflow:
			out.send(wire.WatchEvent{Type: wire.WatchOverflow})
		case <-ended:
			for len(queue) > 0 {
				out.send(<-queue)
			}
			return
		case <-beat.C:
			out.heartbeat([]byte("{\"type\":\"heartbeat\"}\n"))
		case <-r.Context().Done():
			return
		}
		if out.isBroken() {
			return
		}
	}
}

// watchedGone reports whether the watched directory, open at fd, is gone:
// its link count is zero, or its path (resolved as the watch resolved it)
// leads nowhere or elsewhere. (A file system whose link counts lag its
// removals, as a volume gVisor reaches through its gofer, still says so
// by the path.)
func (s *Server) watchedGone(fd int, path string) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return false
	}
	if st.Nlink == 0 {
		return true
	}
	now, _, err := jailedOpen(path, s.cfg.Workspace, s.cfg.ReadRoots, unix.O_DIRECTORY)
	if err != nil {
		return errors.Is(err, unix.ENOENT) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
	}
	defer unix.Close(now)
	var nst unix.Stat_t
	if unix.Fstat(now, &nst) != nil {
		return false
	}
	return nst.Dev != st.Dev || nst.Ino != st.Ino
}

// add watches the directory open at fd (an O_PATH descriptor checked to be
// inside the roots), known as rel.
func (wt *watcher) add(fd int, rel string) error {
	if len(wt.dirs) >= wire.MaxWatches {
		wt.full = true
		return nil
	}
	wd, err := unix.InotifyAddWatch(wt.ino, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		return err
	}
	wt.dirs[wd] = rel
	return nil
}

// below watches the directories under the one open at fd, opening each
// relative to its parent without following a symlink, so that nothing
// outside the tree is ever watched; emit, when set, reports each entry
// found (a directory made before its watch was in place).
func (wt *watcher) below(fd int, rel string, emit func(wire.WatchEvent)) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(dfd), rel)
	ents, _ := d.ReadDir(-1)
	d.Close()
	for _, e := range ents {
		p := filepath.Join(rel, e.Name())
		if emit != nil {
			emit(wire.WatchEvent{Type: wire.WatchCreate, Path: p, Dir: e.IsDir()})
		}
		if !e.IsDir() || wt.full {
			continue
		}
		cfd, err := unix.Openat(fd, e.Name(), unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if wt.add(cfd, p) == nil {
			wt.below(cfd, p, emit)
		}
		unix.Close(cfd)
	}
}

// read turns inotify's records into events until the watched root goes
// or the descriptor closes.
func (wt *watcher) read(f *os.File, emit func(wire.WatchEvent)) {
	buf := make([]byte, 64<<10)
	type half struct {
		path string
		at   time.Time
		// batches: reads finished since it came; its second half, if it
		// comes, is in the first read after its own.
		batches int
	}
	moves := map[uint32]half{} // rename cookie -> old path
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			cookie := binary.NativeEndian.Uint32(buf[off+8:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen]), "\x00")
			off += unix.SizeofInotifyEvent + nameLen
			if mask&unix.IN_Q_OVERFLOW != 0 {
				emit(wire.WatchEvent{Type: wire.WatchOverflow})
				continue
			}
			dir, ok := wt.dirs[wd]
			if !ok {
				continue
			}
			p := filepath.Join(dir, name)
			isDir := mask&unix.IN_ISDIR != 0
			switch {
			case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
				delete(wt.dirs, wd)
				if dir == "" {
					emit(wire.WatchEvent{Type: wire.WatchRemove, Dir: true})
					return // the watched directory itself is gone
				}
			case mask&unix.IN_IGNORED != 0:
				delete(wt.dirs, wd)
			case mask&unix.IN_CREATE != 0:
				emit(wire.WatchEvent{Type: wire.WatchCreate, Path: p, Dir: isDir})
				if isDir && wt.recursive {
					wt.follow(wd, name, p, emit)
				}
			case mask&unix.IN_CLOSE_WRITE != 0:
				emit(wire.WatchEvent{Type: wire.WatchWrite, Path: p})
			case mask&unix.IN_DELETE != 0:
				emit(wire.WatchEvent{Type: wire.WatchRemove, Path: p, Dir: isDir})
			case mask&unix.IN_MOVED_FROM != 0:
				moves[cookie] = half{path: p, at: time.Now()}
			case mask&unix.IN_MOVED_TO != 0:
				from := moves[cookie].path
				delete(moves, cookie)
				emit(wire.WatchEvent{Type: wire.WatchRename, Path: p, From: from, Dir: isDir})
				if isDir && wt.recursive {
					wt.follow(wd, name, p, emit)
				}
			}
		}
		// A move out of the tree shows only its first half. A move within
		// it may have its second half still to come (a read can end
		// between the two): it is given a moment to, and the read after
		// its own. Halves that have had both are flushed even while more
		// comes, so that steady activity cannot hold them back. (A moment
		// is counted in the watcher's own waits, not by the clock alone:
		// a starved virtual machine's clock jumps past it at once.)
		for c, h := range moves {
			if h.batches > 0 && time.Since(h.at) > moveGrace {
				emit(wire.WatchEvent{Type: wire.WatchRemove, Path: h.path})
				delete(moves, c)
				continue
			}
			h.batches++
			moves[c] = h
		}
		if len(moves) > 0 && readableWithin(f, moveGrace) {
			continue
		}
		for c, h := range moves {
			emit(wire.WatchEvent{Type: wire.WatchRemove, Path: h.path})
			delete(moves, c)
		}
	}
}

// moveGrace is how long a rename's first half waits for its second.
const moveGrace = 20 * time.Millisecond

// readableWithin says whether f has something to read within d, waited
// for in ten slices: a clock that jumps past d (a virtual machine whose
// vCPU the host starved) cuts one slice short, not the whole wait.
func readableWithin(f *os.File, d time.Duration) bool {
	for range 10 {
		if readable(f, d/10) {
			return true
		}
	}
	return false
}

// readable says whether f has something to read within d.
func readable(f *os.File, d time.Duration) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, int(d/time.Millisecond))
		ok = n > 0 && fds[0].Revents&unix.POLLIN != 0
	})
	return ok
}

// follow watches a directory that appeared under the one watch wd follows
// (and what it already holds, reported as created).
func (wt *watcher) follow(wd int, name, rel string, emit func(wire.WatchEvent)) {
	// Opened from the root's descriptor, component by component, never
	// following a symlink: a directory swapped for a link meanwhile is not
	// followed out of the tree.
	fd, err := unix.Openat(wt.root, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	for _, comp := range strings.Split(rel, string(filepath.Separator)) {
		next, err := unix.Openat(fd, comp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return
		}
		fd = next
	}
	defer unix.Close(fd)
	if wt.add(fd, rel) == nil {
		wt.below(fd, rel, emit)
	}
}
