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
