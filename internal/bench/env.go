package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/pipfixture"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// Environment rows (issue #28): the build of a numpy + pandas environment
// from a local wheelhouse (the host's Debian numpy and pandas packed as
// wheels: no index is reachable here) and of one imported from an image
// tarball whose root is not the host's; the first run in each (its class
// and zygote made by that run); warm runs in them interleaved with the
// same runs in the default environment; and the memory of their zygotes.
// Everything lives in a temporary environment store, removed at the end.

// The environments the rows build.
const (
	envPackagesName = "bench-numpy-pandas"
	envImageName    = "bench-image"
)

// hostDistPackages is where Debian keeps the numpy and pandas packed.
const hostDistPackages = "/usr/lib/python3/dist-packages"

// EnvKeys are the keys of the environment rows, in the order they come.
func EnvKeys() []string {
	return []string{"env_build_numpy_pandas", "env_build_image", "env_first_run", "env_image_first_run",
		"env_default_print1_warm", "env_default_preloaded_print1_warm", "env_print1_warm", "env_image_print1_warm", "env_default_numpy_warm", "env_numpy_warm"}
}

// ZygoteMemory is the memory of one zygote, read from the host.
type ZygoteMemory struct {
	Class string `json:"class"`
	// Environment is the environment's name, "" for the default one.
	Environment string `json:"environment,omitempty"`
	// Preload is what the zygote imported before forking (CODECAGE_PRELOAD).
	Preload string `json:"preload,omitempty"`
	PID     int    `json:"pid"`
	RSS     int64  `json:"rss_bytes"`
	PSS     int64  `json:"pss_bytes"`
}

// envBench is one measurement of the environment rows.
type envBench struct {
	b        *bencher
	work     string
	rows     map[string]Row
	pkg, img envstore.Env
}

