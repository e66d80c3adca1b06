package packages

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/policy"
)

// Precheck answers what pip would answer less clearly, before a sandbox
// starts: the project does not exist, has no wheel, or its wheels are over
// the download limit. It says nothing ("") when it cannot tell.
func (p *Packages) Precheck(ctx context.Context, r policy.Requirement) (kind, msg string) {
	var files []string
	var sizes map[string]int64
	if p.cfg.PipFindLinks != "" {
		ents, err := os.ReadDir(p.cfg.PipFindLinks)
		if err != nil {
			return "", ""
		}
		sizes = map[string]int64{}
		for _, e := range ents {
			files = append(files, e.Name())
			if fi, err := e.Info(); err == nil {
				sizes[e.Name()] = fi.Size()
			}
		}
	} else {
		var ok bool
		if files, ok = indexFiles(ctx, p.cfg.PipIndexURL, r.Normalized); !ok {
			return "", ""
		}
		if files == nil {
			return InstallNotFound, fmt.Sprintf("no package %q on the index %s", r.Name, p.cfg.PipIndexURL)
		}
	}
	var wheels, sdists []string
	for _, f := range files {
		if name, _, ok := policy.ParseWheelFilename(f); ok && name == r.Normalized {
			wheels = append(wheels, f)
		} else if policy.IsSdistFilename(f) && sdistProject(f) == r.Normalized {
			sdists = append(sdists, f)
		}
	}
	where := p.cfg.PipIndexURL
	if p.cfg.PipFindLinks != "" {
		where = "the wheelhouse (SANDBOX_PIP_FIND_LINKS)"
	}
	switch {
	case len(wheels) == 0 && len(sdists) > 0:
		return InstallNoWheel, fmt.Sprintf("%s is published only as source (%s); only wheels are installed, since building from source runs the package's own code at install time", r.Name, sdists[0])
	case len(wheels) == 0:
		return InstallNotFound, fmt.Sprintf("no package %q in %s", r.Name, where)
	}
	if sizes != nil {
		small := 0
		for _, f := range wheels {
			if sizes[f] <= p.cfg.PipMaxDownload {
				small++
			}
		}
		if small == 0 {
			return InstallTooLarge, fmt.Sprintf("every wheel of %s is over the download limit of %d bytes (SANDBOX_PIP_MAX_DOWNLOAD)", r.Name, p.cfg.PipMaxDownload)
		}
	}
	return "", ""
}

var sdistName = regexp.MustCompile(`^(.+)-[0-9][^-]*\.(tar\.gz|zip|tar\.bz2)$`)

func sdistProject(fn string) string {
	if m := sdistName.FindStringSubmatch(strings.ToLower(fn)); m != nil {
		return policy.NormalizePackageName(m[1])
	}
	return ""
}

var hrefFile = regexp.MustCompile(`(?i)<a\s[^>]*href="([^"#]+)[^"]*"[^>]*>`)

// indexFiles lists the file names of a project's simple-index page: nil
// when the index says there is no such project, ok false when it could not
// be asked.
func indexFiles(ctx context.Context, index, project string) ([]string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(index, "/")+"/"+project+"/", nil)
	if err != nil {
		return nil, false
	}
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, true
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	files := []string{}
	for _, m := range hrefFile.FindAllSubmatch(body, -1) {
		u, err := url.Parse(string(m[1]))
		if err == nil {
			files = append(files, filepath.Base(u.Path))
		}
	}
	return files, true
}
