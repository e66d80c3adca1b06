# codecage validator: static analysis behind validate_code. It runs inside
# the jail as `python3 -I -B -X utf8 -c <this>`, reads ONE request frame from
# fd 3 (4-byte big-endian length + a marshal-encoded dict), writes ONE reply
# frame of UTF-8 JSON and exits 0. It never runs the code.
#
# Request: {"code", "allowed_imports" (None: policy off), "profile",
#           "profiles" {name: [modules]}, "enabled_profiles" [names],
#           "profile_settings" {name: "SANDBOX_ENABLE_X=true"}}
# Reply:   {"validation": {"valid", "errors", "warnings", "message"},
#           "analysis": {"line_count", "character_count",
#                        "estimated_complexity", "imports",
#                        "required_profiles", "functions", "classes",
#                        "loops", "max_nesting"},
#           "syntax_error": {"message", "line", "column", "text"} | null,
#           "recommendations": [...]}
#
# Errors are only what stops the code from running as asked: syntax errors
# and imports the policy refuses. Everything else is a warning: the kernel
# sandbox, not this file, is the boundary, and the analysis is advisory (it
# cannot see through eval, getattr with computed names, and the like).
#
# The tree is walked with an explicit stack: ast accepts trees nested ~2,700
# deep, far past Python's recursion limit. Every failure, including
# RecursionError and MemoryError, still ends in a well-formed reply.

# Bounds on the reply (the supervisor caps frames at 4 MiB).
_MAX_ITEMS = 100  # errors, and warnings, each
_MAX_RECOMMENDATIONS = 20
_MAX_TEXT = 300  # characters of any one message or source excerpt
_MAX_KEPT = 1000  # errors, and warnings, collected before sorting by line

# Attributes that reach frames, code objects, globals or the class tree:
# the raw material of Python jail escapes.
_ESCAPE_ATTRS = frozenset(
    (
        "__subclasses__", "__globals__", "__builtins__", "__code__", "__bases__", "__base__",
        "__mro__", "f_globals", "f_locals", "f_builtins", "f_back", "gi_frame", "cr_frame",
        "ag_frame", "tb_frame",
    )
)

# Builtins looked at when called by their plain name (and not rebound).
_BUILTIN_CALLS = frozenset(
    ("eval", "exec", "compile", "__import__", "open", "getattr", "setattr", "delattr",
     "globals", "locals", "vars", "input")
)

# Last attribute of calls worth resolving against the imports.
_ATTR_CALLS = frozenset(
    ("import_module", "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
     "write", "writelines", "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp",
     "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp",
     "spawnvpe")
)

_OUTPUT_CALLS = frozenset(("print", "pprint", "pp"))
_EXIT_NAMES = frozenset(("exit", "quit", "_exit", "abort"))

_CONTAINED = "the kernel sandbox still contains it"


def _clip(text, limit=_MAX_TEXT):
    text = str(text)
    if len(text) > limit:
        return text[:limit] + "..."
    return text


def _few(items, most=5):
    """'a, b, c' of the first few distinct items, with how many more."""
    out = []
    more = 0
    for x in items:
        if x in out:
            continue
        if len(out) < most:
            out.append(x)
        else:
            more += 1
    return ", ".join(out) + (" and %d more" % more if more else "")


def _line_count(code):
    # Python reads \r\n and a lone \r as line ends too.
    if "\r" in code:
        code = code.replace("\r\n", "\n").replace("\r", "\n")
    n = code.count("\n")
    if code and not code.endswith("\n"):
        n += 1
    return n


class _Func:
    # A method calls itself as self_name.name(); a plain name() call in a
    # method is a global function, so plain is None there.
    __slots__ = ("name", "plain", "self_name", "line", "recursive")

    def __init__(self, name, self_name, line, method):
        self.name = name
        self.plain = None if method else name
        self.self_name = self_name
        self.line = line
        self.recursive = False


class _Loop:
    __slots__ = ("parent", "line", "forever", "escapes")

    def __init__(self, parent, line, forever):
        self.parent = parent
        self.line = line
        self.forever = forever
        self.escapes = False


# Methods are the functions defined directly in a class body.
_CLASS_BODY = _Func(None, None, 0, True)