// environments measures the environment rows; a step that cannot run
// (no numpy on the host, a failed build) leaves its rows failed or
// skipped with the reason. The error is for a canceled context or a
// service that does not start.
func (b *bencher) environments(ctx context.Context) error {
	e := &envBench{b: b, rows: map[string]Row{}}
	defer e.flush()
	if b.cfg.EnvPoolSize <= 0 {
		e.skipRest("SANDBOX_ENV_POOL_SIZE is 0: environments keep no warm pool")
		return nil
	}
	work, err := os.MkdirTemp("", "codecage-bench-env-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	e.work = work
	return e.run(ctx)
}

func (e *envBench) run(ctx context.Context) error {
	cfg, archive, ok := e.prepare()
	if !ok {
		return nil
	}
	var firsts [2][]time.Duration
	var firstErr [2]stepTimes
	pkgOK, imgOK, err := e.firstService(ctx, cfg, archive, &firsts, &firstErr)
	if err != nil {
		return err
	}

	// More first runs, each in a service of its own (over the same store):
	// every one makes the class and its zygote again.
	for range e.coldRuns() - 1 {
		if err := e.firstRunsInNewService(ctx, cfg, pkgOK, imgOK, &firsts, &firstErr); err != nil {
			return err
		}
	}
	notes := "the first run of print(1) naming the environment in a service: its pool and zygote are made by it; one sample per service"
	e.addFirst("env_first_run", "first run in "+envPackagesName+" (zygote cold)", firsts[0], &firstErr[0], pkgOK, notes+"; its zygote pre-imports numpy and pandas")
	e.addFirst("env_image_first_run", "first run in "+envImageName+" (zygote cold)", firsts[1], &firstErr[1], imgOK, notes)
	return ctx.Err()
}

// prepare packs the host's numpy and pandas as wheels and a minimal
// Python root as an image tarball, and returns the configuration that
// builds from the wheels, and the tarball; false (the rows skipped) when
// either cannot be made.
func (e *envBench) prepare() (config.Config, string, bool) {
	b := e.b
	b.progress("environments: packing the host's numpy and pandas as wheels, and a minimal Python root as an image tarball")
	wheelhouse, err := hostWheelhouse(filepath.Join(e.work, "wheels"))
	if err != nil {
		e.skipRest("no wheelhouse: " + err.Error())
		return config.Config{}, "", false
	}
	archive, err := minimalImage(e.work)
	if err != nil {
		e.skipRest("no image: " + err.Error())
		return config.Config{}, "", false
	}
	cfg := b.cfg
	cfg.PipFindLinks = wheelhouse
	cfg.EnvironmentsDir = filepath.Join(e.work, "environments")
	return cfg, archive, true
}

// firstService builds both environments (the image from archive) in a
// service, times the first run in each (its zygotes the ones that appear
// with it) and then the warm runs, and measures the zygotes' memory; it
// says which builds succeeded.
func (e *envBench) firstService(ctx context.Context, cfg config.Config, archive string, firsts *[2][]time.Duration, firstErr *[2]stepTimes) (pkgOK, imgOK bool, err error) {
	b := e.b
	svc, err := b.opts.NewService(cfg)
	if err != nil {
		return false, false, err
	}
	defer svc.Close()
	if b.rep.Machine.Python == "" { // --env-only: no other case described it
		b.describeIsolation(svc.Info().Isolation)
	}
	want := wantedPools(cfg)
	if err := waitFull(ctx, svc, want, b.opts.PoolTimeout); err != nil {
		return false, false, err
	}
	e.pkg, pkgOK = e.build(ctx, svc, "env_build_numpy_pandas", "build: numpy + pandas from a wheelhouse",
		service.EnvironmentBuild{Name: envPackagesName, Requirements: []string{"numpy", "pandas"}, Preimport: []string{"numpy", "pandas"}})
	e.img, imgOK = e.build(ctx, svc, "env_build_image", "build: minimal Python root from an image tarball",
		service.EnvironmentBuild{Name: envImageName, Image: archive})
	if err := ctx.Err(); err != nil {
		return false, false, err
	}

	// The first run in each, in this service; its zygotes are the ones
	// that appear with it.
	before := zygotes()
	if pkgOK {
		e.firstRun(ctx, svc, want, e.pkg, &firsts[0], &firstErr[0])
	}
	pkgZygotes := newZygotes(before, zygotes())
	before = zygotes()
	if imgOK {
		e.firstRun(ctx, svc, want, e.img, &firsts[1], &firstErr[1])
	}
	imgZygotes := newZygotes(before, zygotes())
	before = zygotes()
	where := e.numpyOrigin(ctx, svc, pkgOK)
	dataZygotes := newZygotes(before, zygotes())
	if err := ctx.Err(); err != nil {
		return false, false, err
	}

	e.warm(ctx, svc, want, pkgOK, imgOK, where)
	b.rep.EnvZygotes = e.zygoteMemory(pkgZygotes, imgZygotes, dataZygotes)
	return pkgOK, imgOK, nil
}

// numpyOrigin runs, untimed, in the packages environment's data_science
// class (making it) and says where its numpy comes from: its layer, not
// the host's ("" when that environment was not built).
func (e *envBench) numpyOrigin(ctx context.Context, svc *service.Service, pkgOK bool) string {
	if !pkgOK {
		return ""
	}
	res, err := svc.Execute(ctx, service.Request{Code: "import numpy, pandas; print(numpy.__file__, pandas.__file__)", Environment: envPackagesName})
	if msg := describe(res, err); msg != "" {
		return "numpy in the environment: " + msg
	}
	return "imported from " + strings.TrimSpace(res.Stdout)
}

// coldRuns is how many first runs each environment gets.
func (e *envBench) coldRuns() int {
	if e.b.opts.Quick {
		return 3
	}
	return 5
}

// build times one environment build.
func (e *envBench) build(ctx context.Context, svc *service.Service, key, name string, req service.EnvironmentBuild) (envstore.Env, bool) {
	e.b.progress("%s: building %s", key, req.Name)
	var st stepTimes
	var env envstore.Env
	var err error
	if e.b.opts.Progress != nil {
		req.Log = &stampedLog{w: e.b.opts.Progress, prefix: "bench: " + req.Name + ": ", start: time.Now()}
	}
	took := timed(func() { env, err = svc.BuildEnvironment(ctx, req) })
	st.add(took)
	notes := ""
	if err != nil {
		st.fail(err.Error())
	} else {
		notes = fmt.Sprintf("%s, Python %s", sizeText(env.Size), env.PythonVersion)
		if len(env.Modules) > 0 {
			notes += ", modules " + strings.Join(env.Modules, " ")
		}
	}
	e.rows[key] = st.row(key, name, notes, took)
	return env, err == nil
}

// firstRun times the first print(1) naming env in svc, the default
// pools full before it.
func (e *envBench) firstRun(ctx context.Context, svc *service.Service, want map[string]int, env envstore.Env, lat *[]time.Duration, st *stepTimes) {
	if err := waitFull(ctx, svc, want, e.b.opts.PoolTimeout); err != nil {
		st.fail(err.Error())
		return
	}
	var res *service.Result
	var err error
	d := timed(func() { res, err = svc.Execute(ctx, service.Request{Code: Print1Code, Environment: env.Name}) })
	*lat = append(*lat, d)
	msg := describe(res, err)
	if msg == "" {
		msg = checkPrint1(res)
	}
	if msg != "" {
		st.fail(msg)
	}
}

// firstRunsInNewService starts a service over the environments' store and
// times the first run in each environment there.
func (e *envBench) firstRunsInNewService(ctx context.Context, cfg config.Config, pkgOK, imgOK bool, firsts *[2][]time.Duration, errs *[2]stepTimes) error {
	svc, err := e.b.opts.NewService(cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	want := wantedPools(cfg)
	if pkgOK {
		e.firstRun(ctx, svc, want, e.pkg, &firsts[0], &errs[0])
	}
	if imgOK {
		e.firstRun(ctx, svc, want, e.img, &firsts[1], &errs[1])
	}
	return ctx.Err()
}

func (e *envBench) addFirst(key, name string, lat []time.Duration, st *stepTimes, built bool, notes string) {
	if !built {
		e.rows[key] = Row{Key: key, Case: name, Clients: 1, Skipped: "the environment's build failed"}
		return
	}
	st.lat = lat
	e.rows[key] = st.row(key, name, notes, 0)
}

// warmCase is one of the interleaved warm cases.
type warmCase struct {
	key, name string
	req       service.Request
	class     string
	env       envstore.Env // zero: the default environment
	check     func(*service.Result) string
	n         int
	st        stepTimes
}

// warm runs the warm cases interleaved, each run after every pool is full
// (untimed), each round in a rotated order: the environments and the
// default one meet the same machine.
func (e *envBench) warm(ctx context.Context, svc *service.Service, want map[string]int, pkgOK, imgOK bool, where string) {
	n, nNumpy := e.b.n, max(1, e.b.n/2)
	print1, numpy := service.Request{Code: Print1Code}, service.Request{Code: NumpyCode}
	// print(1) in a cell of the default data_science class, whose zygote
	// preloads numpy and pandas as the environment's does.
	preloaded := service.Request{Code: Print1Code, Profiles: []string{policy.DataScience}}
	inEnv := func(r service.Request, name string) service.Request { r.Environment = name; return r }
	cases := []*warmCase{
		{key: "env_default_print1_warm", name: "print(1), default environment", req: print1, class: policy.Basic, check: checkPrint1, n: n},
		{key: "env_default_preloaded_print1_warm", name: "print(1), default environment, numpy+pandas preloaded", req: preloaded, class: policy.DataScience, check: checkPrint1, n: n},
		{key: "env_print1_warm", name: "print(1) in " + envPackagesName, req: inEnv(print1, envPackagesName), class: policy.Basic, env: e.pkg, check: checkPrint1, n: n},
		{key: "env_image_print1_warm", name: "print(1) in " + envImageName, req: inEnv(print1, envImageName), class: policy.Basic, env: e.img, check: checkPrint1, n: n},
		{key: "env_default_numpy_warm", name: "numpy, default environment", req: numpy, class: policy.DataScience, check: checkNumpy, n: nNumpy},
		{key: "env_numpy_warm", name: "numpy in " + envPackagesName, req: inEnv(numpy, envPackagesName), class: policy.DataScience, env: e.pkg, check: checkNumpy, n: nNumpy},
	}
	built := map[string]bool{"": true, envPackagesName: pkgOK, envImageName: imgOK}
	var live []*warmCase
	for _, c := range cases {
		if built[c.req.Environment] {
			live = append(live, c)
		} else {
			e.rows[c.key] = Row{Key: c.key, Case: c.name, Clients: 1, Skipped: "the environment's build failed"}
		}
	}
	e.b.progress("environments: warm runs, interleaved (%d print(1), %d numpy each)", n, nNumpy)
	// Every pool full before each run: the default ones and the
	// environments' classes the first runs made.
	full := func(ctx context.Context) error {
		w := map[string]int{}
		for k, v := range want {
			w[k] = v
		}
		for _, c := range live {
			if c.env.ID != "" {
				if k := envPoolKey(svc, c.class, c.env); k != "" {
					w[k] = e.b.cfg.EnvPoolSize
				}
			}
		}
		return waitFull(ctx, svc, w, e.b.opts.PoolTimeout)
	}
	start := time.Now()
	for round := 0; round < n && ctx.Err() == nil; round++ {
		for j := range live {
			c := live[(round+j)%len(live)]
			if round >= c.n {
				continue
			}
			if err := full(ctx); err != nil {
				c.st.fail(err.Error())
				continue
			}
			var res *service.Result
			var err error
			c.st.add(timed(func() { res, err = svc.Execute(ctx, c.req) }))
			msg := describe(res, err)
			if msg == "" {
				msg = c.check(res)
			}
			if msg != "" {
				c.st.fail(msg)
			}
		}
	}
	wall := time.Since(start)
	for _, c := range live {
		notes := "latency only: interleaved with the other env_ warm cases, each run after every pool is full (untimed)"
		if c.key == "env_numpy_warm" && where != "" {
			notes += "; " + where
		}
		e.rows[c.key] = c.st.row(c.key, c.name+", pool full each run", notes, wall)
	}
}

// envPoolKey is the PoolStats key of env's class name, "" before the
// class is made.
func envPoolKey(svc *service.Service, class string, env envstore.Env) string {
	id := strings.TrimPrefix(env.ID, "sha256:")
	prefix := class + "@env:" + id[:min(12, len(id))]
	for k := range svc.PoolStats() {
		if strings.HasPrefix(k, prefix) {
			return k
		}
	}
	return ""
}

// skipRest marks every row not measured yet as skipped.
func (e *envBench) skipRest(why string) {
	for _, k := range EnvKeys() {
		if _, ok := e.rows[k]; !ok {
			e.rows[k] = Row{Key: k, Case: k, Clients: 1, Skipped: why}
		}
	}
}

// flush adds the rows to the report, in EnvKeys order.
func (e *envBench) flush() {
	e.skipRest("not measured: the bench stopped")
	for _, k := range EnvKeys() {
		e.b.rep.Rows = append(e.b.rep.Rows, e.rows[k])
	}
}

// zygoteMemory reads the memory of the default zygotes and of the
// environments' ones (found as they appeared).
func (e *envBench) zygoteMemory(pkg, img, data []int) []ZygoteMemory {
	env := map[int]string{}
	for _, p := range pkg {
		env[p] = envPackagesName
	}
	for _, p := range data {
		env[p] = envPackagesName
	}
	for _, p := range img {
		env[p] = envImageName
	}
	var out []ZygoteMemory
	for _, z := range zygotes() {
		z.Environment = env[z.PID]
		out = append(out, z)
	}
	return out
}

// hostWheelhouse packs the host's Debian numpy and pandas into wheels in
// dir (pandas needs numpy; dateutil and pytz are on the host root's path).
func hostWheelhouse(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, p := range []struct {
		name     string
		requires []string
	}{{"numpy", nil}, {"pandas", []string{"numpy"}}} {
		version, err := debianVersion(p.name)
		if err != nil {
			return "", err
		}
		tree := filepath.Join(hostDistPackages, p.name)
		if _, err := pipfixture.WheelFromTree(dir, p.name, version, map[string]string{p.name: tree}, p.requires); err != nil {
			return "", fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return dir, nil
}

// debianVersion is the version of the host's Debian package of a Python
// distribution, from its egg-info's name.
func debianVersion(name string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(hostDistPackages, name+"-*.egg-info"))
	if len(m) == 0 {
		return "", fmt.Errorf("the host has no %s in %s (apt-get install python3-%s)", name, hostDistPackages, name)
	}
	v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), name+"-"), ".egg-info")
	return v, nil
}

