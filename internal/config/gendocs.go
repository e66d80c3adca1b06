//go:build ignore

// gendocs rewrites the configuration reference of docs/configuration.md
// from the settings table. Run it with `go generate ./internal/config`
// (the directive is in settings.go), which runs it in this directory.
package main

import (
	"fmt"
	"os"

	"github.com/codecage/codecage/internal/config"
)

const page = "../../docs/configuration.md"

func main() {
	old, err := os.ReadFile(page)
	if err != nil {
		fail(err)
	}
	updated, err := config.UpdateReference(string(old))
	if err != nil {
		fail(fmt.Errorf("%s: %w", page, err))
	}
	if updated == string(old) {
		return
	}
	if err := os.WriteFile(page, []byte(updated), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gendocs:", err)
	os.Exit(1)
}
