# codecage notebook: what a Jupyter kernel adds to a cell, for E2B's code
# interpreter: display() results, matplotlib figures as images with their
# structured chart (E2B's "e2b/chart"), a DataFrame's "e2b/data", the
# IPython.display module when IPython is not installed, and line magics.
# The harness compiles this file only when a run first needs it (module
# _codecage_notebook, with _h the harness's globals): most runs never do.
import sys

# Bounds on one run's display outputs, all together; the reply stays
# under the supervisor's frame limit (runtime.MaxReplyBytes).
MAX_OUTPUTS = 100
MAX_OUTPUT_BYTES = 4 << 20
# A chart or a DataFrame's data, as JSON.
MAX_STRUCTURED_BYTES = 1 << 20


class UsageError(Exception):
    """A magic that does not exist or was misused (IPython's UsageError)."""


UsageError.__module__ = "builtins"  # its traceback says "UsageError: ...", as IPython's


# ---- display ----


def display(*objs, include=None, exclude=None, metadata=None, transient=None, display_id=None, raw=False, clear=False, **kwargs):
    out = _h["_outputs"]
    if out is None:
        # No notebook asked for the outputs: as IPython outside a kernel.
        print(*objs)
        return None
    for obj in objs:
        if raw and type(obj) is dict:
            bundle = _raw_bundle(obj)
        else:
            bundle = _h["_display"](obj, _limit())
        if include:
            bundle = {k: v for k, v in bundle.items() if k in include}
        if exclude:
            bundle = {k: v for k, v in bundle.items() if k not in exclude}
        emit(bundle)
    return None


def _raw_bundle(obj):
    # display(raw=True) of a bundle: its str values as they are (emit
    # weighs them), others as JSON within their bound, or left out.
    bundle = {}
    for k, v in obj.items():
        if type(k) is not str or len(k) > 200:
            continue
        if type(v) is not str:
            try:
                v = _h["_json"](v, MAX_STRUCTURED_BYTES)
            except Exception:
                print("codecage: display output %r left out: not JSON within %d bytes" % (k, MAX_STRUCTURED_BYTES), file=sys.stderr)
                continue
        bundle[k] = v
    return bundle


def _limit():
    return _h["_result_limit"][0]


def emit(bundle, after=False):
    out = _h["_outputs"]
    if out is None or not bundle:
        return
    size = sum(len(v) for v in bundle.values())
    used = _h["_outputs_bytes"]
    if len(out) >= MAX_OUTPUTS:
        if len(out) == MAX_OUTPUTS:
            print("codecage: more display outputs left out: at most %d are returned" % MAX_OUTPUTS, file=sys.stderr)
            out.append(None)  # marks that the note was given
        return
    if used[0] + size > MAX_OUTPUT_BYTES:
        print("codecage: a display output left out: the outputs exceed %d bytes" % MAX_OUTPUT_BYTES, file=sys.stderr)
        return
    used[0] += size
    out.append({"data": bundle, "after_result": True} if after else {"data": bundle})


def extra_formats(value, out):
    # The formats E2B's kernel adds: a DataFrame's data, a figure's image
    # and chart. Added to out (a bundle) in place.
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, pandas.DataFrame):
        data = _frame_data(value, pandas)
        if data is not None:
            out["e2b/data"] = data
        return
    figure = sys.modules.get("matplotlib.figure")
    if figure is not None and isinstance(value, figure.Figure):
        out.update(figure_bundle(value))
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            plt.close(value)  # shown as the result: not again after it


def _frame_data(frame, pandas):
    import math

    def plain(v):
        if isinstance(v, pandas.Timestamp):
            return v.isoformat()
        if hasattr(v, "item") and type(v).__module__ == "numpy":
            v = v.item()
        if v is None or type(v) in (bool, int, str):
            return v
        if type(v) is float:
            return v if math.isfinite(v) else None
        return str(v)

    rows, cols = frame.shape
    if 2 * rows * cols > MAX_STRUCTURED_BYTES:
        return None  # a value and a comma each, at least: known before it is built
    try:
        columns = frame.to_dict(orient="list")
        data = {str(k): [plain(v) for v in col] for k, col in columns.items()}
        return _h["_json"](data, MAX_STRUCTURED_BYTES)
    except Exception:
        return None  # too big, or not representable: html and text remain


# ---- matplotlib ----


