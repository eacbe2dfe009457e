#!/usr/bin/env python3
"""tools/ladder.py: the series' budgets, checked, and the README's step table, generated.

    python3 tools/ladder.py check     # exit 1 on any step over a budget (a CPU test: cpu.ladder)
    python3 tools/ladder.py render    # rewrite the generated columns of README.md's step table
    python3 tools/ladder.py show      # every step's measures, one line each

A step grows from its BASE (`add_step(... BASE <step>)` in CMakeLists.txt): the step whose kernel.cu
it was copied from, and the one to diff it against. A step that starts a new family of instructions,
where a diff would show nothing useful, says `REWRITE "<why>"` instead. Every step but the first says
one of the two. The budgets, per step (docs/adding_a_step.md, "Budgets"):

    kernel.cu          at most 650 lines
    diff from BASE     at most 450 changed lines (added + removed, `git diff --no-index --numstat`),
                       unless REWRITE
    functions          no __global__ or __device__ function over 250 lines (from its first line,
                       its template line included, to its closing brace)
    banner             the comment block that opens kernel.cu: at most 45 lines and no measured
                       figure (a percentage, a ratio like 1.3×, a time, a rate, an instruction
                       count); it says what the step adds and where to look, the numbers live in
                       the docs' generated tables
    lesson             docs/NN_name.md at most 9,000 words before its appendix (a heading that
                       starts with "Appendix"); history goes to docs/history/

A step over a budget fails the check, unless tools/ladder_debt.txt lists that step and budget:
a re-cut not yet done. A listed step that is within the budget fails the
check too, so the list only shrinks. Only the standard library and git are used.
"""
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAX_KERNEL_LINES = 650
MAX_CHANGED_LINES = 450
MAX_FUNCTION_LINES = 250
MAX_BANNER_LINES = 45
MAX_LESSON_WORDS = 9000
RULES = ("kernel_lines", "changed_lines", "function_lines", "banner_lines", "banner_figures", "lesson_words",
         "declares_base")

README_BEGIN = "<!-- ladder:begin -->"
README_END = "<!-- ladder:end -->"


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---- the add_step lines ------------------------------------------------------------------------------
def read_steps(root=ROOT):
    """The add_step calls of CMakeLists.txt, in order: dicts of name, family, prev, base, rewrite."""
    text = read_text(os.path.join(root, "CMakeLists.txt"))
    text = "\n".join(line.split("#", 1)[0] if not line.lstrip().startswith("#") else "" for line in text.splitlines())
    steps = []
    for m in re.finditer(r"^\s*add_step\(([^)]*)\)", text, re.M):
        words = shlex.split(m.group(1).replace("\n", " "))
        if not words or not re.match(r"^[0-9][0-9]_[a-z0-9_]+$", words[0]):
            continue  # the function's definition, not a call
        step = {"name": words[0], "family": None, "prev": None, "base": None, "rewrite": None}
        key = None
        for w in words[1:]:
            if w in ("FAMILY", "PREV", "BASE", "REWRITE", "USES", "ARCH", "LIBS"):
                key = w.lower()
                continue
            if key in ("family", "prev", "base", "rewrite"):
                step[key] = w
        steps.append(step)
    return steps


