package wsfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A watch is one inotify instance of the server's, on directories of the
// workspace the sandboxed code controls. Each directory is opened beneath
// the watched one, by descriptor, never through a symlink or across a
// mount, and watched through /proc/self/fd (the exact directory opened,
// not whatever a path names by then). The work and memory are bounded by
// WatchLimits: directories watched at once, events kept for the reader,
// and the rate of following new directories. Closing the watch closes
// its instance, which drops all its kernel watches at once.

// watchMask is every change a watch reports; IN_ONLYDIR refuses anything
// but a directory, IN_MASK_CREATE a directory this instance watches
// already (reached twice by a move).
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_MASK_CREATE

// maxWatchPath bounds the relative path of a watched directory: a deeper
// one is not watched (and the watch says so), so a node's path is short.
const maxWatchPath = 4096

// Watcher watches a directory of a workspace (and, recursive, its
// subdirectories) until Close.
type Watcher struct {
	ino       *os.File // the inotify instance (non-blocking: Close wakes its reader)
	root      int      // O_PATH descriptor of the watched directory
	recursive bool
	lim       WatchLimits

	// Owned by the reader goroutine (and by Watch before it starts).
	nodes   map[int32]*wnode
	top     *wnode
	tokens  float64
	refill  time.Time
	pending map[uint32]*wnode // directories moved away in this read, by cookie

	mu      sync.Mutex
	queue   []WatchEvent
	dropped int
	reasons []string // of the overflow not yet reported
	ended   bool
	err     error
	wake    chan struct{}
	done    chan struct{} // the reader ended
	closing sync.Once
}

// wnode is a watched directory: where it is in the tree, by its parent.
type wnode struct {
	wd       int32
	parent   *wnode
	name     string
	children map[string]*wnode
}

// path is n's path relative to the watched directory ("" for it).
func (n *wnode) path() string {
	if n.parent == nil {
		return ""
	}
	var parts []string
	for m := n; m.parent != nil; m = m.parent {
		parts = append(parts, m.name)
	}
	var b strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(parts[i])
	}
	return b.String()
}

