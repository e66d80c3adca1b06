package secrets

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/vault"
	"golang.org/x/net/http/httpguts"
)

// headerSafe: a secret goes whole into a header value.
func headerSafe(v string) bool {
	return v != "" && httpguts.ValidHeaderFieldValue(v) && !strings.ContainsAny(v, "\r\n")
}

func errInvalid(why string) error { return fmt.Errorf("%w: %s", vault.ErrInvalid, why) }

func itoa(i int) string { return strconv.Itoa(i) }
