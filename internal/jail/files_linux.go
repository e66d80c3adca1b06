package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// sandboxFiles are the descriptors between the supervisor and one sandbox.
// Child ends are passed to the init and closed here once it has started.
type sandboxFiles struct {
	control, initControl *os.File // init config and reports
	controlDec           *json.Decoder
	controlRights        *rightsReader // the descriptors that came with controlDec's bytes
	channel, initChannel *os.File      // the program's channel
	stdout, stdoutW      *os.File
	stderr, stderrW      *os.File
	workspace            *os.File // detached mount of the host workspace, or nil
	workspacePath        string   // the workspace, when the init must open it
	forward, initForward *os.File // connections passed out of the sandbox
	stdin, stdinR        *os.File // the program's stdin pipe (Spec.Stdin), or nil
	// binds are detached mounts of Spec.Binds' host paths (nil where the
	// init must open the path itself, rootless).
	binds []*os.File
	// root holds what the init takes from Spec.Root (nil without one).
	root *rootSources
	// machineRoot is a detached mount of Spec.MachineRoot (or its path,
	// rootless), and machineRootFD its number in the init.
	machineRoot     *os.File
	machineRootPath string
	machineRootFD   int
}

func newSandboxFiles(workspace string, binds []Bind, forward, seqpacket, stdin bool) (f *sandboxFiles, err error) {
	f = &sandboxFiles{}
	defer func() {
		if err != nil {
			f.closeChildEnds()
			f.closeParentEnds()
		}
	}()
	if f.control, f.initControl, err = socketPair("control"); err != nil {
		return f, err
	}
	channelType := unix.SOCK_STREAM
	if seqpacket {
		channelType = unix.SOCK_SEQPACKET
	}
	if f.channel, f.initChannel, err = socketPairOf(channelType, "channel"); err != nil {
		return f, err
	}
	if forward {
		if f.forward, f.initForward, err = socketPair("forward"); err != nil {
			return f, err
		}
	}
	if f.stdout, f.stdoutW, err = os.Pipe(); err != nil {
		return f, err
	}
	if stdin {
		// The write end is non-blocking (os.Pipe): a write waits for the
		// program with a deadline, never forever.
		if f.stdinR, f.stdin, err = os.Pipe(); err != nil {
			return f, err
		}
	}
	if f.stderr, f.stderrW, err = os.Pipe(); err != nil {
		return f, err
	}
	if workspace != "" {
		// O_NOFOLLOW: the workspace itself must not be a symlink planted to
		// lead the bind mount elsewhere.
		fd, err := unix.Open(workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return f, fmt.Errorf("jail: open workspace %s: %w", workspace, err)
		}
		defer unix.Close(fd)
		// A detached clone of the directory's mount, made here in the host's
		// mount namespace, is what the init attaches: a descriptor alone
		// cannot be bound across mount namespaces, and a path could be
		// swapped for a symlink after this check (CVE-2024-42472).
		tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		switch {
		case err == nil:
			f.workspace = os.NewFile(uintptr(tree), workspace)
		case errors.Is(err, unix.EPERM):
			// Rootless: only the init, inside its own namespaces, may clone
			// mounts; it opens the path refusing every symlink.
			f.workspacePath = workspace
		default:
			return f, fmt.Errorf("jail: clone workspace mount: %w", err)
		}
	}
	for _, b := range binds {
		tree, err := cloneMount(b.Host)
		if err != nil {
			return f, err
		}
		f.binds = append(f.binds, tree)
	}
	return f, nil
}

// cloneMount returns a detached clone of the mount at path, made in the
// host's mount namespace (nil, rootless: the init then opens the path).
func cloneMount(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("jail: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	switch {
	case err == nil:
		return os.NewFile(uintptr(tree), path), nil
	case errors.Is(err, unix.EPERM):
		return nil, nil
	}
	return nil, fmt.Errorf("jail: clone mount %s: %w", path, err)
}

func socketPair(name string) (parent, child *os.File, err error) {
	return socketPairOf(unix.SOCK_STREAM, name)
}

func socketPairOf(typ int, name string) (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("jail: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name+"-child"), nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

func (f *sandboxFiles) closeChildEnds() {
	closeAll(f.initControl, f.initChannel, f.stdoutW, f.stderrW, f.workspace, f.initForward, f.stdinR)
	closeAll(f.binds...)
	if f.root != nil {
		closeAll(f.root.trees...)
	}
	closeAll(f.machineRoot)
}

// closeParentEnds closes what the supervisor keeps, except the channel,
// which belongs to whoever talks to the program (and the stdin pipe once
// the sandbox's input has taken it).
func (f *sandboxFiles) closeParentEnds() {
	closeAll(f.control, f.stdout, f.stderr, f.forward, f.stdin)
}