class _Facts:
    """What one walk of the tree collects."""

    def __init__(self):
        self.statements = 0
        self.functions = 0
        self.classes = 0
        self.loops = 0
        self.max_nesting = 0
        self.imports = []  # (line, dotted name, how): how is "import" or a call name
        self.bindings = {}  # name -> dotted module path it was imported as
        self.bound = set()  # every name the code binds itself
        self.calls = []  # (line, plain name or None, dotted name or None, Call node)
        self.escape_attrs = {}  # line -> set of attribute names
        self.class_attr_lines = set()
        self.funcs = []
        self.forever_loops = []
        self.has_output = False


# Fields that never hold nodes.
_SCALAR_FIELDS = frozenset(
    ("id", "attr", "name", "arg", "asname", "module", "level", "kind", "simple", "is_async", "conversion",
     "type_comment", "rest", "kwd_attrs", "tag", "ctx", "op")
)
# List fields that may hold None ({**a} keys, keyword-only args without default).
_SPARSE_FIELDS = frozenset(("keys", "kw_defaults"))
# Statement fields holding statements, or clauses holding statements.
_BODY_FIELDS = frozenset(("body", "orelse", "finalbody"))
_CLAUSE_FIELDS = frozenset(("cases",))


def _field_plan(node, is_stmt):
    """(field, kind) pairs for node's class: 0 one optional node, 1 a list,
    2 a list with holes, 3 statements, 4 match cases. Only statements have kinds 3 and 4 (IfExp and Lambda have a
    body and an orelse too, of expressions)."""
    plan = []
    for f in node._fields:
        if f in _SCALAR_FIELDS:
            continue
        if is_stmt and f in _BODY_FIELDS:
            plan.append((f, 3))
        elif is_stmt and f in _CLAUSE_FIELDS:
            plan.append((f, 4))
        elif f in _SPARSE_FIELDS:
            plan.append((f, 2))
        else:
            plan.append((f, 1 if getattr(node, f, None).__class__ is list else 0))
    return plan


