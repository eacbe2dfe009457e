#!/usr/bin/env python3
"""Unit tests of tools/ladder.py (a CPU test: cpu.ladder.unit). Each builds a throwaway series in a
temporary folder (CMakeLists.txt, steps/*/kernel.cu, docs/, README.md) and checks that the budget
check passes on it, then fails once one step goes over each budget in turn."""
import io
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ladder  # noqa: E402

BANNER = "// Step {nn}: what it adds.\n// Read with: docs/{name}.md\n"
KERNEL = """{banner}#include "ops.h"
namespace step{nn} {{
template <int N>
__global__ void __launch_bounds__(128)
    kernel(float* x) {{
{body}}}
__device__ __forceinline__ float twice(float x) {{ return 2.f * x; }}  // a "{{" in a string is no brace
}}  // namespace step{nn}
"""


def kernel_text(nn, name, body_lines=3, banner=None):
    body = "".join(f"  x[{i}] = {i}.f;\n" for i in range(body_lines))
    return KERNEL.format(banner=banner if banner is not None else BANNER.format(nn=nn, name=name), nn=nn, body=body)


class Series:
    """A throwaway series of three steps: 01 (first), 02 (BASE 01), 03 (REWRITE)."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="ladder_test_")
        self.steps = {"01_first": None, "02_second": "BASE 01_first", "03_third": 'REWRITE "a new family"'}
        for i, name in enumerate(self.steps, 1):
            self.write_kernel(name, kernel_text(f"{i:02d}", name))
            self.write(f"docs/{name}.md", "# A lesson\n\nword " * 10 + "\n## Appendix\n" + "history " * 50)
        self.write_cmake()
        self.write("README.md", "# Series\n\n" + ladder.README_BEGIN + "\n| step | idea | status |\n|---|---|---|\n" +
                   "".join(f"| [{n}](steps/{n}) | idea {n} | done |\n" for n in self.steps) + ladder.README_END + "\n")
        ladder.render_readme(self.root)

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def write_kernel(self, name, text):
        self.write(f"steps/{name}/kernel.cu", text)

    def write_cmake(self):
        lines = [f"add_step({n} FAMILY attention {how or ''})" for n, how in self.steps.items()]
        self.write("CMakeLists.txt", "function(add_step name)\nendfunction()\n" + "\n".join(lines) + "\n")

    def check(self):
        out = io.StringIO()
        rc = ladder.check(self.root, out)
        return rc, out.getvalue()

    def close(self):
        shutil.rmtree(self.root)


class LadderTest(unittest.TestCase):
    def setUp(self):
        self.s = Series()

    def tearDown(self):
        self.s.close()

    def assertFails(self, needle):
        rc, out = self.s.check()
        self.assertEqual(rc, 1, out)
        self.assertIn(needle, out)

    def test_a_series_within_budget_passes(self):
        rc, out = self.s.check()
        self.assertEqual(rc, 0, out)

    def test_kernel_over_650_lines_fails(self):
        self.s.write_kernel("03_third", kernel_text("03", "03_third", body_lines=ladder.MAX_KERNEL_LINES))
        ladder.render_readme(self.s.root)
        self.assertFails("03_third: kernel.cu has")

    def test_diff_from_base_over_450_lines_fails(self):
        # 02 grows from 01 by 460 new lines: over the budget, though its functions stay short.
        extra = "".join(f"__device__ int f{i}() {{ return {i}; }}\n" for i in range(ladder.MAX_CHANGED_LINES + 10))
        self.s.write_kernel("02_second", kernel_text("02", "02_second") + extra)
        ladder.render_readme(self.s.root)
        self.assertFails("lines changed from BASE 01_first")

    def test_rewrite_is_not_held_to_the_diff_budget(self):
        extra = "".join(f"__device__ int f{i}() {{ return {i}; }}\n" for i in range(ladder.MAX_CHANGED_LINES + 10))
        self.s.write_kernel("03_third", kernel_text("03", "03_third") + extra)
        ladder.render_readme(self.s.root)
        rc, out = self.s.check()
        self.assertEqual(rc, 0, out)

    def test_function_over_250_lines_fails(self):
        self.s.write_kernel("03_third", kernel_text("03", "03_third", body_lines=ladder.MAX_FUNCTION_LINES))
        ladder.render_readme(self.s.root)
        self.assertFails("kernel has 254 lines")  # template, bounds, signature, 250, brace

    def test_long_banner_fails(self):
        banner = "".join(f"// line {i}\n" for i in range(ladder.MAX_BANNER_LINES + 1))
        self.s.write_kernel("03_third", kernel_text("03", "03_third", banner=banner))
        ladder.render_readme(self.s.root)
        self.assertFails("the banner has 46 lines")

    def test_banner_with_measured_figures_fails(self):
        for figure in ("3% of the time", "1.25× faster", "2× slower", "12.5 ms", "654 TFLOP/s", "590 million"):
            with self.subTest(figure=figure):
                self.s.write_kernel("03_third", kernel_text("03", "03_third", banner=f"// Step 03: {figure}\n"))
                self.assertFails("the banner quotes measured figures")

    def test_shapes_and_modulo_are_not_figures(self):
        for text in ("4 × 2 warps of [32, 64]", "wgmma m64n128k16 × D/16", "kv_full[t % 2]", "BM×BN tile"):
            with self.subTest(text=text):
                self.assertEqual(ladder.banner_figures([f"// {text}"]), [])

    def test_long_lesson_fails_and_the_appendix_does_not_count(self):
        self.s.write("docs/03_third.md", "word " * (ladder.MAX_LESSON_WORDS + 1))
        self.assertFails("docs/03_third.md has 9001 words")
        self.s.write("docs/03_third.md", "word " * 100 + "\n## Appendix: history\n" + "word " * 20000)
        rc, out = self.s.check()
        self.assertEqual(rc, 0, out)

    def test_a_step_without_base_or_rewrite_fails(self):
        self.s.steps["03_third"] = None
        self.s.write_cmake()
        self.assertFails("says neither BASE")

    def test_debt_excuses_a_listed_budget_only(self):
        self.s.write_kernel("03_third", kernel_text("03", "03_third", body_lines=ladder.MAX_KERNEL_LINES))
        ladder.render_readme(self.s.root)
        self.s.write("tools/ladder_debt.txt", "03_third kernel_lines  # to be re-cut\n")
        rc, out = self.s.check()  # kernel_lines owed; but its one function is over 250 lines too
        self.assertEqual(rc, 1, out)
        self.assertIn("03_third: kernel has", out)
        self.assertNotIn("kernel.cu has", out)

    def test_debt_on_a_step_within_budget_fails(self):
        self.s.write("tools/ladder_debt.txt", "02_second kernel_lines  # stale\n")
        self.assertFails("within the 'kernel_lines' budget now")

    def test_stale_readme_fails_and_render_fixes_it(self):
        self.s.write_kernel("02_second", kernel_text("02", "02_second", body_lines=5))
        self.assertFails("generated columns are stale")
        ladder.render_readme(self.s.root)
        rc, out = self.s.check()
        self.assertEqual(rc, 0, out)
        readme = ladder.read_text(os.path.join(self.s.root, "README.md"))
        self.assertIn("| [02_second](steps/02_second) | [01](steps/01_first) |", readme)
        self.assertIn("| idea 02_second | done |", readme)  # the written columns are kept

    def test_the_function_finder(self):
        text = kernel_text("01", "x", body_lines=4)
        funcs = ladder.device_functions(text)
        self.assertEqual([f[0] for f in funcs], ["kernel", "twice"])
        name, first, last = funcs[0]
        self.assertTrue(text.split("\n")[first - 1].startswith("template"))
        self.assertEqual(last - first + 1, 3 + 4 + 1)  # template, bounds line, signature, body, brace


if __name__ == "__main__":
    unittest.main()
