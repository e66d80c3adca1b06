package envbuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/codecage/codecage/internal/egress"
)

// DebianOptions say what root Debian builds.
type DebianOptions struct {
	// Suite ("bookworm") and Mirror ("http://deb.debian.org/debian")
	// default to the host's apt source (HostSource).
	Suite  string
	Mirror string
	// Variant is mmdebstrap's: "apt" (default: the essential packages and
	// apt), "minbase", "essential", "required", "important" or "standard".
	Variant string
	// Components default to "main".
	Components []string
	// Packages are installed on top, with what they depend on
	// ("python3", "python3-numpy", "name=version", "name:arch").
	Packages []string
	// CacheDir, if set, keeps the downloaded .deb files between builds
	// (created if missing), so a second build downloads nothing new.
	CacheDir string
	// CustomizeHooks are mmdebstrap customize hooks (shell commands, "$1"
	// the root), run in the build's confinement once the packages are in.
	CustomizeHooks []string
}

// Limits of a Debian recipe: the operator's input, still bounded.
const (
	maxPackages   = 512
	maxHooks      = 32
	maxHookBytes  = 4 << 10
	maxOptionText = 512
)

var (
	packagePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$`)
	suitePattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,63}$`)
	componentPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9/-]{0,63}$`)
	variants         = map[string]bool{"apt": true, "minbase": true, "essential": true, "required": true, "important": true, "standard": true}
)

// ErrBadRecipe means options refused before anything ran.
var ErrBadRecipe = errors.New("envbuild: bad recipe")

// ErrBuild means the build tool ran and failed; the message quotes it.
var ErrBuild = errors.New("envbuild: build failed")

// Debian builds a root filesystem at dstRoot (which must not exist; its
// parent must) with mmdebstrap, streaming its output to log. Its only
// network is the mirror, through the egress proxy. A failed build leaves
// no dstRoot.
func Debian(ctx context.Context, opts DebianOptions, dstRoot string, log io.Writer) (err error) {
	if err := opts.fill(); err != nil {
		return err
	}
	allow, err := mirrorPolicy(opts.Mirror)
	if err != nil {
		return err
	}
	if err := checkNewPath(dstRoot); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Nothing was there before (checkNewPath): all of it is the build's.
			if rmErr := os.RemoveAll(dstRoot); rmErr != nil {
				err = fmt.Errorf("%w (and removing %s: %v)", err, dstRoot, rmErr)
			}
		}
	}()
	args := []string{"mmdebstrap", "--mode=root", "--variant=" + opts.Variant,
		"--components=" + strings.Join(opts.Components, ",")}
	if len(opts.Packages) > 0 {
		args = append(args, "--include="+strings.Join(opts.Packages, ","),
			// mmdebstrap finds an unknown or uninstallable package only
			// when it installs the extras, after the essential set is
			// set up (about 30 s); apt's dry run against the indexes,
			// once they are there, fails at once with apt's words. The
			// names are packagePattern's, nothing the shell reads.
			`--extract-hook=APT_CONFIG="$MMDEBSTRAP_APT_CONFIG" apt-get --simulate --quiet=2 install `+strings.Join(opts.Packages, " ")+` >/dev/null`)
	}
	if opts.CacheDir != "" {
		if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
			return fmt.Errorf("envbuild: the package cache: %w", err)
		}
		// mmdebstrap's documented way of keeping apt's downloads: in the
		// root before apt runs, back out before the root is cleaned.
		args = append(args, "--skip=essential/unlink",
			`--setup-hook=mkdir -p "$1"/var/cache/apt/archives/`,
			"--setup-hook=sync-in "+opts.CacheDir+" /var/cache/apt/archives/",
			"--customize-hook=sync-out /var/cache/apt/archives "+opts.CacheDir)
	}
	for _, h := range opts.CustomizeHooks {
		args = append(args, "--customize-hook="+h)
	}
	args = append(args, opts.Suite, dstRoot, opts.Mirror)

	t := newTail(log)
	fmt.Fprintf(t, "envbuild: %s\n", strings.Join(args, " "))
	c := confined{
		argv: args,
		env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8", "HOME=/root",
			// apt reaches the mirror through the proxy only.
			"http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		},
		dir:   "/",
		allow: &allow,
		log:   t,
		label: "envbuild-debian",
	}
	if err := c.run(ctx); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: mmdebstrap: %s (%v)", ErrBuild, t.reason(), err)
	}
	return nil
}

// fill checks the options and puts in the defaults.
func (o *DebianOptions) fill() error {
	if o.Suite == "" || o.Mirror == "" {
		m, s, ok := HostSource()
		if !ok {
			return fmt.Errorf("%w: no suite or mirror given, and the host's apt names none", ErrBadRecipe)
		}
		if o.Mirror == "" {
			o.Mirror = m
		}
		if o.Suite == "" {
			o.Suite = s
		}
	}
	if o.Variant == "" {
		o.Variant = "apt"
	}
	if len(o.Components) == 0 {
		o.Components = []string{"main"}
	}
	var bad []error
	if !suitePattern.MatchString(o.Suite) {
		bad = append(bad, fmt.Errorf("suite %q", clip(o.Suite)))
	}
	if !isMirrorURL(o.Mirror) {
		bad = append(bad, fmt.Errorf("mirror %q is not an http or https URL", clip(o.Mirror)))
	}
	if !variants[o.Variant] {
		bad = append(bad, fmt.Errorf("variant %q", clip(o.Variant)))
	}
	for _, c := range o.Components {
		if !componentPattern.MatchString(c) {
			bad = append(bad, fmt.Errorf("component %q", clip(c)))
		}
	}
	if len(o.Packages) > maxPackages {
		bad = append(bad, fmt.Errorf("%d packages (at most %d)", len(o.Packages), maxPackages))
	} else {
		for _, p := range o.Packages {
			if !packagePattern.MatchString(p) || len(p) > maxOptionText {
				bad = append(bad, fmt.Errorf("package name %q", clip(p)))
			}
		}
	}
	if o.CacheDir != "" && (!filepath.IsAbs(o.CacheDir) || strings.ContainsAny(o.CacheDir, " \t\n\"'$`\\")) {
		bad = append(bad, fmt.Errorf("cache directory %q: an absolute path without spaces or quotes", clip(o.CacheDir)))
	}
	if len(o.CustomizeHooks) > maxHooks {
		bad = append(bad, fmt.Errorf("%d hooks (at most %d)", len(o.CustomizeHooks), maxHooks))
	}
	for _, h := range o.CustomizeHooks {
		if len(h) > maxHookBytes {
			bad = append(bad, fmt.Errorf("a hook of %d bytes (at most %d)", len(h), maxHookBytes))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %w", ErrBadRecipe, errors.Join(bad...))
	}
	return nil
}

