#!/usr/bin/env python3
"""Compare the GPU machine code of every step's kernels between two builds.

    python3 tools/cubin_diff.py BUILD_A BUILD_B [--steps 09,10,11] [--rename 3Cfg=6Config ...]

For each step it takes the kernels library of both builds (libNN_name_kernels.a, anywhere under BUILD),
pulls the cubin (the sm_XX ELF image) out of each object's fatbin, and compares the code section of
every kernel (.text.<mangled name>) byte for byte. Identical code sections mean identical SASS:
this is what "a move changed no kernel" means, checked without a GPU and without cuobjdump
(needs binutils' ar and objcopy). Both builds must target the same architectures.

--rename OLD=NEW replaces OLD by NEW in BUILD_A's mangled kernel names before the comparison, for
a refactor that renamed a type the kernels are templated on (a mangled name spells each name with its
length: struct Cfg is 3Cfg, Config is 6Config).

Prints one line per step ("same: N kernels" or what differs) and exits 1 if any step differs.
"""
import argparse
import struct
import subprocess
import sys
import tempfile
from pathlib import Path


def elf_images(blob):
    """The ELF images (cubins) inside a fatbin blob."""
    out, i = [], 0
    while (i := blob.find(b"\x7fELF", i)) >= 0:
        if blob[i + 4] != 2:  # 64-bit ELF only
            i += 4
            continue
        shoff, = struct.unpack_from("<Q", blob, i + 0x28)
        shentsize, shnum = struct.unpack_from("<HH", blob, i + 0x3A)
        end = i + shoff + shentsize * shnum
        out.append(blob[i:end])
        i = end
    return out


def code_sections(elf):
    """{section name: bytes} for every .text.* section of one cubin."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def header(k):
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", elf, shoff + k * shentsize)
        return name, off, size
    _, stroff, _ = header(shstrndx)
    sections = {}
    for k in range(shnum):
        name, off, size = header(k)
        label = elf[stroff + name: elf.index(b"\0", stroff + name)].decode()
        if label.startswith(".text."):
            sections[label[len(".text."):]] = elf[off:off + size]
    return sections


def kernels(lib):
    """{kernel: code} over every object of a static library."""
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        members = subprocess.run(["ar", "t", str(lib)], check=True, capture_output=True, text=True).stdout.split()
        for m in members:
            obj = Path(tmp) / m
            obj.write_bytes(subprocess.run(["ar", "p", str(lib), m], check=True, capture_output=True).stdout)
            fat = Path(tmp) / (m + ".fatbin")
            r = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", str(obj), str(fat)],
                               capture_output=True)
            if r.returncode != 0 or not fat.exists():
                continue
            for elf in elf_images(fat.read_bytes()):
                found.update(code_sections(elf))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_a", type=Path)
    ap.add_argument("build_b", type=Path)
    ap.add_argument("--steps", help="comma-separated step numbers (default: every step of BUILD_A)")
    ap.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                    help="rename in BUILD_A's mangled kernel names before comparing (repeatable)")
    args = ap.parse_args()
    renames = [r.split("=", 1) for r in args.rename]
    if any(len(r) != 2 or not r[0] for r in renames):
        sys.exit("cubin_diff.py: --rename takes OLD=NEW")

    def renamed(name):
        for old, new in renames:
            name = name.replace(old, new)
        return name
    wanted = set(args.steps.split(",")) if args.steps else None
    def find(build):  # {step: library}; the library's folder follows the build's layout
        return {lib.name[3:-len("_kernels.a")]: lib for lib in build.rglob("lib[0-9][0-9]_*_kernels.a")}
    libs_a, libs_b = find(args.build_a), find(args.build_b)
    if not libs_a:
        sys.exit(f"cubin_diff.py: no libNN_name_kernels.a under {args.build_a} (build the *_kernels targets)")
    differ = False
    for step, lib_a in sorted(libs_a.items()):
        if wanted and step[:2] not in wanted:
            continue
        lib_b = libs_b.get(step)
        if lib_b is None:
            print(f"{step}: missing in {args.build_b}")
            differ = True
            continue
        a, b = {renamed(k): v for k, v in kernels(lib_a).items()}, kernels(lib_b)
        if not a or not b:  # no cubin found: a compressed fatbin (nvcc compresses large ones), nothing compared
            print(f"{step}: CANNOT COMPARE: no readable cubin in {lib_a if not a else lib_b} (a compressed fatbin? "
                  f"build both with -DCMAKE_CUDA_FLAGS=--compress-mode=none)")
            differ = True
            continue
        changed = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        if not (changed or only_a or only_b):
            print(f"{step}: same: {len(a)} kernels, identical machine code")
            continue
        differ = True
        print(f"{step}: DIFFERS: {len(changed)} kernels changed, {len(only_a)} only in A, {len(only_b)} only in B")
        for k in changed[:5]:
            print(f"    changed: {k}")
        for k in only_a[:5]:
            print(f"    only in A: {k}")
        for k in only_b[:5]:
            print(f"    only in B: {k}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
