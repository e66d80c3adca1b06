package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/codecage/codecage/internal/httpapi"
)

// openapiCmd prints the REST API's OpenAPI 3.1 document, for client
// generators and linters, without starting a server.
func openapiCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("openapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	cfg, ok := loadConfig(cf, stderr, "openapi")
	if !ok {
		return exitUsage
	}
	doc := httpapi.Document(cfg, cfg.APIKeys != "" || cfg.APIKeysFile != "")
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		fmt.Fprintln(stderr, "codecage openapi:", err)
		return exitInternal
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return exitOK
}