def _walk(tree, ast):
    """One pass over the tree, statements on an explicit stack; the
    expressions of each statement in an inner loop."""
    facts = _Facts()
    Name, Attribute, Call, Constant = ast.Name, ast.Attribute, ast.Call, ast.Constant
    Load, arg_t, Lambda = ast.Load, ast.arg, ast.Lambda
    FunctionDef, AsyncFunctionDef, ClassDef = ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef
    For, AsyncFor, While, If = ast.For, ast.AsyncFor, ast.While, ast.If
    Import, ImportFrom, Break = ast.Import, ast.ImportFrom, ast.Break
    Yield, YieldFrom, MatchSingleton = ast.Yield, ast.YieldFrom, ast.MatchSingleton
    Global, Nonlocal = ast.Global, ast.Nonlocal
    leaves_loops = {ast.Return, ast.Raise}
    tries = {ast.Try, getattr(ast, "TryStar", ast.Try)}
    comprehensions = {ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp}
    binders = {ast.MatchAs: "name", ast.MatchStar: "name", ast.MatchMapping: "rest"}
    splans = {}  # statement class -> plan
    eplans = {}  # expression (or pattern, argument...) class -> plan

    bound = facts.bound
    escape_attrs = facts.escape_attrs
    exprs = []
    epop, epush, eextend = exprs.pop, exprs.append, exprs.extend
    # Entries: (statement, depth of enclosing compound statements, function,
    # innermost loop, whether a try with handlers encloses it in the function:
    # a loop there may well end by an exception).
    stack = [(n, 0, None, None, False) for n in reversed(tree.body)]
    pop, push = stack.pop, stack.append
    statements = 0
    while stack:
        node, depth, fn, loop, guarded = pop()
        statements += 1
        t = node.__class__
        d = depth
        if t is Import:
            for a in node.names:
                facts.imports.append((node.lineno, a.name, "import"))
                if a.asname:
                    facts.bindings[a.asname] = a.name
                    bound.add(a.asname)
                else:
                    top = a.name.partition(".")[0]
                    facts.bindings[top] = top
                    bound.add(top)
            continue
        if t is ImportFrom:
            relative = node.level or not node.module
            if not relative:
                facts.imports.append((node.lineno, node.module, "import"))
            for a in node.names:
                if a.name == "*":
                    continue
                local = a.asname or a.name
                bound.add(local)
                if not relative:
                    facts.bindings[local] = node.module + "." + a.name
            continue
        if t is Global or t is Nonlocal:
            continue
        if t in leaves_loops:
            _escape(loop)
        if t is Break:
            if loop is not None:
                loop.escapes = True
            continue
        elif t is For or t is AsyncFor or t is While:
            facts.loops += 1
            d = depth + 1
            forever = t is While and not guarded and node.test.__class__ is Constant and bool(node.test.value)
            body_loop = _Loop(loop, node.lineno, forever)
            if forever:
                facts.forever_loops.append(body_loop)
            for c in reversed(node.orelse):
                push((c, d, fn, loop, guarded))
            for c in reversed(node.body):
                push((c, d, fn, body_loop, guarded))
            if t is While:
                epush(node.test)
            else:
                epush(node.iter)
                epush(node.target)
        elif t is If:
            d = depth + 1
            orelse = node.orelse
            if len(orelse) == 1 and orelse[0].__class__ is If:
                push((orelse[0], depth, fn, loop, guarded))  # elif: same depth
            else:
                for c in reversed(orelse):
                    push((c, d, fn, loop, guarded))
            for c in reversed(node.body):
                push((c, d, fn, loop, guarded))
            epush(node.test)
        elif t is FunctionDef or t is AsyncFunctionDef:
            facts.functions += 1
            bound.add(node.name)
            d = depth + 1
            self_name = None
            if fn is _CLASS_BODY:
                a = node.args
                params = a.posonlyargs + a.args
                static = any(x.__class__ is Name and x.id == "staticmethod" for x in node.decorator_list)
                if params and not static:
                    self_name = params[0].arg
            info = _Func(node.name, self_name, node.lineno, fn is _CLASS_BODY)
            facts.funcs.append(info)
            for c in reversed(node.body):
                push((c, d, info, None, False))
            eextend(node.decorator_list)
            epush(node.args)
            if node.returns is not None:
                epush(node.returns)
        elif t is ClassDef:
            facts.classes += 1
            bound.add(node.name)
            d = depth + 1
            for c in reversed(node.body):
                push((c, d, _CLASS_BODY, None, False))
            eextend(node.decorator_list)
            eextend(node.bases)
            eextend(node.keywords)
        elif t in tries:
            d = depth + 1
            for c in reversed(node.finalbody):
                push((c, d, fn, loop, guarded))
            for c in reversed(node.orelse):
                push((c, d, fn, loop, guarded))
            for h in reversed(node.handlers):
                for c in reversed(h.body):
                    push((c, d, fn, loop, guarded))
                if h.name:
                    bound.add(h.name)
                if h.type is not None:
                    epush(h.type)
            for c in reversed(node.body):
                push((c, d, fn, loop, guarded or bool(node.handlers)))
        else:
            plan = splans.get(t)
            if plan is None:
                plan = splans[t] = _field_plan(node, True)
            for f, k in plan:
                v = getattr(node, f)
                if k == 0:
                    if v is not None:
                        epush(v)
                elif k == 1:
                    eextend(v)
                elif k == 3:
                    if v:
                        d = depth + 1
                        for c in reversed(v):
                            push((c, d, fn, loop, guarded))
                elif k == 4:
                    # match cases: a pattern and guard, a body one level down
                    d = depth + 1
                    for case in reversed(v):
                        for c in reversed(case.body):
                            push((c, d, fn, loop, guarded))
                        epush(case.pattern)
                        if case.guard is not None:
                            epush(case.guard)
                else:
                    eextend([x for x in v if x is not None])
        if d > facts.max_nesting:
            facts.max_nesting = d

        # The statement's expressions (none of them holds a statement).
        while exprs:
            n = epop()
            t = n.__class__
            if t is Name:
                if n.ctx.__class__ is not Load:
                    bound.add(n.id)
                elif n.id == "__builtins__":
                    escape_attrs.setdefault(n.lineno, set()).add("__builtins__")
                continue
            if t is Constant:
                continue
            if t is Attribute:
                attr = n.attr
                if attr in _ESCAPE_ATTRS:
                    escape_attrs.setdefault(n.lineno, set()).add(attr)
                elif attr == "__class__":
                    facts.class_attr_lines.add(n.lineno)
                epush(n.value)
                continue
            if t is Call:
                _note_call(n, fn, loop, facts, Name, Attribute)
            elif t is arg_t:
                bound.add(n.arg)
            elif t is Lambda:
                facts.functions += 1
            elif t in comprehensions:
                facts.loops += len(n.generators)
            elif t is Yield or t is YieldFrom:
                _escape(loop)
            elif t is MatchSingleton:
                continue
            else:
                field = binders.get(t)
                if field is not None:
                    name = getattr(n, field, None)
                    if name:
                        bound.add(name)
            plan = eplans.get(t)
            if plan is None:
                plan = eplans[t] = _field_plan(n, False)
            for f, k in plan:
                v = getattr(n, f)
                if k == 0:
                    if v is not None:
                        epush(v)
                elif k == 1:
                    eextend(v)
                else:
                    eextend([x for x in v if x is not None])
    facts.statements = statements
    return facts