def figure_bundle(fig):
    # A figure as the inline backend shows it: its repr, its PNG, and (E2B)
    # its chart, extracted after the drawing, which settles tick labels.
    import io

    try:
        text = repr(fig)
    except Exception:
        text = "<Figure>"
    bundle = {"text/plain": text}
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        bundle["image/png"] = _base64(buf)
    except Exception as e:  # a broken figure must not lose the run's result
        print("codecage: could not render a figure: %s" % e, file=sys.stderr)
        return {}
    try:
        chart = figure_chart(fig)
        if chart is not None:
            bundle["e2b/chart"] = _h["_json"](chart, MAX_STRUCTURED_BYTES)
    except Exception:
        pass  # E2B leaves the chart out too when it cannot read one
    return bundle


def show_figures(after=False):
    # plt.show() in a notebook: every open figure becomes an output, then
    # closes (the inline backend's flush).
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        nums = plt.get_fignums()
    except Exception:
        return
    for num in nums:
        try:
            emit(figure_bundle(plt.figure(num)), after)
        except Exception as e:
            print("codecage: could not render figure %s: %s" % (num, e), file=sys.stderr)
    try:
        plt.close("all")
    except Exception:
        pass


def image_bundle(image):
    # A PIL image shown or saved: its repr and its PNG, as IPython shows it.
    import io

    try:
        text = repr(image)
        buf = io.BytesIO()
        if image.mode not in ("1", "L", "LA", "I", "P", "RGB", "RGBA"):
            image = image.convert("RGBA")
        image.save(buf, format="PNG")
        return {"text/plain": text, "image/png": _base64(buf)}
    except Exception as e:  # a broken image must not lose the run's result
        print("codecage: could not render an image: %s" % e, file=sys.stderr)
        return {}


def _base64(buf):
    # An image's base64, or ValueError when it could not be an output:
    # known from its size before it is encoded.
    import base64

    data = buf.getbuffer()
    if (len(data) + 2) // 3 * 4 > MAX_OUTPUT_BYTES:
        raise ValueError("its PNG has %d bytes, over the outputs' bound of %d" % (len(data), MAX_OUTPUT_BYTES))
    return base64.b64encode(data).decode("ascii")


# ---- charts: the structure E2B's code interpreter gives a figure ----


def figure_chart(fig):
    axes = fig.get_axes()
    if not axes or not any(ax.has_data() for ax in axes):
        return None
    if len(axes) == 1:
        return axes_chart(axes[0])
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    return {"type": "superchart", "title": title, "elements": [axes_chart(ax) for ax in axes]}


def _grid_line(line):
    x, y = line.get_xdata(), line.get_ydata()
    return len(x) == 2 and len(y) == 2 and (x[0] == x[1] or y[0] == y[1])


def chart_kind(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    children = [c for c in _artists(ax) if not isinstance(c, Text)]
    if all(isinstance(c, Line2D) for c in children):
        return "line"
    if all(isinstance(c, (PathPatch, Line2D)) for c in children):
        return "box_and_whisker"
    children = [c for c in children if not (isinstance(c, Line2D) and _grid_line(c))]
    for kind, cls in (("scatter", PathCollection), ("pie", Wedge), ("bar", Rectangle)):
        if all(isinstance(c, cls) for c in children):
            return kind
    return "unknown"


def _artists(ax):
    # What the code added to the axes (not its spines, axis, legend).
    children = getattr(ax, "_children", None)
    if children is None:
        children = list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.texts) + list(ax.images)
    return children


def axes_chart(ax):
    kind = chart_kind(ax)
    title = ax.get_title() or None
    if kind == "pie":
        return {"type": "pie", "title": title, "elements": _pie(ax)}
    if kind == "unknown":
        return {"type": "unknown", "title": title, "elements": []}
    chart = {"type": kind, "title": title}
    chart.update(_labels(ax))
    if kind in ("line", "scatter"):
        chart.update(_ticks(ax))
        chart["elements"] = _lines(ax) if kind == "line" else _scatters(ax)
    elif kind == "bar":
        chart["elements"] = _bars(ax, chart)
    else:
        chart["elements"] = _boxes(ax, chart)
    return chart


def _labels(ax):
    import re

    out = {}
    for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        out[axis + "_label"] = label or None
        unit = None
        if label:
            # "Time (s)" or "Length [m]": the unit in brackets.
            m = re.search(r"\s\((.*?)\)|\[(.*?)\]", label)
            if m:
                unit = m.group(1) or m.group(2)
        out[axis + "_unit"] = unit
    return out


def _swap_axes(chart):
    for a, b in (("x_label", "y_label"), ("x_unit", "y_unit")):
        chart[a], chart[b] = chart[b], chart[a]


