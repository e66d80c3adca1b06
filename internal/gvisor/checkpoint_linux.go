package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/jail"
)

// maxManifestBytes bounds the manifest read back: it is the backend's own
// file, but the directory may have been tampered with.
const maxManifestBytes = 1 << 20

// Checkpoint saves the sandbox, memory and kernel state, to imageDir (made
// when missing; it must hold nothing yet), then writes the image's
// manifest. With leaveRunning the sandbox goes on (frozen for the time of
// the copy); without, it ends, and Checkpoint returns once it is gone and
// torn down. The workspace is not in the image: the files the program
// holds open must exist at the same path inside at restore. Only a
// harness's sandbox (no Programs) can be saved. On failure nothing of the
// image is left, and the sandbox runs on if it still can.
func (s *Sandbox) Checkpoint(ctx context.Context, imageDir string, leaveRunning bool) (Manifest, error) {
	if s.spec.Programs != nil {
		return Manifest{}, fmt.Errorf("%w: only a harness's sandbox can be checkpointed", jail.ErrUnsupported)
	}
	select {
	case <-s.done:
		return Manifest{}, errors.New("gvisor: checkpoint: the sandbox has ended")
	default:
	}
	version, err := runscVersion(s.runsc)
	if err != nil {
		return Manifest{}, err
	}
	if err := emptyImageDir(imageDir); err != nil {
		return Manifest{}, err
	}
	args := append(s.globalFlags("checkpoint.log"), "checkpoint", "--image-path="+imageDir)
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, s.runsc, append(args, s.id)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		clearDir(imageDir)
		detail := strings.TrimSpace(string(capBytes(out, 2048)) + "\n" + logTailOf(filepath.Join(s.dir, "checkpoint.log")))
		return Manifest{}, fmt.Errorf("gvisor: checkpoint: %v: %s", err, detail)
	}
	m := Manifest{
		Format: ImageFormat, RunscVersion: version, Platform: s.platform, UID: s.uid, RootInside: s.who.rootInside(), OwnRoot: s.ownRoot,
		SourceID: s.id, Created: start.UTC(), Bytes: dirBytes(imageDir),
		Spec: ImageSpec{Argv: s.spec.Argv, Env: s.spec.Env, Home: s.spec.Home, Root: cleanRoot(s.spec.Root), Limits: s.spec.Limits,
			Mounts: imageMounts(s.mounts)},
	}
	if err := writeManifest(imageDir, m); err != nil {
		clearDir(imageDir)
		return Manifest{}, err
	}
	if !leaveRunning {
		select {
		case <-s.done:
		case <-ctx.Done():
			return m, fmt.Errorf("gvisor: checkpoint: saved, but the sandbox has not ended yet: %w", ctx.Err())
		}
	}
	return m, nil
}