def _dotted(node, Name, Attribute):
    """'a.b.c' for an attribute chain rooted at a name, else None."""
    parts = []
    while node.__class__ is Attribute:
        parts.append(node.attr)
        node = node.value
    if node.__class__ is not Name:
        return None
    parts.append(node.id)
    parts.reverse()
    return ".".join(parts)


def _note_call(node, fn, loop, facts, Name, Attribute):
    f = node.func
    line = node.lineno
    if f.__class__ is Name:
        name = f.id
        if name in _OUTPUT_CALLS:
            facts.has_output = True
        elif name in _BUILTIN_CALLS or name in facts.bindings or name in _ATTR_CALLS or name == "import_module":
            facts.calls.append((line, name, None, node))
        if name in _EXIT_NAMES:
            _escape(loop)
        if fn is not None and name == fn.plain:
            fn.recursive = True
    elif f.__class__ is Attribute:
        attr = f.attr
        if attr in _ATTR_CALLS:
            dotted = _dotted(f, Name, Attribute)
            if dotted is not None:
                facts.calls.append((line, None, dotted, node))
        if attr in _EXIT_NAMES:
            _escape(loop)
        if fn is not None and fn.self_name is not None and attr == fn.name:
            v = f.value
            if v.__class__ is Name and v.id == fn.self_name:
                fn.recursive = True


def _escape(loop):
    while loop is not None:
        loop.escapes = True
        loop = loop.parent


def _const_str(node, ast):
    if node.__class__ is ast.Constant and type(node.value) is str:
        return node.value
    return None


def _call_arg(call, pos, kw):
    if len(call.args) > pos:
        return call.args[pos]
    for k in call.keywords:
        if k.arg == kw:
            return k.value
    return None


class _Report:
    def __init__(self):
        self.errors = []  # (line, seq, text)
        self.warnings = []
        self.recommendations = []
        self._seen = set()
        self._seq = 0
        self.dropped = [0, 0]  # warnings, errors not kept

    def error(self, line, text):
        self._add(self.errors, line, text)

    def warn(self, line, key, text):
        if (line, key) in self._seen:
            return
        self._seen.add((line, key))
        self._add(self.warnings, line, text)

    def recommend(self, text):
        if text not in self.recommendations:
            self.recommendations.append(text)

    def _add(self, items, line, text):
        self._seq += 1
        if len(items) >= _MAX_KEPT:
            # Past this many, only the count matters.
            self.dropped[items is self.errors] += 1
            return
        prefix = "Line %d: " % line if line else ""
        items.append((line or 0, self._seq, _clip(prefix + text)))


def _finish(items, dropped, what):
    items.sort()
    out = [text for _, _, text in items[:_MAX_ITEMS]]
    more = len(items) - len(out) + dropped
    if more:
        out.append("... and %d more %s" % (more, what))
    return out


