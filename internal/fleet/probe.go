package fleet

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// probeSandbox starts /bin/true in a jail of its own, outside any fleet
// (the doctor has none), and says why it did not run cleanly.
func probeSandbox() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	sb, err := jail.Start(ctx, Work{Kind: Command, Argv: []string{"/bin/true"}, Stderr: &stderr}.Spec())
	if err != nil {
		return err
	}
	sb.Arm(ctx, 20*time.Second, 20*time.Second)
	exit := sb.Wait()
	if exit.ExitCode != 0 || exit.Limit != jail.LimitNone {
		msg := fmt.Sprintf("/bin/true in a sandbox exited %d", exit.ExitCode)
		if exit.Limit != jail.LimitNone {
			msg += ", limit " + string(exit.Limit)
		}
		if e := strings.TrimSpace(stderr.String()); e != "" {
			msg += ": " + e
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}
