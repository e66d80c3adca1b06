package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// readSource reads the code from --code, a file, or stdin, at most limit
// bytes: it reads one byte more to tell a full input from a larger one,
// so an endless input (/dev/zero) costs limit+1 bytes, not all memory.
func readSource(code string, args []string, stdin io.Reader, limit int64) (string, error) {
	switch {
	case code != "" && len(args) > 0:
		return "", errors.New("give the code with --code or as a file, not both")
	case code != "":
		return checkSourceSize(int64(len(code)), limit, code)
	case len(args) > 1:
		return "", errors.New("only one file may be given")
	case len(args) == 1 && args[0] != "-":
		f, err := os.Open(args[0])
		if err != nil {
			return "", err
		}
		defer f.Close()
		return readLimited(f, limit)
	}
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return "", errors.New("no code given: use --code, a file, or pipe the code to standard input")
	}
	return readLimited(stdin, limit)
}

func readLimited(r io.Reader, limit int64) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return "", err
	}
	return checkSourceSize(int64(len(b)), limit, string(b))
}

func checkSourceSize(n, limit int64, src string) (string, error) {
	if n > limit {
		return "", fmt.Errorf("the code is larger than the limit of %d bytes (SANDBOX_MAX_CODE_SIZE, --max-code-size)", limit)
	}
	return src, nil
}