def _check(facts, tree, req, report, ast):
    Name = ast.Name
    imports = list(facts.imports)
    used_open = False
    used_input = False

    def builtin(line, name, call):
        nonlocal used_open, used_input
        if name in ("eval", "exec", "compile"):
            report.warn(line, name, "%s() runs dynamic code that validation cannot see inside; %s" % (name, _CONTAINED))
        elif name == "__import__":
            level = _call_arg(call, 4, "level")
            if level is not None and not (level.__class__ is ast.Constant and level.value == 0):
                return
            dynamic_import(line, name, call)
        elif name == "open":
            used_open = True
            report.warn(line, name, "open() accesses the filesystem; only /workspace and /tmp are writable, and %s" % _CONTAINED)
        elif name in ("getattr", "setattr", "delattr"):
            attr = _call_arg(call, 1, None)
            s = None if attr is None else _const_str(attr, ast)
            if s is None:
                report.warn(line, name, "%s() with a computed attribute name; validation cannot tell what it reaches, but %s" % (name, _CONTAINED))
            elif s in _ESCAPE_ATTRS:
                facts.escape_attrs.setdefault(line, set()).add(s)
        elif name in ("globals", "locals"):
            report.warn(line, name, "%s() exposes a namespace to dynamic lookups; %s" % (name, _CONTAINED))
        elif name == "vars":
            a = _call_arg(call, 0, None)
            if a is None or (a.__class__ is Name and (a.id == "__builtins__" or a.id in facts.bindings)):
                report.warn(line, name, "vars() exposes a namespace to dynamic lookups; %s" % _CONTAINED)
        elif name == "input":
            used_input = True
            report.warn(line, name, "input() reads stdin, which is empty in the sandbox: it raises EOFError")

    def dynamic_import(line, how, call):
        target = _call_arg(call, 0, "name")
        s = None if target is None else _const_str(target, ast)
        if s is None:
            report.warn(line, how, "%s() imports a module whose name is computed at run time; validation cannot check it (the import policy still does when it runs), and %s" % (how, _CONTAINED))
        elif s.startswith("."):
            return
        else:
            imports.append((line, s, how))
            report.warn(line, how, "%s() imports '%s' dynamically; it is checked here as an import, and %s" % (how, _clip(s), _CONTAINED))

    for line, name, dotted, call in facts.calls:
        if name is not None:
            if name in facts.bindings:
                dotted = facts.bindings[name]
            elif name in facts.bound:
                continue
            elif name in _BUILTIN_CALLS:
                builtin(line, name, call)
                continue
            else:
                continue
        else:
            root, _, rest = dotted.partition(".")
            if root not in facts.bindings:
                continue
            dotted = facts.bindings[root] + "." + rest
        mod, _, func = dotted.rpartition(".")
        if dotted == "importlib.import_module":
            dynamic_import(line, "importlib.import_module", call)
        elif mod in ("os", "posix") and (func in ("system", "popen") or func.startswith(("exec", "spawn", "fork", "posix_spawn"))):
            report.warn(line, "os." + func, "os.%s() starts a process; %s, under the same limits" % (func, _CONTAINED))
        elif mod in ("sys.stdout", "sys.stderr"):
            facts.has_output = True

    # Escape-style introspection, one warning per line.
    for line, attrs in facts.escape_attrs.items():
        names = sorted(attrs)
        if line in facts.class_attr_lines:
            names.insert(0, "__class__")
        report.warn(line, "introspection", "accesses %s, introspection used in sandbox escapes; %s" % (", ".join(names), _CONTAINED))

    endless = [loop.line for loop in facts.forever_loops if not loop.escapes]
    for line in endless:
        report.warn(line, "while", "'while True' loop has no break, return or raise: it runs until the time limit stops it")
    later = []  # recommendations after those about imports
    if endless:
        later.append(
            "Give the loop%s on line%s %s an exit condition or a break: the run is stopped at its timeout"
            % ("s" if len(endless) > 1 else "", "s" if len(endless) > 1 else "", _few(str(n) for n in endless))
        )
    recursive = [f for f in facts.funcs if f.recursive]
    for f in recursive:
        report.warn(f.line, "recursion", "function '%s' calls itself; recursion deeper than Python's limit (1000 frames) raises RecursionError" % _clip(f.name))
    if recursive:
        later.append("Keep the recursion of %s well under 1000 calls deep, or rewrite it as a loop" % _few("'%s'" % _clip(f.name, 40) for f in recursive))

    # Imports against the policy and the profiles, by the rule of
    # policy.Allows and the harness: an entry allows itself, its submodules
    # and the packages above it ("urllib.parse" lets "urllib" load).
    allowed = req.get("allowed_imports")
    allowed = None if allowed is None else tuple(_strs(allowed))
    if allowed is not None and "*" in allowed:
        allowed = None
    profiles = req.get("profiles")
    profiles = {str(k): tuple(_strs(v)) for k, v in profiles.items()} if isinstance(profiles, dict) else {}
    settings = req.get("profile_settings")
    settings = {str(k): str(v) for k, v in settings.items() if v} if isinstance(settings, dict) else {}
    # A profile without a setting (basic) needs no enabling.
    enabled = set(_strs(req.get("enabled_profiles"))) | {p for p in profiles if p not in settings}
    profile = str(req.get("profile") or "")
    active = set(profile.split("+")) if profile else set()
    memo = {}

    def permits(key, mods, name):
        hit = memo.get((key, name))
        if hit is None:
            hit = memo[(key, name)] = _permits(mods, name)
        return hit

    def having(name):
        # Profiles that allow the module, enabled ones first.
        return sorted((p for p, mods in profiles.items() if permits(p, mods, name)), key=lambda p: (p not in enabled, p))

    def setting(p):
        s = settings.get(p)
        return " (%s)" % s if s else ""

    names = {}  # dotted name -> [(line, how)], in the order seen
    for line, name, how in imports:
        if name and not name.startswith("."):
            names.setdefault(name, []).append((line, how))
    tops = sorted({n.partition(".")[0] for n in names})

    # required_profiles: for each import basic does not allow, a profile
    # that does; a module several profiles have counts for one already
    # needed, else the first enabled one.
    basic = profiles.get("basic")
    if basic is None:
        basic = allowed or ()
    required = set()
    pending = []
    for name in names:
        if permits("basic", basic, name):
            continue
        cands = [p for p in having(name) if p != "basic"]
        if len(cands) == 1:
            required.add(cands[0])
        elif cands:
            pending.append(cands)
    for cands in pending:
        if not required.intersection(cands):
            required.add(cands[0])

    denied = {}  # profile -> modules it would allow
    nowhere = []
    if allowed is not None:
        where = ("in profile " + profile) if profile else "by the import policy"
        reported = set()  # (line, top): one error per statement and module
        for name, uses in names.items():
            if permits(None, allowed, name):
                continue
            top = name.partition(".")[0]
            cands = having(name)
            other = [p for p in cands if p not in active]
            if other:
                p = other[0]
                hint = "; it is available in profile %s%s" % (p, setting(p))
                if p not in enabled:
                    hint += ", which the operator must enable first"
                if name not in denied.setdefault(p, []):
                    denied[p].append(name)
            elif cands:
                hint = ""  # only in the active profile: the operator narrowed the list
            else:
                hint = "; it is not available in any profile"
                if name not in nowhere:
                    nowhere.append(name)
            for line, how in uses:
                if (line, top) in reported:
                    continue
                reported.add((line, top))
                report.error(line, "Import '%s' is not allowed %s%s" % (_clip(name), where, hint))
    for mod, text in (
        ("ctypes", "ctypes calls C code directly and can crash the interpreter; %s" % _CONTAINED),
        ("subprocess", "subprocess starts programs; %s, under the same limits" % _CONTAINED),
    ):
        if allowed is None or permits(None, allowed, mod):
            for name, uses in names.items():
                if name == mod or name.startswith(mod + "."):
                    for line, _ in uses:
                        report.warn(line, mod, text)

    for p in sorted(denied):
        mods = _few(_clip(m, 60) for m in denied[p])
        if p in enabled:
            report.recommend('Request profile %s with profile="%s" to import %s' % (p, p, mods))
        else:
            report.recommend('Enable profile %s%s and request it with profile="%s" to import %s' % (p, setting(p), p, mods))
    if nowhere:
        report.recommend("Remove or replace imports no profile provides: %s" % _few(_clip(m, 60) for m in nowhere))
    for text in later:
        report.recommend(text)
    if used_open:
        report.recommend("Write files under /workspace or /tmp: the rest of the filesystem is read-only")
    if used_input:
        report.recommend("Put input data in the code itself: stdin is empty in the sandbox")
    if not tree.body:
        report.recommend("The code has no statements: there is nothing to run")
    elif not facts.has_output and tree.body[-1].__class__ is not ast.Expr:
        report.recommend("Print results or end with an expression: only stdout/stderr and the last expression's value are returned")
    return tops, sorted(required)


