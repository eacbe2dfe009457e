"""pytest setup: the package from this checkout, the `gpu` marker, and (for CTest) exit
$FLASHSTEPS_SKIPPED_EXIT when everything skipped, so that CTest reports "Skipped", not a pass."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python/: import flashsteps


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs PyTorch and a CUDA GPU (CTest: python.gpu)")


def pytest_sessionfinish(session, exitstatus):
    code = os.environ.get("FLASHSTEPS_SKIPPED_EXIT")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    # 5 is pytest's "no tests collected": with -m gpu, when the GPU module skipped as a whole.
    if not code or reporter is None or exitstatus not in (0, 5):
        return
    ran = sum(len(reporter.stats.get(k, [])) for k in ("passed", "failed", "error", "xpassed", "xfailed"))
    if reporter.stats.get("skipped") and ran == 0:
        session.exitstatus = int(code)