// Restore starts a new sandbox from the image in imageDir: the program
// goes on where it was saved, answering on a new channel (stdin, stdout
// and stderr of the same kinds as Start's). Restoring twice from one image
// gives two sandboxes that share nothing but the image (a fork).
//
// spec describes the new sandbox as for Start: its id (a new one: two
// sandboxes of one image may run at once), its limits (the lifetime, CPU
// and output budgets; the rest are the image's), its output, and the host
// directories of its workspace and binds, which must sit at the same paths
// inside as the image's (a fork's own copy of the workspace, say). The
// program, its environment and its uid are the image's: spec.HostUID, if
// set, must be it, and the caller keeps that uid reserved (the image's
// processes run as it). The manifest is checked before anything starts: an
// image of another runsc build or platform is refused with
// [ErrImageMismatch], a missing or unreadable one with [ErrBadImage].
// Restore returns once the program runs again.
func Restore(ctx context.Context, rt Runtime, imageDir string, spec jail.Spec) (*Sandbox, error) {
	m, err := ReadImage(imageDir)
	if err != nil {
		return nil, err
	}
	runsc, err := rt.binary()
	if err != nil {
		return nil, err
	}
	version, err := runscVersion(runsc)
	if err != nil {
		return nil, err
	}
	if m.RunscVersion != version {
		return nil, fmt.Errorf("%w: it was made by runsc %q, this is %q (%s)", ErrImageMismatch, bounded.String(m.RunscVersion, 200), version, runsc)
	}
	platform := rt.platform()
	if m.Platform != platform {
		return nil, fmt.Errorf("%w: it was made on the %q platform, sandboxes here run on %q", ErrImageMismatch, bounded.String(m.Platform, 40), platform)
	}
	switch {
	case spec.HostUID != 0 && spec.HostUID != m.UID:
		return nil, fmt.Errorf("%w: its uid is %d, not %d", ErrImageMismatch, m.UID, spec.HostUID)
	case m.UID == 0 || !jail.InUIDSpan(m.UID):
		return nil, fmt.Errorf("%w: uid %d is not a sandbox's", ErrBadImage, m.UID)
	case spec.Nested, spec.SeqPacketChannel, spec.Programs != nil:
		return nil, fmt.Errorf("%w: a restored sandbox is a harness's", jail.ErrUnsupported)
	}
	if err := checkImageRoot(m.Spec.Root, spec.Root); err != nil {
		return nil, err
	}
	spec.Argv, spec.Env, spec.Home, spec.HostUID = m.Spec.Argv, m.Spec.Env, m.Spec.Home, m.UID
	// The image's kernel holds the ids of its user namespace: the same map.
	spec.RootInside = m.RootInside
	if m.RootInside && !identityOf(spec, m.UID).rootInside() {
		return nil, fmt.Errorf("%w: its sandbox had root inside, which a restore here cannot map (uid %d, a machine's, as root)", ErrImageMismatch, m.UID)
	}
	switch {
	case !m.OwnRoot:
		spec.MachineRoot = "" // an older image: its root's writes are in it
	case spec.MachineRoot == "" || !ownsRoot(spec, identityOf(spec, m.UID)):
		return nil, fmt.Errorf("%w: its machine ran on a root of its own, which the restore has not", ErrImageMismatch)
	}
	spec.Limits = restoredLimits(m.Spec.Limits, spec.Limits)
	s, undo, err := prepare(rt, runsc, platform, spec)
	if err != nil {
		return nil, err
	}
	defer undo.run()
	if got := imageMounts(s.mounts); !slices.Equal(got, m.Spec.Mounts) {
		return nil, fmt.Errorf("%w: its mounts are %v, the restore's %v", ErrImageMismatch, m.Spec.Mounts, got)
	}
	if err := s.launch("restore", "--image-path="+imageDir, "--bundle", s.dir, s.id); err != nil {
		return nil, err
	}
	// From here supervise tears down: a failure only ends the sandbox.
	undo.release()
	undo.add(func() {
		s.Kill(jail.LimitNone)
		<-s.done
	})
	if err := s.awaitRestored(ctx); err != nil {
		return nil, err
	}
	undo.release()
	return s, nil
}

// checkImageRoot refuses a restore on another root than the image's
// (image: the manifest's, own: the restore's spec), or on one that is
// gone: the image's kernel would find other files, or none, behind the
// paths it holds open and the code it has mapped.
func checkImageRoot(image, own string) error {
	own = cleanRoot(own)
	if image != own {
		return fmt.Errorf("%w: its sandbox ran on %s, the restore's root is %s", ErrImageMismatch, rootName(bounded.String(image, 300)), rootName(own))
	}
	if image == "" {
		return nil
	}
	fi, err := os.Stat(image)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: its sandbox's root %s is gone (was its environment removed?)", ErrImageMismatch, bounded.String(image, 300))
	}
	return nil
}

// cleanRoot is a root's path as a manifest keeps it ("": the host's).
func cleanRoot(root string) string {
	if root == "" {
		return ""
	}
	return filepath.Clean(root)
}

// rootName names a root in a message.
func rootName(root string) string {
	if root == "" {
		return "the host's root"
	}
	return "the root " + root
}