def _strs(v):
    if isinstance(v, (list, tuple, set, frozenset)):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v if isinstance(x, (str, bytes)) and x]
    return []


def _permits(mods, name):
    for a in mods:
        if name == a or name.startswith(a + ".") or a.startswith(name + "."):
            return True
    return False


# estimated_complexity: score = statements + 2*loops + 2*functions
# + 2*classes + 4*max_nesting, where statements counts every statement node
# (nested ones too), loops counts for/while statements and each comprehension
# `for` clause, functions counts def, async def and lambda, and max_nesting
# is the deepest stack of compound statements (if/for/while/with/try/match/
# def/class; elif counts as its if). Below 25 is "low" (a short script),
# below 100 "medium", anything else "high".
_LOW, _MEDIUM = 25, 100


def _complexity(facts):
    score = facts.statements + 2 * facts.loops + 2 * facts.functions + 2 * facts.classes + 4 * facts.max_nesting
    if score < _LOW:
        return "low"
    if score < _MEDIUM:
        return "medium"
    return "high"


def _empty_analysis(code):
    return {
        "line_count": _line_count(code),
        "character_count": len(code),
        "estimated_complexity": "low",
        "imports": [],
        "required_profiles": [],
        "functions": 0,
        "classes": 0,
        "loops": 0,
        "max_nesting": 0,
    }


