"""A measurement in a fresh Python process: the one runner ``bench pool`` uses.

A loop that must not inherit this process's state (its imports, warm caches, a
library already loaded, its memory) runs as ``python -c`` of its module's
``child_main(SPEC)``: the child measures, prints one line ``PREFIX + JSON`` on its
standard output (its libraries' own prints go to standard error) and exits.
:func:`run_fresh` starts it and returns the JSON, or one line saying why there is
none. Used by vecpool/bench/pool_peers.py and vecpool/bench/main_job.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

__all__ = ["run_fresh"]


def run_fresh(
    module: str,
    spec: Any,
    prefix: str,
    *,
    timeout: float,
    env: dict[str, str] | None = None,
) -> Any:
    """Run ``module.child_main([json.dumps(spec)])`` in a fresh process.

    Args:
        module: The module whose ``child_main`` measures (e.g.
            ``"vecpool.bench.main_job"``).
        spec: What to measure, as JSON-serialisable data.
        prefix: What starts the child's result line.
        timeout: Seconds the process may take.
        env: The process's environment (default: this one's).

    Returns:
        The decoded JSON of the result line, or a ``str``: why there is none (the
        process ran past ``timeout``, or exited without a result line: its exit
        status and the last line of its standard error).
    """
    code = (
        f"import sys; from {module} import child_main; "
        "sys.exit(child_main(sys.argv[1:]))"
    )
    try:
        completed = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return f"its process ran past {timeout:.0f} s"
    for line in reversed(completed.stdout.splitlines()):
        if line.startswith(prefix):
            return json.loads(line[len(prefix) :])
    tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
    return f"its process exited {completed.returncode}: {tail[0]}"
