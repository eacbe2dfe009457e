#!/usr/bin/env python3
"""tools/doclinks.py: links in the docs that cannot rot.

    python3 tools/doclinks.py check          # exit 1 on any broken link (a CPU test: cpu.doc_links)
    python3 tools/doclinks.py fix            # move line links whose code moved; report what needs a human
    python3 tools/doclinks.py lock [DOC...]  # record what line links point at now (after a human checked)

Scanned: docs/*.md, docs/history/*.md, README.md, steps/*/README.md (links inside fenced code
blocks are skipped).

`check` verifies
  (a) every relative link points to an existing file or folder, and a `#heading` anchor on a .md
      target to an existing heading (GitHub's anchor rules);
  (b) every line link `FILE#Lx` or `FILE#Lx-Ly` still points at the code it was confirmed to point
      at: docs/links.lock stores, per link (doc, link text, target, range), the exact lines the
      range held when a human last confirmed it. The link fails when those lines differ now, or
      when the link is not in the lock at all;
  (c) when the link text names identifiers (`backticked`, or the leading name in "name, L12-L20"),
      each occurs in the lines linked (checked without the lock, so a new link is checked too).

`fix` handles the usual cause of (b): code above the linked lines grew or shrank. For each link
whose lines changed, it searches the file for the locked block (exact lines, then the same lines
with indentation ignored). A unique match rewrites the line numbers in the doc (in the URL, and
"Lx-Ly" in the link text when the text repeats them) and in the lock. No match (the code itself
changed) or several matches: the link is listed as needing a human, who edits the doc and runs
`lock DOC`. After `fix`, run `check`.

`lock` re-records every line link (or only those of the docs named) from the current files. It
refuses while any line link it would record fails (a) or (c): lock only what you have read and
confirmed.
Only the standard library is used.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = os.path.join(ROOT, "docs", "links.lock")

# [text](target): the text may hold one level of brackets and span lines; the target has no spaces.
LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]+)\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^()\s]+)\)")
LINES = re.compile(r"^L(\d+)(?:-L(\d+))?$")
FENCE = re.compile(r"^\s*(```|~~~)")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_:<>]*(?:\(\))?$")


def docs():
    out = []
    for folder, pattern in (("docs", r".+\.md$"), ("docs/history", r".+\.md$"), (".", r"^README\.md$")):
        if not os.path.isdir(os.path.join(ROOT, folder)):
            continue
        for f in sorted(os.listdir(os.path.join(ROOT, folder))):
            if re.match(pattern, f):
                out.append(os.path.normpath(os.path.join(folder, f)))
    steps = os.path.join(ROOT, "steps")
    for d in sorted(os.listdir(steps)):
        if os.path.exists(os.path.join(steps, d, "README.md")):
            out.append(f"steps/{d}/README.md")
    return out


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def unfenced(text):
    """The text with fenced code blocks blanked (same length, so offsets stay valid)."""
    out, fenced = [], False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
            out.append(" " * (len(line) - 1) + line[-1:] if line.endswith("\n") else " " * len(line))
        else:
            out.append(re.sub(r"[^\n]", " ", line) if fenced else line)
    return "".join(out)


def norm_text(text):
    return " ".join(text.split())


class Link:
    def __init__(self, doc, m, text):
        self.doc, self.span, self.text, self.url = doc, m.span(), m.group(1), m.group(2)
        self.lineno = text.count("\n", 0, m.start()) + 1
        path, _, self.anchor = self.url.partition("#")
        self.target = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        lm = LINES.match(self.anchor)
        self.range = (int(lm.group(1)), int(lm.group(2) or lm.group(1))) if lm else None

    def where(self):
        return f"{self.doc}:{self.lineno}: [{norm_text(self.text)}]({self.url})"

    def key(self):
        return (self.doc, norm_text(self.text), self.target, self.range[0], self.range[1])


def links_of(doc):
    text = read(doc)
    scan = unfenced(text)
    out = []
    for m in LINK.finditer(scan):
        url = m.group(2)
        if re.match(r"^[a-z]+:", url):  # http:, https:, mailto:
            continue
        out.append(Link(doc, m, scan))
    for m in IMAGE.finditer(scan):
        if not re.match(r"^[a-z]+:", m.group(1)):
            path = m.group(1).partition("#")[0]
            out.append(("image", doc, scan.count("\n", 0, m.start()) + 1,
                        os.path.normpath(os.path.join(os.path.dirname(doc), path))))
    return out


def all_links():
    out = []
    for d in docs():
        out += links_of(d)
    return [l for l in out if isinstance(l, Link)], [l for l in out if not isinstance(l, Link)]


# ---- headings (GitHub's anchors) ----------------------------------------------------------------
_ANCHORS = {}


def slug(heading):
    h = re.sub(r"`|\*\*?|__", "", heading.strip().lower())
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    h = "".join(c for c in h if c.isalnum() or c in " -_")
    return h.replace(" ", "-")


def anchors(rel):
    if rel not in _ANCHORS:
        seen, out = {}, set()
        for line in unfenced(read(rel)).splitlines():
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
        _ANCHORS[rel] = out
    return _ANCHORS[rel]


# ---- line links ---------------------------------------------------------------------------------
_FILES = {}


def file_lines(rel):
    if rel not in _FILES:
        _FILES[rel] = read(rel).splitlines()
    return _FILES[rel]


def lines_at(link):
    lines = file_lines(link.target)
    a, b = link.range
    if a < 1 or b < a or b > len(lines):
        return None
    return lines[a - 1:b]


def identifiers(text):
    """Identifiers the link text promises are in the range: `backticked` names, or the leading
    name(s) of "name, L12-L20" / "name and other, L3"."""
    t = norm_text(text)
    names = [n for n in re.findall(r"`([^`]+)`", t) if IDENT.match(n)]
    if not names:
        m = re.match(r"^([A-Za-z_]\w*(?: and [A-Za-z_]\w*)?), (?:called at )?L\d+", t)
        if m:  # lower-case names only: "The mask, L3" is prose
            names = [n for n in m.group(1).split(" and ") if n[0].islower() or "_" in n]
    return [n.rstrip("()").split("::")[-1].split("<")[0] for n in names]


def ident_problems(link, got):
    body = "\n".join(got)
    return [n for n in identifiers(link.text) if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", body)]


def load_lock():
    if not os.path.exists(LOCK):
        return {}
    with open(LOCK, encoding="utf-8") as f:
        entries = json.load(f)["links"]
    return {(e["doc"], e["text"], e["target"], e["lines"][0], e["lines"][1]): e for e in entries}


def save_lock(lock):
    entries = [{"doc": k[0], "text": k[1], "target": k[2], "lines": [k[3], k[4]], "code": v["code"],
                "before": v["before"], "after": v["after"]} for k, v in sorted(lock.items())]
    with open(LOCK, "w", encoding="utf-8") as f:
        f.write("{\n  \"about\": \"tools/doclinks.py lock: the lines each line link of the docs pointed at when "
                "last confirmed. Do not edit by hand; see tools/doclinks.py.\",\n  \"links\": [\n")
        f.write(",\n".join("    " + json.dumps(e, ensure_ascii=False) for e in entries))
        f.write("\n  ]\n}\n")


# ---- commands -----------------------------------------------------------------------------------
def basic_problems(links, images):
    """(a) and (c): problems that need no lock."""
    out = []
    for kind, doc, lineno, target in images:
        if not os.path.exists(os.path.join(ROOT, target)):
            out.append(f"{doc}:{lineno}: image {target} does not exist")
    for l in links:
        full = os.path.join(ROOT, l.target)
        if not os.path.exists(full):
            out.append(f"{l.where()}: {l.target} does not exist")
            continue
        if l.range:
            if os.path.isdir(full):
                out.append(f"{l.where()}: a line link to a folder")
                continue
            got = lines_at(l)
            if got is None:
                out.append(f"{l.where()}: {l.target} has {len(file_lines(l.target))} lines")
                continue
            missing = ident_problems(l, got)
            if missing:
                out.append(f"{l.where()}: {', '.join(missing)} not in {l.target} lines {l.range[0]}-{l.range[1]}")
        elif l.anchor and l.target.endswith(".md") and l.anchor not in anchors(l.target):
            out.append(f"{l.where()}: no heading '#{l.anchor}' in {l.target}")
    return out


def show_block(lines, first):
    return "\n".join(f"      {first + i:5d} | {s}" for i, s in enumerate(lines))


def lock_problems(links, lock):
    out = []
    for l in links:
        if not l.range or not os.path.isfile(os.path.join(ROOT, l.target)):
            continue
        got = lines_at(l)
        if got is None:
            continue
        want = lock.get(l.key(), {}).get("code")
        if want is None:
            out.append(f"{l.where()}: not in docs/links.lock (read the lines it points at, then "
                       f"`python3 tools/doclinks.py lock {l.doc}`)")
        elif want != got:
            out.append(f"{l.where()}: the lines changed since they were confirmed\n    confirmed:\n"
                       f"{show_block(want, l.range[0])}\n    now:\n{show_block(got, l.range[0])}\n"
                       f"    (`python3 tools/doclinks.py fix` moves the link if the confirmed lines are elsewhere)")
    return out


def cmd_check():
    links, images = all_links()
    problems = basic_problems(links, images) + lock_problems(links, load_lock())
    for p in problems:
        print(p)
    n = sum(1 for l in links if l.range)
    if problems:
        print(f"doclinks: {len(problems)} problem(s) in {len(links) + len(images)} links ({n} line links)")
        return 1
    print(f"doclinks: {len(links) + len(images)} links OK ({n} line links match docs/links.lock)")
    return 0


def find_block(lines, block, loose):
    key = (lambda s: s.strip()) if loose else (lambda s: s)
    want = [key(s) for s in block]
    have = [key(s) for s in lines]
    n = len(want)
    return [i + 1 for i in range(len(have) - n + 1) if have[i:i + n] == want]


CONTEXT = 2  # lines kept either side of a locked block, to tell apart blocks that occur twice


def record(target, rng):
    lines = file_lines(target)
    a, b = rng
    return {"code": lines[a - 1:b], "before": lines[max(0, a - 1 - CONTEXT):a - 1], "after": lines[b:b + CONTEXT]}


def locate(lines, entry):
    """Where the locked block starts now: exact lines, else indentation ignored; several places are
    told apart by the lines around them (exact, else indentation ignored)."""
    want, before, after = entry["code"], entry["before"], entry["after"]
    for loose in (False, True):
        hits = find_block(lines, want, loose)
        if len(hits) <= 1:
            if hits:
                return hits
            continue
        key = (lambda s: s.strip()) if loose else (lambda s: s)
        for ctx_loose in (False, True):
            k = (lambda s: s.strip()) if ctx_loose or loose else key
            fit = [h for h in hits
                   if [k(s) for s in lines[max(0, h - 1 - len(before)):h - 1]] == [k(s) for s in before]
                   and [k(s) for s in lines[h - 1 + len(want):h - 1 + len(want) + len(after)]] == [k(s) for s in after]]
            if len(fit) == 1:
                return fit
        return hits
    return []


def relink(link, new):
    """The link's markdown with its range moved to `new`."""
    anchor = f"L{new[0]}" if "-" not in link.anchor else f"L{new[0]}-L{new[1]}"
    return f"[{retext(link.text, link.range, new)}]({link.url.partition('#')[0]}#{anchor})"