def _date_converter(axis):
    import matplotlib.dates as dates

    get = getattr(axis, "get_converter", None)
    conv = get() if get is not None else getattr(axis, "converter", None)
    kinds = tuple(k for k in (getattr(dates, n, None) for n in ("_SwitchableDateConverter", "DateConverter", "ConciseDateConverter")) if isinstance(k, type))
    return conv is not None and isinstance(conv, kinds)


def _ticks(ax):
    import matplotlib.dates as dates

    out = {}
    for axis, obj, scale, ticks, labels in (
        ("x", ax.xaxis, ax.get_xscale(), ax.get_xticks(), ax.get_xticklabels()),
        ("y", ax.yaxis, ax.get_yscale(), ax.get_yticks(), ax.get_yticklabels()),
    ):
        labels = [t.get_text() for t in labels]
        is_date = _date_converter(obj)
        if is_date:
            values = [dates.num2date(t).isoformat() for t in ticks]
            kind = "datetime"
        else:
            values = [_point(t) for t in ticks]
            kind = scale
            if scale == "linear":
                # Ticks 0..n-1 labelled otherwise than by their numbers:
                # the categories of a categorical axis.
                kind = "categorical"
                for i, (tick, label) in enumerate(zip(values, labels)):
                    if not (isinstance(tick, float) and tick == i and str(i) != label):
                        kind = "linear"
                        break
        out[axis + "_ticks"] = values
        out[axis + "_tick_labels"] = labels
        out[axis + "_scale"] = kind
    return out


def _point(v):
    import datetime

    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, np.datetime64):
        return str(v.astype("datetime64[s]"))
    if isinstance(v, str):
        return str(v)  # numpy.str_ (a categorical axis's values) is no str to _json
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _lines(ax):
    out = []
    for line in ax.get_lines():
        if _grid_line(line):
            continue
        label = str(line.get_label())
        if label.startswith("_child") and label[6:].isdigit():
            label = "Line %d" % int(label[6:])
        points = [[_point(x), _point(y)] for x, y in zip(line.get_xdata(), line.get_ydata())]
        out.append({"label": label, "points": points})
    return out


def _scatters(ax):
    out = []
    for collection in ax.collections:
        points = [[_point(x), _point(y)] for x, y in collection.get_offsets()]
        out.append({"label": str(collection.get_label()), "points": points})
    return out


def _bars(ax, chart):
    out = []
    swapped = False
    for container in ax.containers:
        group = str(container.get_label())
        if group.startswith("_container") and group[10:].isdigit():
            group = "Group %d" % int(group[10:])
        heights = [r.get_height() for r in container]
        if heights and all(h == heights[0] for h in heights):
            # Bars of one height: horizontal bars, read along y.
            if not swapped:
                _swap_axes(chart)
                swapped = True
            labels = [t.get_text() for t in ax.get_yticklabels()]
            values = [r.get_width() for r in container]
        else:
            labels = [t.get_text() for t in ax.get_xticklabels()]
            values = heights
        for label, value in zip(labels, values):
            out.append({"label": label, "group": group, "value": float(value)})
    return out


def _round(x):
    # Eight significant digits, as E2B's extractor rounds: the box's edges
    # and the lines' ends then compare equal where they meet.
    from decimal import Decimal, localcontext

    d = Decimal(str(x))
    with localcontext() as ctx:
        ctx.prec = max(1, 8 - d.adjusted())
        return +d


def _boxes(ax, chart):
    labels = [t.get_text() for t in ax.get_xticklabels()]
    boxes = []
    for label, patch in zip(labels, ax.patches):
        v = patch.get_path().vertices
        xs = [_round(x) for x in v[:, 0]]
        ys = [_round(y) for y in v[:, 1]]
        x, y = min(xs), min(ys)
        boxes.append({"x": x, "y": y, "label": label, "width": max(xs) - x, "height": max(ys) - y, "outliers": []})
    if not boxes:
        return []
    vertical = all(b["height"] == boxes[0]["height"] for b in boxes)
    if vertical:
        _swap_axes(chart)
        for b in boxes:
            b["x"], b["y"], b["width"], b["height"] = b["y"], b["x"], b["height"], b["width"]

    def holding(lo, hi):
        for b in boxes:
            if b["x"] <= lo <= hi <= b["x"] + b["width"]:
                return b
        return None

    for line in ax.lines:
        xs = [_round(x) for x in line.get_xdata()]
        ys = [_round(y) for y in line.get_ydata()]
        if vertical:
            xs, ys = ys, xs
        if len(xs) == 1:
            b = holding(xs[0], xs[0])
            if b is not None:
                b["outliers"].append(ys[0])  # a flier
            continue
        if len(ys) != 2 or len(xs) != 2:
            continue
        b = holding(xs[0], xs[1])
        if b is None:
            continue
        if ys[0] == ys[1] and b["y"] <= ys[0] <= b["y"] + b["height"]:
            b["median"] = ys[0]
            continue
        lo, hi = min(ys), max(ys)
        if hi == b["y"]:
            b["whisker_lower"] = lo
        elif lo == b["y"] + b["height"]:
            b["whisker_upper"] = hi
    return [
        {
            "label": b["label"],
            "min": float(b["whisker_lower"]),
            "first_quartile": float(b["y"]),
            "median": float(b["median"]),
            "third_quartile": float(b["y"] + b["height"]),
            "max": float(b["whisker_upper"]),
            "outliers": [float(o) for o in b["outliers"]],
        }
        for b in boxes
    ]