// awaitRestored waits until runsc says the restored container runs (the
// image is loaded and the program goes on), or has failed. The pid file
// comes too early (runsc writes it before loading the image), and `runsc
// state` blocks while it loads and costs a process per look: the state
// file runsc keeps under its root says "running" once the load is over
// (read directly: a layout of runsc's own, checked by this package's tests
// against the pinned runsc).
func (s *Sandbox) awaitRestored(ctx context.Context) error {
	stateFile := filepath.Join(s.dir, "state", s.id+"_sandbox:"+s.id+".state")
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(stateFile); err == nil && bytes.Contains(b, []byte(`"status":"running"`)) {
			return nil
		}
		select {
		case <-s.done:
			e := s.exit
			return fmt.Errorf("%w: runsc restore failed (exit %d, signal %d): %s", ErrBadImage, e.ExitCode, e.Signal, s.log)
		case <-ctx.Done():
			return fmt.Errorf("gvisor: restore: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// restoredLimits are the image's limits with the budgets a restore sets
// afresh: the lifetime, the CPU time and the output.
func restoredLimits(image, own jail.Limits) jail.Limits {
	l := image
	if own.Timeout > 0 {
		l.Timeout = own.Timeout
	}
	if own.CPUTime > 0 {
		l.CPUTime = own.CPUTime
	}
	if own.OutputBytes > 0 {
		l.OutputBytes = own.OutputBytes
	}
	if own.CPUCores > 0 {
		l.CPUCores = own.CPUCores
	}
	return l
}

// ReadImage reads and checks the manifest of the image in dir.
func ReadImage(dir string) (Manifest, error) {
	f, err := os.Open(filepath.Join(dir, ManifestName))
	if err != nil {
		return Manifest{}, fmt.Errorf("%w in %s: %v", ErrBadImage, dir, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("%w in %s: %v", ErrBadImage, dir, err)
	}
	if len(b) > maxManifestBytes {
		return Manifest{}, fmt.Errorf("%w in %s: the manifest exceeds %d bytes", ErrBadImage, dir, maxManifestBytes)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w in %s: manifest: %v", ErrBadImage, dir, err)
	}
	if m.Format != ImageFormat {
		return Manifest{}, fmt.Errorf("%w in %s: manifest format %d, this build reads %d", ErrBadImage, dir, m.Format, ImageFormat)
	}
	if len(m.Spec.Argv) == 0 || len(m.Spec.Mounts) == 0 {
		return Manifest{}, fmt.Errorf("%w in %s: the manifest names no program or mounts", ErrBadImage, dir)
	}
	if dirBytes(dir) == 0 {
		return Manifest{}, fmt.Errorf("%w in %s: runsc's files are missing", ErrBadImage, dir)
	}
	return m, nil
}

func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+ManifestName)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("gvisor: manifest: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestName)); err != nil {
		return fmt.Errorf("gvisor: manifest: %w", err)
	}
	return nil
}

// emptyImageDir makes dir (0700) or checks that it holds nothing: an image
// is never written over another.
func emptyImageDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("gvisor: checkpoint: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("gvisor: checkpoint: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("gvisor: checkpoint: %s is not empty", dir)
	}
	return nil
}

// clearDir removes what dir holds (a failed checkpoint's partial files).
func clearDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// dirBytes is the size of the regular files of dir other than the manifest.
func dirBytes(dir string) int64 {
	entries, _ := os.ReadDir(dir)
	var n int64
	for _, e := range entries {
		if e.Name() == ManifestName || e.Name() == "."+ManifestName {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

func imageMounts(mounts []ociMount) []ImageMount {
	out := make([]ImageMount, len(mounts))
	for i, m := range mounts {
		out[i] = ImageMount{Path: m.Destination, Type: m.Type}
	}
	return out
}

var versions sync.Map // "path size mtime" -> version

// runscVersion is the first line `runsc --version` prints, which names the
// build (an image binds to it), read once per binary.
func runscVersion(bin string) (string, error) {
	fi, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	key := fmt.Sprintf("%s %d %d", bin, fi.Size(), fi.ModTime().UnixNano())
	if v, ok := versions.Load(key); ok {
		return v.(string), nil
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s --version: %v", ErrUnavailable, bin, err)
	}
	v := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	versions.Store(key, v)
	return v, nil
}

func capBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
