# codecage cell: what the harness and the validator both do to a cell's
# source before they compile it, prepended to each (runtime.cellSource), so
# that validate_code judges the code the harness runs.


def _dedent(code):
    # A cell sent as an indented template string: when every line is
    # indented by the first line's indent, that indent goes (as IPython's
    # leading_indent does). Lines keep their numbers; anything else is
    # left as it was, for the compiler to judge.
    lines = code.split("\n")
    first = next((line for line in lines if line.strip()), "")
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if not indent:
        return code
    out = []
    for line in lines:
        if line.startswith(indent):
            out.append(line[len(indent) :])
        elif line.strip():
            return code
        else:
            out.append("")
    return "\n".join(out)


def _cell_code(code):
    # The cell as it runs: dedented, then its IPython line magics and
    # shell escapes made calls of the harness's __codecage_magic__.
    return _magics(_dedent(code))


def _magics(code):
    # "!cmd", "%magic args" and a first line "%%magic args" are no Python:
    # a line starting with one (after its indent) becomes a call, as
    # IPython's input transformers do. Only a cell that does not compile
    # as it is is transformed, so a string or expression whose line
    # starts with "%" or "!" keeps its meaning; a bad magic's arguments
    # are the harness's to judge, when the line runs.
    lines = code.split("\n")
    if not any(line.lstrip()[:1] in ("!", "%") for line in lines):
        return code
    try:
        compile(code, "<code>", "exec", 0x400)  # PyCF_ONLY_AST
        return code
    except (SyntaxError, ValueError):
        pass
    first = next((i for i, line in enumerate(lines) if line.strip()), 0)
    head = lines[first].strip()
    if head.startswith("%%"):
        # A cell magic takes the whole cell: the rest is its body.
        name, _, args = head[2:].partition(" ")
        body = "\n".join(lines[first + 1 :])
        call = "__codecage_magic__(%r, %r, %r)" % ("%%" + name, args.strip(), body)
        return "\n" * first + call
    out = []
    for line in lines:
        text = line.lstrip()
        indent = line[: len(line) - len(text)]
        if text.startswith("!"):
            line = indent + "__codecage_magic__(%r, %r)" % ("!", text[1:].strip())
        elif text.startswith("%") and not text.startswith("%%"):
            name, _, args = text[1:].partition(" ")
            line = indent + "__codecage_magic__(%r, %r)" % ("%" + name.strip(), args.strip())
        out.append(line)
    return "\n".join(out)