def _pie(ax):
    from decimal import Decimal

    out = []
    for wedge in ax.patches:
        angle = abs(_round(Decimal(float(wedge.theta2)) - Decimal(float(wedge.theta1))))
        out.append({"label": str(wedge.get_label()), "angle": float(angle), "radius": float(wedge.r)})
    return out


# ---- IPython.display, when IPython is not installed ----


def ipython_modules():
    # IPython, IPython.display, IPython.core.display: display() and the
    # objects programs pass to it, each with the _repr_*_ method IPython's.
    ipython = type(sys)("IPython")
    ipython.__path__ = []
    ipython.__version__ = "8.0.0+codecage"
    ipython.display = mod = type(sys)("IPython.display")
    mod.display = display
    mod.__all__ = ["display", "HTML", "Markdown", "SVG", "Image", "JSON", "Latex", "Math", "Javascript"]

    def reprs(name, mime_method, doc):
        def __init__(self, data=None, url=None, filename=None, metadata=None, **kwargs):
            if data is None and filename is not None:
                with open(filename, "rb" if name == "Image" else "r") as f:
                    data = f.read()
            self.data, self.url, self.filename, self.metadata = data, url, filename, metadata

        def render(self):
            return self.data

        def __repr__(self):
            return "<IPython.core.display.%s object>" % name

        cls = type(name, (), {"__init__": __init__, mime_method: render, "__repr__": __repr__, "__doc__": doc, "__module__": "IPython.core.display"})
        setattr(mod, name, cls)
        return cls

    reprs("HTML", "_repr_html_", "HTML to display.")
    reprs("Markdown", "_repr_markdown_", "Markdown to display.")
    reprs("SVG", "_repr_svg_", "An SVG image to display.")
    reprs("Latex", "_repr_latex_", "LaTeX to display.")
    reprs("Javascript", "_repr_javascript_", "JavaScript to display.")
    math = reprs("Math", "_repr_latex_", "A LaTeX formula to display.")
    math._repr_latex_ = lambda self: "$\\displaystyle %s$" % str(self.data).strip("$")
    json_cls = reprs("JSON", "_repr_json_", "JSON data to display.")
    image = reprs("Image", "_repr_png_", "A PNG or JPEG image to display.")

    def image_png(self):
        data = self.data
        return data if isinstance(data, bytes) and data[:8] == b"\x89PNG\r\n\x1a\n" else None

    def image_jpeg(self):
        data = self.data
        return data if isinstance(data, bytes) and data[:2] == b"\xff\xd8" else None

    image._repr_png_, image._repr_jpeg_ = image_png, image_jpeg
    json_cls._repr_json_ = lambda self: self.data
    mod.clear_output = lambda wait=False: None
    mod.update_display = lambda obj, display_id=None, **kwargs: display(obj)
    core = type(sys)("IPython.core")
    core.__path__ = []
    core.display = mod
    core.display_functions = mod
    error = type(sys)("IPython.core.error")
    error.UsageError = UsageError
    core.error = error
    ipython.core = core
    ipython.get_ipython = lambda: None
    return {"IPython": ipython, "IPython.display": mod, "IPython.core": core, "IPython.core.display": mod, "IPython.core.display_functions": mod, "IPython.core.error": error}


# ---- magics ----


def magic(name, args, body=None):
    if name == "!":
        return shell(args)
    if name in ("%pip", "%conda"):
        return pip(args)
    if name in ("%%bash", "%%sh", "%%script") and body is not None:
        return shell(body if name != "%%script" else body, script=args if name == "%%script" else None)
    if name == "%matplotlib":
        return None  # figures are always shown inline
    if name in ("%time", "%%time"):
        return timed(body if body is not None else args)
    if name == "%timeit":
        return timeit(args)
    if name == "%cd":
        import os

        os.chdir(os.path.expanduser(args or "~"))
        print(os.getcwd())
        return None
    if name == "%pwd":
        import os

        return os.getcwd()
    if name == "%env":
        return env(args)
    if name.startswith("%%"):
        raise UsageError("Cell magic `%s` not found." % name)
    raise UsageError("Line magic function `%s` not found." % name)


