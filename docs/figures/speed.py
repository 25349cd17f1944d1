"""Draw docs/_static/speed.png, the landing page's speed picture, from bench JSON.

Usage: ``python docs/figures/speed.py`` (needs matplotlib). The inputs are the
``--json`` files of the ``vecpool bench`` runs quoted in docs/performance.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "_static" / "speed.png"
BACKENDS = ["gym-sync", "gym-async", "vecpool", "vecpool-inproc"]
PANELS = [  # (file, workload, num_envs, title)
    ("bench-2cpu-2026-11-22.json", "cartpole", 32, "CartPole, 32 envs"),
    ("bench-2cpu-2026-11-22.json", "busy", 16, "200 us step, 16 envs"),
    ("bench-2cpu-2026-11-22.json", "bigobs", 32, "84x84x4 frames, 32 envs"),
    (
        "bench-agent-cartpole-2cpu-2026-11-22.json",
        "cartpole",
        32,
        "CartPole + 0.5 ms policy, 32 envs",
    ),
    (
        "bench-agent-atari-2cpu-2026-11-22.json",
        "atari",
        8,
        "Pong + 5 ms policy, 8 envs",
    ),
]


def main() -> None:
    """Draw the figure."""
    figure, axes = plt.subplots(1, len(PANELS), figsize=(15, 3.2))
    for axis, (name, workload, num_envs, title) in zip(axes, PANELS, strict=True):
        data = json.loads((HERE / name).read_text())
        (group,) = [
            g
            for g in data["results"]
            if g["workload"] == workload and g["num_envs"] == num_envs
        ]
        base = group["backends"]["gym-async"]["median"]
        ratios = [group["backends"][b]["median"] / base for b in BACKENDS]
        bars = axis.bar(BACKENDS, ratios, color=["#999", "#bbb", "#1f77b4", "#6baed6"])
        axis.bar_label(bars, labels=[f"{r:.1f}x" for r in ratios], fontsize=8)
        axis.set_title(title, fontsize=9)
        axis.tick_params(axis="x", labelrotation=35, labelsize=8)
    axes[0].set_ylabel("env-steps/s vs gymnasium AsyncVectorEnv")
    figure.suptitle(
        "vecpool bench, 2 CPUs (medians of 3 interleaved rounds)", fontsize=10
    )
    figure.tight_layout()
    figure.savefig(OUT, dpi=110)
    sys.stdout.write(f"wrote {OUT}\n")


if __name__ == "__main__":
    main()
