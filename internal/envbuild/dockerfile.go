package envbuild

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/codecage/codecage/internal/egress"
)

// DockerfileOptions say what image Dockerfile builds.
type DockerfileOptions struct {
	// Dockerfile is the Dockerfile's text.
	Dockerfile string
	// ContextDir is the build context COPY and ADD read from ("": an
	// empty one).
	ContextDir string
	// Bases resolves a FROM name to an environment's root directory,
	// which the build imports as that image. FROM scratch needs none; any
	// other name is refused (no registry is reachable from a build).
	Bases func(from string) (rootDir string, ok bool)
	// Allow, in egress.ParsePolicy's form ("pypi.org,files.pythonhosted.org"),
	// are the hosts RUN steps may reach through the build's proxy
	// (http_proxy is set for them). Empty: RUN has no network at all.
	Allow string
	// WorkDir is where the build's private buildah storage is made (and
	// removed after); "" is os.TempDir().
	WorkDir string
}

// maxDockerfile bounds a Dockerfile's text.
const maxDockerfile = 1 << 20

// systemPath is what PATH a base imported from a root directory sets.
const systemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// dockerfileScript runs in the build's confinement: it imports each base
// root as a local image, builds, and writes the OCI archive. Its
// arguments are name/root pairs; everything else comes in the environment.
const dockerfileScript = `set -eu
b() { buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs "$@"; }
while [ $# -gt 1 ]; do
	echo "envbuild: importing $2 as $1"
	ctr=$(b from scratch)
	mnt=$(b mount "$ctr")
	cp -a "$2"/. "$mnt"/
	b umount "$ctr" >/dev/null
	b config --env PATH=` + systemPath + ` "$ctr"
	b commit --quiet --rm --format oci "$ctr" "$1" >/dev/null
	shift 2
done
if [ "$ISOLATION" = oci ]; then
	set -- --isolation oci --runtime "$RUNTIME"
else
	set -- --isolation chroot
fi
b build "$@" --network "$NETWORK" --pull=never --format oci -f "$STORE/Dockerfile" -t "$TAG" "$CONTEXT"
b push --quiet --format oci "$TAG" "oci-archive:$DST"
`

// ociRuntime is the runtime RUN steps use: runc gives each its own
// namespaces, the container capability set and seccomp filter (crun
// refuses a host with cgroups v1 beside an empty v2 mount). Without it,
// buildah's chroot isolation, in the build's namespaces.
var ociRuntime = "/usr/sbin/runc"

// Dockerfile builds opts.Dockerfile with buildah into an OCI archive at
// dstArchive (which must not exist; its directory must), streaming its
// output to log. RUN steps have no network unless opts.Allow names hosts,
// and then only those, through the egress proxy. A failed build leaves no
// dstArchive.
func Dockerfile(ctx context.Context, opts DockerfileOptions, dstArchive string, log io.Writer) (err error) {
	if err := checkDockerfileText(opts.Dockerfile); err != nil {
		return err
	}
	pairs, err := baseRoots(opts)
	if err != nil {
		return err
	}
	allow, network, err := buildNetwork(opts.Allow)
	if err != nil {
		return err
	}
	if err := checkNewPath(dstArchive); err != nil {
		return err
	}
	if strings.Contains(dstArchive, ":") {
		return fmt.Errorf("%w: destination %q has a ':'", ErrBadRecipe, clip(dstArchive))
	}
	workDir := opts.WorkDir
	if workDir == "" {
		workDir = os.TempDir()
	}
	store, err := os.MkdirTemp(workDir, "envbuild-buildah-")
	if err != nil {
		return fmt.Errorf("envbuild: buildah's storage: %w", err)
	}
	defer os.RemoveAll(store)
	defer func() {
		if err != nil {
			_ = os.Remove(dstArchive)
		}
	}()
	contextDir, err := prepareStore(store, opts)
	if err != nil {
		return err
	}
	isolation := "oci"
	if _, err := exec.LookPath(ociRuntime); err != nil {
		isolation = "chroot"
		network = "host" // chroot isolation has no network of its own: the build's namespace is it
	}
	t := newTail(log)
	fmt.Fprintf(t, "envbuild: buildah build (isolation %s, network %s)\n", isolation, networkWords(allow))
	c := confined{
		argv:  append([]string{"sh", "-c", dockerfileScript, "envbuild-dockerfile"}, pairs...),
		env:   dockerfileEnv(store, contextDir, dstArchive, isolation, network, allow != nil),
		dir:   "/",
		allow: allow,
		log:   t,
		label: "envbuild-dockerfile",
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		return fmt.Errorf("envbuild: buildah is not installed (apt-get install buildah runc): %w", err)
	}
	if err := c.run(ctx); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: buildah: %s (%v)", ErrBuild, t.reason(), err)
	}
	if st, err := os.Stat(dstArchive); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%w: buildah wrote no archive", ErrBuild)
	}
	return nil
}

// checkDockerfileText refuses an empty or oversized Dockerfile.
func checkDockerfileText(text string) error {
	if len(text) > maxDockerfile {
		return fmt.Errorf("%w: a Dockerfile of %d bytes (at most %d)", ErrBadRecipe, len(text), maxDockerfile)
	}
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("%w: an empty Dockerfile", ErrBadRecipe)
	}
	return nil
}

