package jail

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
)

// A script (#!) among the programs asked for runs only when its
// interpreter is one of them too: the kernel executes the interpreter, so
// placing it for the script would let anything run it. A script whose
// interpreter is /bin/sh (which, like many of Debian's small tools) needs
// nothing more, the shell being in every command jail.

// maxShebang bounds the #! line read (the kernel reads at most 256 bytes).
const maxShebang = 256

// script is a program found to be a script, and the interpreter its #!
// line names, as the sandbox sees it.
type script struct{ name, path, interp string }

// shebang returns the interpreter the #! line of the file at real names;
// ok is false for a file that does not start with #!.
func (r *resolver) shebang(real string) (interp string, ok bool, err error) {
	f, err := r.t.Open(real)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	buf := make([]byte, maxShebang)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", false, err
	}
	line, found := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !found {
		return "", false, nil
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	fields := bytes.Fields(line)
	if len(fields) == 0 || !filepath.IsAbs(string(fields[0])) {
		return "", true, fmt.Errorf("%s is a script without an absolute interpreter on its #! line", real)
	}
	return string(fields[0]), true, nil
}

// checkScripts refuses a script whose interpreter is not among the
// programs resolved (call once every name is in).
func (r *resolver) checkScripts() error {
	for _, s := range r.scripts {
		real, err := r.path(s.interp)
		if err != nil {
			return fmt.Errorf("program %s: %s is a script run by %s, which is not there: %v", s.name, s.path, s.interp, err)
		}
		if !r.exec[real] {
			return fmt.Errorf("program %s: %s is a script run by %s, which is not among the allowed programs: allow that program too, or leave %s out", s.name, s.path, s.interp, s.name)
		}
	}
	return nil
}