# ---- C++ source measures -------------------------------------------------------------------------------
def strip_code(text):
    """The text with comments, string and character literals blanked (newlines kept), for brace matching."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def device_functions(text):
    """(name, first line, last line) of every __global__ or __device__ function defined in the text
    (1-based lines; the first is its template line where it has one)."""
    code = strip_code(text)
    lines = code.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    line_of = lambda pos: next(i for i in range(len(offsets) - 1) if offsets[i + 1] > pos) + 1
    found = []
    for m in re.finditer(r"\b(__global__|__device__)\b", code):
        # The declaration: from here to the first '{' or ';' at parenthesis depth 0.
        depth, j = 0, m.end()
        while j < len(code):
            ch = code[j]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif depth == 0 and ch in "{;=":
                break
            j += 1
        if j >= len(code) or code[j] != "{":
            continue  # a declaration, a variable, or __device__ in a lambda/attribute position
        head = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", code[m.end():j])
        if "(" not in head:
            continue  # `__device__ int x{...}`: not a function
        name = re.findall(r"([A-Za-z_][A-Za-z_0-9:]*)\s*\(", head)
        if not name:
            continue
        # Skip a match inside a function already found (e.g. a lambda marked __device__).
        start_line = line_of(m.start())
        if any(a <= start_line <= b for _, a, b in found):
            continue
        depth, k = 0, j
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        first = start_line
        # The template line(s) and qualifiers written on the lines just above belong to the function.
        while first > 1 and re.match(r"^\s*(template\s*<.*|__launch_bounds__.*|static\s*|inline\s*)$",
                                     lines[first - 2]):
            first -= 1
        found.append((name[0], first, line_of(k)))
    return found


def banner(text):
    """The comment lines that open the file."""
    out = []
    for line in text.split("\n"):
        if not line.startswith("//"):
            break
        out.append(line)
    return out


# Measured figures a banner must not carry: percentages (3%, not the modulo `t % 2`), ratios
# (1.3×, 2× faster; not the shapes 4 × 2 or m64n128k16 × D/16), times, rates, instruction counts.
FIGURE = re.compile(
    r"\d%"
    r"|\d\.\d+\s?[×x](?![\w])"
    r"|\d\s?×\s+(?:faster|slower|more|less|fewer|the)\b"
    r"|\d\s?(?:ms|µs|us|ns)\b"
    r"|\d\s?(?:TFLOP|GFLOP|GB/s|TB/s)"
    r"|\d\s+(?:million|billion)\b"
)


def banner_figures(lines):
    return [(i + 1, ln.strip()) for i, ln in enumerate(lines) if FIGURE.search(ln)]


def changed_lines(a, b):
    """Lines added + removed between two files, as `git diff --no-index --numstat` counts them."""
    r = subprocess.run(["git", "diff", "--no-index", "--numstat", "--", a, b], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"ladder: git diff failed: {r.stderr.strip()}")
    total = 0
    for line in r.stdout.splitlines():
        add, rem = line.split("\t")[:2]
        total += int(add) + int(rem)
    return total


def lesson_words(path):
    """Words of a doc before its appendix (the first heading that starts with 'Appendix')."""
    if not os.path.exists(path):
        return None
    words = 0
    for line in read_text(path).split("\n"):
        if re.match(r"^#+\s+Appendix", line):
            break
        words += len(line.split())
    return words


def measure(step, steps, root=ROOT):
    """Every measure of one step, and the rules it breaks (before the debt list is applied)."""
    kernel = os.path.join(root, "steps", step["name"], "kernel.cu")
    text = read_text(kernel)
    m = dict(step)
    m["kernel_lines"] = text.count("\n") + (0 if text.endswith("\n") else 1)
    funcs = device_functions(text)
    longest = max(funcs, key=lambda f: f[2] - f[1] + 1, default=None)
    m["longest_function"] = (longest[0], longest[2] - longest[1] + 1) if longest else ("-", 0)
    m["long_functions"] = [(n, b - a + 1) for n, a, b in funcs if b - a + 1 > MAX_FUNCTION_LINES]
    lines = banner(text)
    m["banner_lines"] = len(lines)
    m["banner_figures"] = banner_figures(lines)
    m["changed_lines"] = None
    if step["base"]:
        base_kernel = os.path.join(root, "steps", step["base"], "kernel.cu")
        m["changed_lines"] = changed_lines(base_kernel, kernel)
    m["lesson_words"] = lesson_words(os.path.join(root, "docs", step["name"] + ".md"))
    broken = {}
    if m["kernel_lines"] > MAX_KERNEL_LINES:
        broken["kernel_lines"] = f"kernel.cu has {m['kernel_lines']} lines (at most {MAX_KERNEL_LINES})"
    if m["changed_lines"] is not None and m["changed_lines"] > MAX_CHANGED_LINES:
        broken["changed_lines"] = (f"{m['changed_lines']} lines changed from BASE {step['base']} "
                                   f"(at most {MAX_CHANGED_LINES}, or REWRITE)")
    if m["long_functions"]:
        broken["function_lines"] = "; ".join(f"{n} has {k} lines" for n, k in m["long_functions"]) + \
                                   f" (at most {MAX_FUNCTION_LINES})"
    if m["banner_lines"] > MAX_BANNER_LINES:
        broken["banner_lines"] = f"the banner has {m['banner_lines']} lines (at most {MAX_BANNER_LINES})"
    if m["banner_figures"]:
        broken["banner_figures"] = "the banner quotes measured figures: " + "; ".join(
            f"line {i}: {s}" for i, s in m["banner_figures"][:3]) + (" ..." if len(m["banner_figures"]) > 3 else "")
    if m["lesson_words"] is not None and m["lesson_words"] > MAX_LESSON_WORDS:
        broken["lesson_words"] = f"docs/{step['name']}.md has {m['lesson_words']} words before its appendix " \
                                 f"(at most {MAX_LESSON_WORDS}; history goes to docs/history/)"
    first = steps and steps[0]["name"] == step["name"]
    if step["base"] and step["rewrite"]:
        broken["declares_base"] = "says both BASE and REWRITE"
    elif not first and not step["base"] and not step["rewrite"]:
        broken["declares_base"] = "says neither BASE <step> nor REWRITE \"<why>\" in its add_step line"
    elif step["base"] and step["base"] not in [s["name"] for s in steps[:steps.index(step)]]:
        broken["declares_base"] = f"BASE {step['base']} is not a step added before it"
    m["broken"] = broken
    return m


# ---- the debt list ------------------------------------------------------------------------------------
def read_debt(root=ROOT):
    """{(step, rule): why} from tools/ladder_debt.txt (lines: `<step> <rule>  # why`)."""
    path = os.path.join(root, "tools", "ladder_debt.txt")
    debt = {}
    if not os.path.exists(path):
        return debt
    for n, line in enumerate(read_text(path).split("\n"), 1):
        body, _, why = line.partition("#")
        words = body.split()
        if not words:
            continue
        if len(words) != 2 or words[1] not in RULES:
            raise SystemExit(f"ladder: tools/ladder_debt.txt:{n}: expected '<step> <rule>  # why', rule one of "
                             f"{', '.join(RULES)}")
        debt[(words[0], words[1])] = why.strip()
    return debt


def check(root=ROOT, out=sys.stdout):
    steps = read_steps(root)
    debt = read_debt(root)
    names = {s["name"] for s in steps}
    failures = []
    for key in debt:
        if key[0] not in names:
            failures.append(f"tools/ladder_debt.txt names {key[0]}, which is not a step")
    for step in steps:
        m = measure(step, steps, root)
        for rule, what in m["broken"].items():
            if (step["name"], rule) not in debt:
                failures.append(f"{step['name']}: {what}")
        for (name, rule) in debt:
            if name == step["name"] and rule not in m["broken"]:
                failures.append(f"{step['name']}: within the '{rule}' budget now: remove its line from "
                                f"tools/ladder_debt.txt")
    fresh = render_readme(root, write=False)
    if fresh is False:
        failures.append("README.md: the step table's generated columns are stale: run python3 tools/ladder.py render")
    for f in failures:
        print(f"FAIL {f}", file=out)
    owed = len(debt)
    print(f"ladder: {len(steps)} steps, {len(failures)} failures, {owed} known over-budget entries "
          f"(tools/ladder_debt.txt)", file=out)
    return 0 if not failures else 1


# ---- the README's step table ----------------------------------------------------------------------------
GENERATED = ("BASE", "kernel.cu lines", "changed from BASE")


def generated_cells(m):
    base = f"[{m['base'][:2]}](steps/{m['base']})" if m["base"] else ("REWRITE" if m["rewrite"] else "-")
    changed = str(m["changed_lines"]) if m["changed_lines"] is not None else "-"
    return [base, str(m["kernel_lines"]), changed]


def render_readme(root=ROOT, write=True):
    """Rewrite the generated columns of the table between the ladder markers in README.md. Returns
    True when the file is (now) fresh, False when stale and not written."""
    path = os.path.join(root, "README.md")
    text = read_text(path)
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"ladder: README.md has no {README_BEGIN} ... {README_END} block")
    head, rest = text.split(README_BEGIN, 1)
    block, tail = rest.split(README_END, 1)
    steps = read_steps(root)
    measures = {s["name"]: measure(s, steps, root) for s in steps}
    rows = [ln for ln in block.strip("\n").split("\n") if ln.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    keep = [c for c in header if c not in GENERATED]  # the written columns: step, idea, status
    by_step = {}
    for ln in rows[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        row = dict(zip(header, cells))
        name = re.search(r"\[([0-9][0-9]_[a-z0-9_]+)\]", row[header[0]])
        if name:
            by_step[name.group(1)] = row
    out = ["| " + " | ".join([keep[0], *GENERATED, *keep[1:]]) + " |",
           "|" + "---|" * (len(keep) + len(GENERATED))]
    for s in steps:
        row = by_step.get(s["name"], {keep[0]: f"[{s['name']}](steps/{s['name']})"})
        written = [row.get(c, "") for c in keep]
        out.append("| " + " | ".join([written[0], *generated_cells(measures[s["name"]]), *written[1:]]) + " |")
    new_block = "\n" + "\n".join(out) + "\n"
    if new_block == block:
        return True
    if not write:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + README_BEGIN + new_block + README_END + tail)
    return True


def show(root=ROOT):
    steps = read_steps(root)
    debt = read_debt(root)
    print(f"{'step':32} {'BASE':28} {'lines':>5} {'changed':>7} {'longest function':>28} {'banner':>6} {'words':>6}")
    for s in steps:
        m = measure(s, steps, root)
        base = s["base"] or ("REWRITE" if s["rewrite"] else "-")
        fn = f"{m['longest_function'][0][:20]} {m['longest_function'][1]}"
        print(f"{s['name']:32} {base:28} {m['kernel_lines']:5} {m['changed_lines'] if m['changed_lines'] is not None else '-':>7} "
              f"{fn:>28} {m['banner_lines']:6} {m['lesson_words'] if m['lesson_words'] is not None else '-':>6}")
        for rule, what in m["broken"].items():
            print(f"    {'owed' if (s['name'], rule) in debt else 'OVER'}: {what}")


def main(argv):
    if len(argv) != 2 or argv[1] not in ("check", "render", "show"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if argv[1] == "check":
        return check()
    if argv[1] == "render":
        render_readme()
        return 0
    show()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