// baseRoots resolves each FROM image to an environment's root directory:
// the name/root pairs dockerfileScript imports.
func baseRoots(opts DockerfileOptions) ([]string, error) {
	froms, err := dockerfileBases(opts.Dockerfile)
	if err != nil {
		return nil, err
	}
	var pairs []string
	for _, from := range froms {
		root, ok := "", false
		if opts.Bases != nil {
			root, ok = opts.Bases(from)
		}
		if !ok {
			return nil, fmt.Errorf("%w: FROM %s: no such environment (a build reaches no registry)", ErrBadRecipe, clip(from))
		}
		if st, err := os.Stat(root); err != nil || !st.IsDir() || !filepath.IsAbs(root) {
			return nil, fmt.Errorf("%w: FROM %s: its root %q is not a directory", ErrBadRecipe, clip(from), clip(root))
		}
		pairs = append(pairs, from, root)
	}
	return pairs, nil
}

// buildNetwork reads the hosts RUN steps may reach: none gives no network
// at all; some give the build's own namespace, with lo and the proxy.
func buildNetwork(allowText string) (*egress.Policy, string, error) {
	if strings.TrimSpace(allowText) == "" {
		return nil, "none", nil
	}
	p, err := egress.ParsePolicy(allowText)
	if err != nil {
		return nil, "", fmt.Errorf("%w: allow: %w", ErrBadRecipe, err)
	}
	return &p, "host", nil
}

// prepareStore fills buildah's private storage directory with the
// Dockerfile and a registries.conf, and returns the build context: the
// caller's, or an empty one in the store.
func prepareStore(store string, opts DockerfileOptions) (string, error) {
	contextDir := opts.ContextDir
	if contextDir == "" {
		contextDir = filepath.Join(store, "context")
		if err := os.Mkdir(contextDir, 0o700); err != nil {
			return "", fmt.Errorf("envbuild: %w", err)
		}
	} else if st, err := os.Stat(contextDir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%w: context %q is not a directory", ErrBadRecipe, clip(contextDir))
	}
	if err := os.WriteFile(filepath.Join(store, "Dockerfile"), []byte(opts.Dockerfile), 0o600); err != nil {
		return "", fmt.Errorf("envbuild: %w", err)
	}
	if err := os.WriteFile(filepath.Join(store, "registries.conf"), []byte("unqualified-search-registries = []\n"), 0o600); err != nil {
		return "", fmt.Errorf("envbuild: %w", err)
	}
	return contextDir, nil
}

// dockerfileEnv is dockerfileScript's environment.
func dockerfileEnv(store, contextDir, dstArchive, isolation, network string, proxied bool) []string {
	env := []string{
		"PATH=" + systemPath, "LANG=C.UTF-8", "HOME=/root",
		"STORE=" + store, "CONTEXT=" + contextDir, "DST=" + dstArchive,
		"TAG=localhost/codecage-envbuild:latest", "ISOLATION=" + isolation,
		"RUNTIME=" + ociRuntime, "NETWORK=" + network,
		// The registries buildah would search for a short name: none.
		"CONTAINERS_REGISTRIES_CONF=" + filepath.Join(store, "registries.conf"),
	}
	if proxied {
		// buildah passes these to RUN steps.
		env = append(env, "http_proxy="+proxyURL, "https_proxy="+proxyURL, "HTTP_PROXY="+proxyURL, "HTTPS_PROXY="+proxyURL)
	}
	return env
}

func networkWords(allow *egress.Policy) string {
	if allow == nil {
		return "none"
	}
	return "only " + strings.Join(allow.Allow, ", ") + " through the proxy"
}

// dockerfileBases lists the images a Dockerfile's FROM lines name, in
// order, once each, without scratch and the build's own stages.
func dockerfileBases(text string) ([]string, error) {
	stages := map[string]bool{}
	seen := map[string]bool{}
	var bases []string
	anyFrom := false
	for _, line := range logicalLines(text) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.EqualFold(fields[0], "FROM") {
			continue
		}
		anyFrom = true
		args := fields[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			args = args[1:] // --platform=...
		}
		if len(args) == 0 {
			return nil, fmt.Errorf("%w: FROM names no image", ErrBadRecipe)
		}
		image := args[0]
		switch {
		case strings.Contains(image, "$"):
			return nil, fmt.Errorf("%w: FROM %s: build arguments in FROM are not supported", ErrBadRecipe, clip(image))
		case image == "scratch", stages[strings.ToLower(image)], seen[image]:
		default:
			seen[image] = true
			bases = append(bases, image)
		}
		// A stage's name counts from the next FROM on.
		if len(args) >= 3 && strings.EqualFold(args[1], "AS") {
			stages[strings.ToLower(args[2])] = true
		}
	}
	if !anyFrom {
		return nil, fmt.Errorf("%w: the Dockerfile has no FROM", ErrBadRecipe)
	}
	return bases, nil
}

// logicalLines joins continued lines and drops comments.
func logicalLines(text string) []string {
	var out []string
	var cur strings.Builder
	for raw := range strings.SplitSeq(text, "\n") {
		line := strings.TrimRight(raw, "\r")
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