def retext(text, old, new):
    """'Lx-Ly' (or 'Lx') in the link text, when it repeats the old range, follows the new one."""
    def sub(m):
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if (a, b) != old:
            return m.group(0)
        return f"L{new[0]}-L{new[1]}" if m.group(2) else f"L{new[0]}"
    return re.sub(r"\bL(\d+)(?:-L(\d+))?\b", sub, text)


def cmd_fix():
    lock = load_lock()
    links, _ = all_links()
    edits, human, moved, done = {}, [], 0, {}  # done: old key -> new range (a link may occur twice)
    for l in links:
        if not l.range or not os.path.isfile(os.path.join(ROOT, l.target)):
            continue
        got = lines_at(l)
        if l.key() in done:
            new = done[l.key()]
            edits.setdefault(l.doc, []).append((l.span, relink(l, new)))
            print(f"moved {l.where()} -> L{new[0]}-L{new[1]}")
            moved += 1
            continue
        entry = lock.get(l.key())
        want = entry and entry["code"]
        if want is None:
            human.append(f"{l.where()}: not in the lock, nothing to follow")
            continue
        if got == want:
            continue
        hits = locate(file_lines(l.target), entry)
        if len(hits) != 1:
            why = "the confirmed lines are nowhere in the file (the code changed)" if not hits else \
                f"the confirmed lines occur {len(hits)} times (at {', '.join('L' + str(h) for h in hits)})"
            human.append(f"{l.where()}: {why}")
            continue
        new = (hits[0], hits[0] + len(want) - 1)
        done[l.key()] = new
        edits.setdefault(l.doc, []).append((l.span, relink(l, new)))
        print(f"moved {l.where()} -> L{new[0]}-L{new[1]}")
        moved += 1
    for old in done:  # all old keys first: a link may move onto another's old place
        del lock[old]
    for old, new in done.items():
        lock[(old[0], norm_text(retext(old[1], old[3:], new)), old[2], new[0], new[1])] = record(old[2], new)
    for doc, spans in edits.items():
        text = read(doc)
        for (s, e), rep in sorted(spans, reverse=True):
            text = text[:s] + rep + text[e:]
        with open(os.path.join(ROOT, doc), "w", encoding="utf-8") as f:
            f.write(text)
    if moved:
        save_lock(lock)
    for h in human:
        print("needs a human: " + h)
    print(f"doclinks fix: {moved} link(s) moved, {len(human)} need a human "
          "(edit the doc, then `python3 tools/doclinks.py lock DOC`)")
    return 1 if human else 0


def cmd_lock(only):
    only = {os.path.normpath(d) for d in only}
    links, images = all_links()
    if only:
        unknown = only - set(docs())
        if unknown:
            print(f"not a scanned doc: {', '.join(sorted(unknown))}")
            return 2
        links = [l for l in links if l.doc in only]
    problems = basic_problems([l for l in links if l.range], [])  # the links being recorded
    if problems:
        for p in problems:
            print(p)
        print("doclinks lock: nothing recorded; fix the links above first")
        return 1
    lock = load_lock()
    if only:
        lock = {k: v for k, v in lock.items() if k[0] not in only}
    else:
        lock = {}
    n = 0
    for l in links:
        if l.range:
            lock[l.key()] = record(l.target, l.range)
            n += 1
    save_lock(lock)
    print(f"doclinks lock: recorded {n} line link(s)" + (f" of {', '.join(sorted(only))}" if only else ""))
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "check":
        return cmd_check()
    if len(argv) == 2 and argv[1] == "fix":
        return cmd_fix()
    if len(argv) >= 2 and argv[1] == "lock":
        return cmd_lock(argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