def _reply(valid, errors, warnings, message, analysis, syntax_error, recommendations):
    return {
        "validation": {"valid": valid, "errors": errors, "warnings": warnings, "message": message},
        "analysis": analysis,
        "syntax_error": syntax_error,
        "recommendations": recommendations,
    }


def _source_line(code, line):
    if "\r" in code:
        code = code.replace("\r\n", "\n").replace("\r", "\n")
    start = 0
    for _ in range(line - 1):
        start = code.find("\n", start) + 1
        if start == 0:
            return None
    end = code.find("\n", start)
    return code[start:] if end < 0 else code[start:end]


def _syntax_error(e, code):
    """(error string, syntax_error dict) for a SyntaxError or ValueError."""
    if isinstance(e, SyntaxError):
        msg = e.msg or "invalid syntax"
        line, col, text = e.lineno, e.offset, e.text
    else:
        # ValueError: source code string cannot contain null bytes.
        msg = str(e) or "invalid source"
        line = col = text = None
        i = code.find("\0")
        if i >= 0:
            start = code.rfind("\n", 0, i) + 1
            line = code.count("\n", 0, i) + 1
            col = i - start + 1
            end = code.find("\n", i)
            text = code[start:] if end < 0 else code[start:end]
    if type(line) is not int:
        line = None
    if type(col) is not int:
        col = None
    if not isinstance(text, str) and line:
        # Errors found compiling the tree carry no source text.
        text = _source_line(code, line)
    if isinstance(text, str):
        text = _clip(text.rstrip("\r\n").replace("\0", "\\x00"))
    else:
        text = None
    prefix = "Line %d: " % line if line else ""
    err = _clip("%sSyntaxError: %s" % (prefix, msg))
    return err, {"message": _clip(msg), "line": line, "column": col, "text": text}


_KEEP = []


