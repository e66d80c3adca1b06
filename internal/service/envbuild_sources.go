package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/codecage/codecage/internal/envbuild"
	"github.com/codecage/codecage/internal/envstore"
)

// The builds that make a root filesystem: Debian packages (mmdebstrap),
// an OCI image (unpacked by the store), a Dockerfile (buildah, then as an
// image). The tools run in envbuild; nothing here executes the image.

func (s *Service) buildDebian(ctx context.Context, eb *envBuild) error {
	b := eb.b
	eb.meta.Source = envstore.Source{Kind: "debian", Ref: b.Suite, Packages: b.Debian}
	eb.log.printf("building a Debian root with %d packages", len(b.Debian))
	return envbuild.Debian(ctx, envbuild.DebianOptions{Suite: b.Suite, Mirror: s.cfg.EnvDebianMirror, Packages: b.Debian}, eb.st.Root(), eb.log)
}

func (s *Service) buildImage(ctx context.Context, eb *envBuild) error {
	eb.meta.Source = envstore.Source{Kind: "image", Ref: eb.b.Image}
	eb.log.printf("unpacking image %s", Quote(eb.b.Image))
	cfg, err := s.envs.ImportImage(ctx, eb.st, eb.b.Image, eb.log)
	if err != nil {
		return err
	}
	applyImageConfig(&eb.meta, cfg)
	return nil
}

func (s *Service) buildDockerfile(ctx context.Context, eb *envBuild) error {
	b := eb.b
	eb.meta.Source = envstore.Source{Kind: "dockerfile", Ref: b.ContextDir}
	// The image goes beside the staging's root: swept with it if the
	// service dies, removed once unpacked.
	archive := filepath.Join(filepath.Dir(eb.st.Root()), "image.oci.tar")
	defer os.Remove(archive)
	bases := func(from string) (string, bool) {
		e, release, err := s.useEnvironment(from)
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
	cfg, err := s.envs.ImportImage(ctx, eb.st, archive, eb.log)
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
	if meta.StartCmd == "" {
		if cmd := shellJoin(append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...)); checkText("start command", cmd, maxEnvCmd) == nil {
			meta.StartCmd = cmd
		}
	}
}

// shellJoin quotes argv as one /bin/sh command line.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