// Watch starts watching the directory rel (symlinks followed only while
// they stay inside; below it, none is followed). A recursive watch of a
// tree of more than lim.Dirs directories is refused (ErrWatchTooBig).
func (r *Root) Watch(rel string, recursive bool, lim WatchLimits) (*Watcher, error) {
	lim.Dirs, lim.Events, lim.Scan = max(lim.Dirs, 1), max(lim.Events, 1), max(lim.Scan, 1)
	fd, err := openAt(r.fd, rel, unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
	if err == unix.ENOTDIR {
		return nil, pathErr("watch", rel, ErrNotDir)
	}
	if err != nil {
		return nil, pathErr("watch", rel, err)
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, pathErr("watch", rel, fmt.Errorf("inotify: %w", err))
	}
	w := &Watcher{ino: os.NewFile(uintptr(ifd), "inotify"), root: fd, recursive: recursive, lim: lim,
		nodes: map[int32]*wnode{}, tokens: float64(4 * lim.Scan), refill: time.Now(),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	fail := func(err error) (*Watcher, error) {
		w.ino.Close()
		unix.Close(fd)
		return nil, pathErr("watch", rel, err)
	}
	top, err := w.addWatch(nil, "")
	if err != nil {
		return fail(err)
	}
	w.top = top
	if recursive {
		// The tree as it is must fit: a watch that starts incomplete would
		// only say so in its first event.
		if reason := w.scan(top, false); reason != "" {
			return fail(fmt.Errorf("%w: %s", ErrWatchTooBig, reason))
		}
	}
	go w.read()
	return w, nil
}

// addWatch watches the directory name of parent (the watched directory
// itself when parent is nil); nil, nil: it is watched already.
func (w *Watcher) addWatch(parent *wnode, name string) (*wnode, error) {
	rel := "."
	if parent != nil {
		if p := parent.path(); p != "" {
			rel = p + "/" + name
		} else {
			rel = name
		}
		if len(rel) > maxWatchPath {
			return nil, fmt.Errorf("%w: a directory's path is over %d bytes", ErrWatchTooBig, maxWatchPath)
		}
		if len(w.nodes) >= w.lim.Dirs {
			return nil, fmt.Errorf("%w: more than %d directories", ErrWatchTooBig, w.lim.Dirs)
		}
	}
	// No symlink on the way, no mount crossed: a link the code swapped in
	// for a directory is not followed.
	fd, err := openAt(w.root, rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var wd int
	cerr := w.control(func(ifd int) {
		wd, err = unix.InotifyAddWatch(ifd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	})
	if cerr != nil {
		return nil, cerr
	}
	if err == unix.EEXIST {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inotify_add_watch: %w", err)
	}
	n := &wnode{wd: int32(wd), parent: parent, name: name}
	w.nodes[n.wd] = n
	if parent != nil {
		if parent.children == nil {
			parent.children = map[string]*wnode{}
		}
		parent.children[name] = n
	}
	return n, nil
}

// control runs f with the instance's descriptor, which cannot be closed
// (and its number reused by another watch's) meanwhile.
func (w *Watcher) control(f func(ifd int)) error {
	rc, err := w.ino.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { f(int(fd)) })
}

// spend takes n units of the scanning budget; false: none left.
func (w *Watcher) spend(n float64) bool {
	now := time.Now()
	w.tokens = min(w.tokens+now.Sub(w.refill).Seconds()*float64(w.lim.Scan), float64(4*w.lim.Scan))
	w.refill = now
	if w.tokens < n {
		return false
	}
	w.tokens -= n
	return true
}

// scan watches the directories below n, breadth first; it returns why it
// stopped short ("" when it did not). announce: n is new in the tree, and
// what it holds was made before its watch: each entry is a create.
func (w *Watcher) scan(n *wnode, announce bool) string {
	queue := []*wnode{n}
	var buf [8 << 10]byte
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		rel := d.path()
		if rel == "" {
			rel = "."
		}
		fd, err := openAt(w.root, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
		if err != nil {
			continue // gone, or swapped for a link: not followed
		}
		reason := w.scanDir(fd, d, &buf, &queue, announce)
		unix.Close(fd)
		if reason != "" {
			return reason
		}
	}
	return ""
}

// scanDir watches the subdirectories of d, open at fd, queuing them.
func (w *Watcher) scanDir(fd int, d *wnode, buf *[8 << 10]byte, queue *[]*wnode, announce bool) string {
	const perUnit = 256 // entries read for one unit of the budget
	read := 0
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return ""
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen <= 19 || off+reclen > n {
				break
			}
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			if i := indexZero(name); i >= 0 {
				name = name[:i]
			}
			off += reclen
			read++
			if read%perUnit == 0 && !w.spend(1) {
				return "the tree's new directories came faster than the watch could follow"
			}
			nm := string(name)
			if nm == "." || nm == ".." {
				continue
			}
			if announce {
				w.emit(d.path()+"/"+nm, OpCreate)
			}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, nm, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
					continue
				}
			} else if typ != unix.DT_DIR {
				continue
			}
			if !w.spend(1) {
				return "the tree's new directories came faster than the watch could follow"
			}
			child, err := w.addWatch(d, nm)
			if errors.Is(err, ErrWatchTooBig) {
				return strings.TrimPrefix(err.Error(), ErrWatchTooBig.Error()+": ")
			}
			if child != nil {
				*queue = append(*queue, child)
			}
		}
	}
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// read turns the instance's events into the watch's until it is closed or
// the watched directory goes.
func (w *Watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.ino.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				err = nil
			}
			w.end(err)
			return
		}
		w.pending = map[uint32]*wnode{}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event: wd, mask, cookie, len, then len bytes of name.
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			cookie := binary.NativeEndian.Uint32(buf[off+8:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : min(n, off+unix.SizeofInotifyEvent+size)]
			if i := indexZero(name); i >= 0 {
				name = name[:i]
			}
			off += unix.SizeofInotifyEvent + size
			if !w.handle(wd, mask, cookie, string(name)) {
				w.end(nil)
				return
			}
		}
		// A directory moved away with no move in beside it in this read
		// left the tree (or its arrival comes later, as a new one).
		for _, d := range w.pending {
			w.drop(d)
		}
	}
}

// handle turns one inotify event into the watch's; false: the watch is
// over (its directory is gone).
func (w *Watcher) handle(wd int32, mask, cookie uint32, name string) bool {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.overflow("the kernel's event queue overflowed")
		return true
	}
	n := w.nodes[wd]
	if n == nil {
		return true // a watch removed meanwhile
	}
	if mask&unix.IN_IGNORED != 0 {
		w.forget(n)
		return n != w.top
	}
	if n.parent == nil && n != w.top {
		return true // moved away in this read: where it is is not known
	}
	isDir := mask&unix.IN_ISDIR != 0
	rel := name
	if p := n.path(); p != "" {
		rel = p
		if name != "" {
			rel = p + "/" + name
		}
	}
	if name == "" {
		// An event of a watched directory itself: its parent's watch
		// reports it too, with its name; only the top one's are news.
		if n != w.top {
			return true
		}
		rel = "."
		switch {
		case mask&unix.IN_DELETE_SELF != 0:
			w.emit(rel, OpRemove)
		case mask&unix.IN_MOVE_SELF != 0:
			w.emit(rel, OpRename)
		case mask&unix.IN_ATTRIB != 0:
			w.emit(rel, OpChmod)
		}
		return mask&unix.IN_UNMOUNT == 0
	}
	switch {
	case mask&unix.IN_CREATE != 0:
		if isDir && w.recursive {
			w.follow(n, name) // watched before anyone hears of it
		}
		w.emit(rel, OpCreate)
	case mask&unix.IN_MOVED_TO != 0:
		if isDir && w.recursive {
			if d := w.pending[cookie]; d != nil {
				// Moved within the tree: the same watches, a new place.
				delete(w.pending, cookie)
				w.relink(d, n, name)
			} else {
				w.follow(n, name)
			}
		}
		w.emit(rel, OpCreate)
	case mask&unix.IN_MOVED_FROM != 0:
		if d := n.children[name]; d != nil && isDir {
			delete(n.children, name)
			d.parent = nil
			w.pending[cookie] = d
		}
		w.emit(rel, OpRename)
	case mask&unix.IN_DELETE != 0:
		w.emit(rel, OpRemove)
	case mask&unix.IN_MODIFY != 0:
		w.emit(rel, OpWrite)
	case mask&unix.IN_ATTRIB != 0:
		w.emit(rel, OpChmod)
	}
	return true
}