// minimalImage packs envfixture's minimal Python root (the host's python3
// and standard library, nothing else) as a docker-save tarball.
func minimalImage(work string) (string, error) {
	root := filepath.Join(work, "root")
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		return "", err
	}
	archive := filepath.Join(work, "image.tar")
	if err := envfixture.DirArchive(root, archive); err != nil {
		return "", err
	}
	return archive, os.RemoveAll(root)
}

// envTarget: a warm run in an environment is as fast as in the default
// one, like for like (p50 within 10%, interleaved runs): print(1) with
// nothing preloaded (the image's environment and the default basic
// class), numpy with numpy and pandas preloaded (the packages
// environment and the default data_science class).
func (r *Report) envTarget() Target {
	t := Target{Name: "warm runs in an environment as fast as in the default one (p50 within 10%)"}
	pairs := []struct{ what, env, def string }{
		{"print(1) in " + envImageName, "env_image_print1_warm", "env_default_print1_warm"},
		{"numpy in " + envPackagesName, "env_numpy_warm", "env_default_numpy_warm"},
		{"print(1) in " + envPackagesName, "env_print1_warm", "env_default_preloaded_print1_warm"},
	}
	var parts []string
	t.Met = true
	for _, p := range pairs {
		env, def := r.Row(p.env), r.Row(p.def)
		if env == nil || def == nil || env.Runs == 0 || def.Runs == 0 {
			t.Measured, t.Met = "not measured", false
			return t
		}
		parts = append(parts, fmt.Sprintf("%s %.2f ms vs %.2f ms", p.what, env.P50, def.P50))
		t.Met = t.Met && env.Errors == 0 && def.Errors == 0 && env.P50 <= def.P50*1.1
	}
	t.Measured = strings.Join(parts, "; ")
	if env, def := r.Row("env_print1_warm"), r.Row("env_default_print1_warm"); env.Runs > 0 && def.Runs > 0 {
		t.Note = fmt.Sprintf("print(1) in %s, whose every class pre-imports numpy and pandas, vs the default basic class: %.2f ms vs %.2f ms", envPackagesName, env.P50, def.P50)
	}
	return t
}

// writeEnvZygotes writes the zygotes' memory, the environments' by the
// default ones.
func (r *Report) writeEnvZygotes(ew io.Writer) {
	if len(r.EnvZygotes) == 0 {
		return
	}
	fmt.Fprintln(ew)
	fmt.Fprintln(ew, "Zygotes (after the environment rows; a class's cells are forked from its zygote and share its pages):")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "environment\tclass\tpre-imports\tPSS MiB\tRSS MiB")
	for _, z := range r.EnvZygotes {
		env, pre := z.Environment, z.Preload
		if env == "" {
			env = "(default)"
		}
		if pre == "" {
			pre = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", env, z.Class, pre, mib(z.PSS), mib(z.RSS))
	}
	_ = tw.Flush()
}

// stampedLog passes a build's log on, each line with the time since the
// build started: where a build spends its time.
type stampedLog struct {
	w      io.Writer
	prefix string
	start  time.Time
}

func (l *stampedLog) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		fmt.Fprintf(l.w, "%s+%.1fs %s\n", l.prefix, time.Since(l.start).Seconds(), line)
	}
	return len(p), nil
}
