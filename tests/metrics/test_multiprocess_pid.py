"""A serving process's metrics files are named by its process id, read once: a fork must read it again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Run in an interpreter of its own: a fork of the test process could copy another thread's
# held lock (a server fixture's metrics), and use_multiprocess() changes the process for good.
PROBE = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from prometheus_client import Counter
    from offsetstore.server import metrics

    directory = Path(sys.argv[1])
    metrics.use_multiprocess(str(directory))
    counter = Counter("fork_probe", "A counter made before the fork.", registry=None)
    counter.inc()
    child = os.fork()
    if child == 0:  # its increment goes to a file named by its own pid, not its parent's
        code = 1
        try:
            counter.inc()
            code = 0 if (directory / f"counter_{os.getpid()}.db").exists() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    sys.exit(os.waitstatus_to_exitcode(status) or (0 if (directory / f"counter_{os.getpid()}.db").exists() else 3))
    """
)


def test_a_forked_process_records_into_files_of_its_own(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # the parent's and the child's