// follow watches a directory new in the tree, and the tree below it.
func (w *Watcher) follow(parent *wnode, name string) {
	if !w.spend(1) {
		w.overflow("the tree's new directories came faster than the watch could follow")
		return
	}
	d, err := w.addWatch(parent, name)
	switch {
	case errors.Is(err, ErrWatchTooBig):
		w.overflow("not watched: " + strings.TrimPrefix(err.Error(), ErrWatchTooBig.Error()+": "))
	case d != nil:
		if reason := w.scan(d, true); reason != "" {
			w.overflow("not watched: " + reason)
		}
	}
}

// relink puts a directory moved within the tree at its new place.
func (w *Watcher) relink(d, parent *wnode, name string) {
	if old := parent.children[name]; old != nil && old != d {
		w.drop(old)
	}
	d.parent, d.name = parent, name
	if parent.children == nil {
		parent.children = map[string]*wnode{}
	}
	parent.children[name] = d
	if len(d.path()) > maxWatchPath {
		w.drop(d)
		w.overflow("not watched: a directory's path is over 4096 bytes")
	}
}

// drop stops watching d and the tree below it.
func (w *Watcher) drop(d *wnode) {
	stack := []*wnode{d}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range n.children {
			stack = append(stack, c)
		}
		_ = w.control(func(ifd int) { _, _ = unix.InotifyRmWatch(ifd, uint32(n.wd)) })
		w.forget(n)
	}
}

// forget removes n from the tree (the kernel dropped its watch, or drop did).
func (w *Watcher) forget(n *wnode) {
	if w.nodes[n.wd] == n {
		delete(w.nodes, n.wd)
	}
	if n.parent != nil && n.parent.children[n.name] == n {
		delete(n.parent.children, n.name)
	}
}

func (w *Watcher) emit(name string, op Op) {
	w.mu.Lock()
	if len(w.queue) >= w.lim.Events {
		w.dropped++
	} else {
		w.queue = append(w.queue, WatchEvent{Name: strings.ToValidUTF8(name, "\uFFFD"), Op: op})
	}
	w.mu.Unlock()
	w.signal()
}

func (w *Watcher) overflow(reason string) {
	w.mu.Lock()
	if len(w.reasons) < 4 && (len(w.reasons) == 0 || w.reasons[len(w.reasons)-1] != reason) {
		w.reasons = append(w.reasons, reason)
	}
	w.mu.Unlock()
	w.signal()
}

func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Watcher) end(err error) {
	w.mu.Lock()
	w.ended, w.err = true, err
	w.mu.Unlock()
	w.signal()
}

// Ready is signaled when Next may have something (it may also not).
func (w *Watcher) Ready() <-chan struct{} { return w.wake }

// Take returns the events kept so far, and an OpOverflow last when some
// were dropped; at the end (closed, or the watched directory went) with
// nothing left, it returns io.EOF, or what ended it.
func (w *Watcher) Take() ([]WatchEvent, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.queue
	w.queue = nil
	if w.dropped > 0 || len(w.reasons) > 0 {
		reason := strings.Join(w.reasons, "; ")
		if w.dropped > 0 {
			reason = strings.TrimPrefix(reason+fmt.Sprintf("; %d events were dropped: the reader fell more than %d behind", w.dropped, w.lim.Events), "; ")
		}
		out = append(out, WatchEvent{Op: OpOverflow, Dropped: w.dropped, Reason: reason})
		w.dropped, w.reasons = 0, nil
	}
	if len(out) == 0 && w.ended {
		if w.err != nil {
			return nil, w.err
		}
		return nil, io.EOF
	}
	return out, nil
}

// Close stops the watch and frees its inotify instance; it waits for the
// reader to end.
func (w *Watcher) Close() error {
	w.closing.Do(func() {
		w.ino.Close()
		<-w.done
		unix.Close(w.root)
	})
	return nil
}