def validate(req):
    code = req.get("code", "")
    if isinstance(code, bytes):
        code = code.decode("utf-8", "replace")
    if not isinstance(code, str):
        raise TypeError("code is a %s, not a string" % type(code).__name__)
    code = _cell_code(code)  # as the harness runs it (cell.py)
    analysis = _empty_analysis(code)
    # The tree is acyclic and the process short-lived: the cyclic collector,
    # running over and over while CPython allocates a million nodes, would
    # only halve the speed.
    import gc

    gc.disable()
    try:
        import _ast as ast

        flags = ast.PyCF_ONLY_AST
        tree = compile(code, "<code>", "exec", flags, dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        err, se = _syntax_error(e, code)
        recs = ["Fix the syntax error%s before running the code" % (" on line %d" % se["line"] if se["line"] else "")]
        return _reply(False, [err], [], "Syntax error", analysis, se, recs)
    except (RecursionError, MemoryError) as e:
        return _too_deep(e, analysis)

    # Some errors only show when compiling the tree ('return' outside a
    # function, 'await' outside async, nonlocal at module level, ...): the
    # harness would hit them too.
    try:
        late = _late_syntax_error(tree, code, ast)
    except (RecursionError, MemoryError) as e:
        return _too_deep(e, analysis)

    _KEEP.append(tree)  # freeing a million nodes takes longer than exiting
    facts = _walk(tree, ast)
    report = _Report()
    imports, required = _check(facts, tree, req, report, ast)
    analysis.update(
        estimated_complexity=_complexity(facts),
        imports=imports,
        required_profiles=required,
        functions=facts.functions,
        classes=facts.classes,
        loops=facts.loops,
        max_nesting=facts.max_nesting,
    )
    errors = _finish(report.errors, report.dropped[1], "errors")
    syntax = None
    if late is not None:
        errors.insert(0, late[0])
        syntax = late[1]
        report.recommendations.insert(0, "Fix the syntax error%s before running the code" % (" on line %d" % syntax["line"] if syntax["line"] else ""))
    if syntax is not None:
        message = "Syntax error"
    elif errors:
        message = "Code contains restricted operations"
    else:
        message = "Code is valid"
    return _reply(
        not errors,
        errors,
        _finish(report.warnings, report.dropped[0], "warnings"),
        message,
        analysis,
        syntax,
        report.recommendations[:_MAX_RECOMMENDATIONS],
    )


def _late_syntax_error(tree, code, ast):
    """The first error only compiling finds, as _syntax_error, or None.

    The top-level statements are compiled in chunks: CPython's compiler
    slows down quadratically on huge module bodies, and splitting loses only
    the check that future imports come first, done here by hand."""
    body = tree.body
    start = 0
    if body and body[0].__class__ is ast.Expr and body[0].value.__class__ is ast.Constant and type(body[0].value.value) is str:
        start = 1  # docstring
    while start < len(body) and body[start].__class__ is ast.ImportFrom and body[start].module == "__future__":
        start += 1
    for node in body[start:]:
        if node.__class__ is ast.ImportFrom and node.module == "__future__" and not node.level:
            err = SyntaxError("from __future__ imports must occur at the beginning of the file")
            err.lineno, err.offset = node.lineno, node.col_offset + 1
            return _syntax_error(err, code)
    step = 256
    for i in range(0, len(body), step):
        try:
            compile(ast.Module(body[i : i + step], []), "<code>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            return _syntax_error(e, code)
    return None


def _too_deep(e, analysis):
    # CPython's parser and compiler give up on deep nesting with these; a
    # MemoryError may also be the code's sheer size against the memory
    # limit (the tree takes ~200 bytes per character of dense code).
    what = "nested too deeply" if isinstance(e, RecursionError) else "nested too deeply or too large"
    msg = "code is %s to parse (%s%s)" % (what, type(e).__name__, ": %s" % e if str(e) else "")
    return _reply(
        False,
        [_clip("SyntaxError: " + msg)],
        [],
        "Syntax error",
        analysis,
        {"message": _clip(msg), "line": None, "column": None, "text": None},
        ["Flatten deeply nested expressions: Python cannot compile them"],
    )


def _internal(e, code):
    try:
        detail = "%s: %s" % (type(e).__name__, e)
    except Exception:
        detail = type(e).__name__
    analysis = _empty_analysis(code) if isinstance(code, str) else _empty_analysis("")
    return _reply(False, [_clip("Internal error: the validator failed (%s)" % detail)], [], "Internal error", analysis, None, [])


_FALLBACK = (
    '{"validation":{"valid":false,"errors":["Internal error: the validator could not encode its reply"],'
    '"warnings":[],"message":"Internal error"},"analysis":{"line_count":0,"character_count":0,'
    '"estimated_complexity":"low","imports":[],"required_profiles":[],"functions":0,"classes":0,'
    '"loops":0,"max_nesting":0},"syntax_error":null,"recommendations":[]}'
)


def _main():
    import os

    import stat

    chan = 3
    ready = False
    try:
        os.fstat(chan)
        rfd, wfd = chan, chan
    except OSError:
        if stat.S_ISSOCK(os.fstat(0).st_mode):
            # gVisor passes only the standard descriptors: the channel is
            # stdin, and the slowly booting sandbox says when it is up.
            rfd, wfd, ready = 0, 0, True
        else:
            rfd, wfd = 0, 1  # run by hand: stdin and stdout

    def read_exact(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(rfd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError("request frame cut short")
            buf += chunk
        return bytes(buf)

    def write_frame(body):
        data = len(body).to_bytes(4, "big") + body
        try:
            while data:
                data = data[os.write(wfd, data):]
        except OSError:
            pass

    if ready:
        write_frame(b'{"ready":true}')
    req = {}
    try:
        import marshal

        size = int.from_bytes(read_exact(4), "big")
        req = marshal.loads(read_exact(size))
        if not isinstance(req, dict):
            raise TypeError("request is a %s, not a dict" % type(req).__name__)
        reply = validate(req)
    except BaseException as e:  # noqa: B036 - the reply must always be written
        reply = _internal(e, req.get("code", "") if isinstance(req, dict) else "")
    try:
        import json

        body = json.dumps(reply, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    except BaseException:  # noqa: B036
        body = _FALLBACK.encode("ascii")
    write_frame(body)
    os._exit(0)


_main()
