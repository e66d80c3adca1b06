package envs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envbuild"
	"github.com/codecage/codecage/internal/envstore"
)

// The builds that make a root filesystem: Debian packages (mmdebstrap),
// an OCI image (unpacked by the store), a Dockerfile (buildah, then as an
// image). The tools run in envbuild; nothing here executes the image.

func (d *Envs) buildDebian(ctx context.Context, eb *envBuild) error {
	b := eb.b
	eb.meta.Source = envstore.Source{Kind: "debian", Ref: b.Suite, Packages: b.Debian}
	eb.log.printf("building a Debian root with %d packages", len(b.Debian))
	// mmdebstrap makes its destination itself: the staging's empty root
	// gives way to it.
	if err := os.Remove(eb.st.Root()); err != nil {
		return err
	}
	// The harness needs Python's standard library: python3 is always in.
	pkgs := b.Debian
	if !slices.Contains(pkgs, "python3") {
		pkgs = append(slices.Clone(pkgs), "python3")
	}
	if err := envbuild.Debian(ctx, envbuild.DebianOptions{Suite: b.Suite, Mirror: d.cfg.EnvDebianMirror, CacheDir: d.cfg.EnvDebianCache, Packages: pkgs}, eb.st.Root(), eb.log); err != nil {
		return err
	}
	return emptyDev(eb.st.Root())
}

// emptyDev empties a built root's /dev: a root made as root holds device
// nodes there, which the store refuses and no sandbox sees (the jail
// gives each its own /dev).
func emptyDev(root string) error {
	dev := filepath.Join(root, "dev")
	if err := os.RemoveAll(dev); err != nil {
		return fmt.Errorf("empty the root's /dev: %w", err)
	}
	return os.Mkdir(dev, 0o755)
}

func (d *Envs) buildImage(ctx context.Context, eb *envBuild) error {
	eb.meta.Source = envstore.Source{Kind: "image", Ref: eb.b.Image}
	eb.log.printf("unpacking image %s", bounded.Quote(eb.b.Image))
	cfg, err := d.store.ImportImage(ctx, eb.st, eb.b.Image, eb.log)
	if err != nil {
		return err
	}
	applyImageConfig(&eb.meta, cfg)
	return nil
}

func (d *Envs) buildDockerfile(ctx context.Context, eb *envBuild) error {
	b := eb.b
	eb.meta.Source = envstore.Source{Kind: "dockerfile", Ref: b.ContextDir}
	// The image goes beside the staging's root: swept with it if the
	// service dies, removed once unpacked.
	archive := filepath.Join(filepath.Dir(eb.st.Root()), "image.oci.tar")
	defer os.Remove(archive)
	bases := func(from string) (string, bool) {
		e, release, err := d.Use(from)
		if err != nil || e.RootDir == "" {
			release()
			return "", false
		}
		eb.uses = append(eb.uses, release)
		return e.RootDir, true
	}
	eb.log.printf("building the Dockerfile")
	if err := envbuild.Dockerfile(ctx, envbuild.DockerfileOptions{Dockerfile: b.Dockerfile, ContextDir: b.ContextDir, Bases: bases}, archive, eb.log); err != nil {
		return err
	}
	eb.log.printf("unpacking the built image")
	cfg, err := d.store.ImportImage(ctx, eb.st, archive, eb.log)
	if err != nil {
		return err
	}
	applyImageConfig(&eb.meta, cfg)
	return nil
}

// applyImageConfig fills what the build did not set from what the image
// says its containers start with: variables (the build's win), working
// directory, and its entrypoint and command as the start command. Values
// beyond a build request's bounds are left out.
func applyImageConfig(meta *envstore.Env, cfg envstore.ImageConfig) {
	for _, kv := range cfg.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envVarName.MatchString(k) || checkText("variable", v, maxEnvVarValue) != nil {
			continue
		}
		if _, set := meta.Vars[k]; set {
			continue
		}
		if meta.Vars == nil {
			meta.Vars = map[string]string{}
		}
		if len(meta.Vars) < maxEnvVars {
			meta.Vars[k] = v
		}
	}
	if meta.Workdir == "" && checkAbsPath("workdir", cfg.WorkingDir) == nil {
		meta.Workdir = cfg.WorkingDir
	}
	// The image's entrypoint and command are left out: they are a
	// container's main process (a shell, python3 reading stdin), not a
	// server a sandbox should start; a start command is asked for.
}