def _main_globals():
    return sys.modules["__main__"].__dict__


def shell(command, script=None):
    import os

    if script is not None and script.strip() not in ("bash", "sh"):
        raise UsageError("%%%%script %s: only bash and sh scripts run here" % script)
    if not command.strip():
        return None
    res = _h["_supervisor_call"]("!shell", {"command": command, "cwd": os.getcwd()})
    if not res.get("ok"):
        raise PermissionError(res.get("error") or "the command was refused")
    value = _value(res)
    sys.stdout.write(value.get("stdout", ""))
    sys.stderr.write(value.get("stderr", ""))
    return None


def pip(args):
    import shlex

    words = shlex.split(args)
    if not words or words[0] != "install":
        raise UsageError("only `pip install PACKAGE ...` runs here: it installs through codecage's pip_install")
    packages = []
    for w in words[1:]:
        if w in ("-q", "--quiet", "-U", "--upgrade", "--no-cache-dir", "--user", "--progress-bar=off", "-qq", "--no-input"):
            continue
        if w.startswith("-"):
            raise UsageError("pip install option %s is not supported here (packages are installed by codecage's pip_install)" % w)
        packages.append(w)
    if not packages:
        raise UsageError("pip install: name a package")
    for spec in packages:
        cut = len(spec)
        for op in "=<>!~":
            i = spec.find(op)
            if i >= 0:
                cut = min(cut, i)
        res = _h["_supervisor_call"]("!pip", {"package": spec[:cut].strip(), "version": spec[cut:].strip()})
        if not res.get("ok"):
            raise PermissionError(res.get("error") or "the installation was refused")
        value = _value(res)
        if value.get("success"):
            print(value.get("message") or "Successfully installed %s" % spec)
        else:
            print("ERROR: %s" % (value.get("message") or "the installation failed"), file=sys.stderr)
    import importlib

    importlib.invalidate_caches()  # the new package's directory is seen
    return None


def _value(res):
    import json

    try:
        value = json.loads(res.get("value") or "{}")
    except ValueError:
        value = {}
    return value if type(value) is dict else {}


def _format_time(seconds):
    # As IPython prints durations: three significant digits and a unit.
    if seconds >= 60:
        minutes, s = divmod(seconds, 60)
        return "%dmin %.0fs" % (minutes, s)
    for unit, scale in (("s", 1), ("ms", 1e3), ("µs", 1e6), ("ns", 1e9)):
        if seconds >= 1 / scale or unit == "ns":
            return "%.3g %s" % (seconds * scale, unit)


def timed(code):
    import os
    import time

    g = _main_globals()
    t0, c0 = time.perf_counter(), os.times()
    value = None
    tree = compile(code, "<timed>", "exec", 0x400)
    if tree.body and type(tree.body[-1]).__name__ == "Expr":
        import ast

        last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<timed>", "exec"), g)
        value = eval(compile(last, "<timed>", "eval"), g)
    else:
        exec(compile(tree, "<timed>", "exec"), g)
    c1, t1 = os.times(), time.perf_counter()
    user, system = c1.user - c0.user, c1.system - c0.system
    print("CPU times: user %s, sys: %s, total: %s" % (_format_time(user), _format_time(system), _format_time(user + system)))
    print("Wall time: %s" % _format_time(t1 - t0))
    return value


def timeit(stmt):
    import math
    import timeit as timeit_module

    if not stmt.strip():
        raise UsageError("%timeit: a statement to time is needed")
    timer = timeit_module.Timer(stmt, globals=_main_globals())
    number, _ = timer.autorange()
    runs = [t / number for t in timer.repeat(repeat=7, number=number)]
    mean = sum(runs) / len(runs)
    std = math.sqrt(sum((r - mean) ** 2 for r in runs) / len(runs))
    print("%s ± %s per loop (mean ± std. dev. of 7 runs, %d loop%s each)" % (_format_time(mean), _format_time(std), number, "" if number == 1 else "s"))
    return None


def env(args):
    import os

    args = args.strip()
    if not args:
        return dict(os.environ)
    if "=" in args or " " in args:
        name, _, value = args.replace("=", " ", 1).partition(" ")
        os.environ[name.strip()] = value.strip()
        print("env: %s=%s" % (name.strip(), value.strip()))
        return None
    return os.environ.get(args)