// mirrorPolicy allows the mirror's host (and port, when the URL names one).
func mirrorPolicy(mirror string) (egress.Policy, error) {
	u, err := url.Parse(mirror)
	if err != nil {
		return egress.Policy{}, fmt.Errorf("%w: mirror: %v", ErrBadRecipe, err)
	}
	host := u.Hostname()
	if u.Port() != "" {
		host = net.JoinHostPort(host, u.Port())
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	p, err := egress.ParsePolicy(host)
	if err != nil || len(p.Allow) != 1 {
		return egress.Policy{}, fmt.Errorf("%w: mirror host %q: %v", ErrBadRecipe, clip(u.Host), err)
	}
	return p, nil
}

// isMirrorURL: an http(s) URL with a host and nothing mmdebstrap or a
// shell could take for more than one argument.
func isMirrorURL(s string) bool {
	if len(s) > maxOptionText || strings.ContainsAny(s, " \t\n\"'`$\\") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && u.User == nil
}

// checkNewPath: an absolute path that does not exist, in a directory that does.
func checkNewPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%w: destination %q is not a clean absolute path", ErrBadRecipe, clip(p))
	}
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("%w: destination %s exists", ErrBadRecipe, p)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("envbuild: destination: %w", err)
	}
	if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
		return fmt.Errorf("%w: destination's directory %s does not exist", ErrBadRecipe, filepath.Dir(p))
	}
	return nil
}

// clip bounds a string quoted in an error.
func clip(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}
