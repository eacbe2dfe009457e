"""python -m flashsteps info: the library, the GPU, the steps it runs and the default choice.

Needs neither PyTorch nor a GPU: without one it says why and still lists the steps.
"""
import argparse
import sys

from ._lib import KINDS, FlashStepsError, LibraryNotFound, default_step, library


def info(out=sys.stdout) -> int:
    try:
        lib = library()
    except LibraryNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"library: {lib.path}", file=out)
    try:
        cc, name = lib.device()
        print(f"GPU: {name} (compute capability {cc // 10}.{cc % 10})", file=out)
        gpu = True
    except FlashStepsError as e:
        print(f"no GPU: {e}", file=out)
        gpu = False
    print(f"steps ({len(lib.steps)}):", file=out)
    for s in lib.steps:
        if s.family != "attention":
            print(f"  {s.name}: {s.family} (not callable from here)", file=out)
            continue
        what = [w for w, has in (("forward", s.has_forward), ("backward", s.has_backward),
                                 ("decode", s.has_decode), ("paged decode", s.has_paged_decode)) if has]
        rule = f"{'/'.join(s.dtypes)}, head_dim {s.head_dim_rule()}" + (", GQA" if s.gqa else "")
        if s.variants:
            rule += ", variants " + "/".join(s.variants)
        if s.needs_cc:
            rule += f", needs cc {s.needs_cc // 10}.{s.needs_cc % 10}"
        where = ""
        if gpu:
            why = lib.runs_here(s)
            where = "  [runs here]" if not why else "  [not here: another GPU]"
        print(f"  {s.name}: {' + '.join(what)}; {rule}{where}", file=out)
    for kind in KINDS:
        label = kind.replace("_", " ")
        if gpu:
            try:
                print(f"default {label}: {default_step(kind).name}", file=out)
            except FlashStepsError as e:
                print(f"default {label}: none ({e})", file=out)
            continue
        # No GPU to choose for: the choice on a Hopper GPU and on any other.
        choice = []
        for cc, where in ((90, "on sm_90"), (80, "elsewhere")):
            try:
                choice.append(f"{default_step(kind, cc).name} {where}")
            except FlashStepsError:
                choice.append(f"none {where}")
        print(f"default {label}: " + ", ".join(choice) + " (no GPU here to choose for)", file=out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashsteps", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["info"], help="info: the GPU, the steps it runs, the defaults")
    args = parser.parse_args(argv)
    if args.command == "info":
        return info()
    return 2


if __name__ == "__main__":
    sys.exit(main())
