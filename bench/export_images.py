"""Why labkit exports figures through one long-lived Chromium (labkit.publish.images.
StaticRenderer): plotly's fig.write_image (kaleido 1.x) starts a browser for each figure.
Both ways on the same figures, rounds interleaved so drift hits both, in one run; prints
each round's seconds per figure, the medians and their ratio.

    .venv/bin/python bench/export_images.py [--figures 3] [--rounds 3]

Needs Chromium (labkit doctor says whether kaleido finds one)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import plotly.graph_objects as go

from labkit import system
from labkit.publish import images


def long_lived(specs: list[dict]) -> float:
    started = time.monotonic()
    with images.StaticRenderer() as renderer:
        for spec in specs:
            renderer.image(spec, "png")
    return (time.monotonic() - started) / len(specs)


def browser_per_figure(specs: list[dict], folder: Path) -> float:
    started = time.monotonic()
    for i, spec in enumerate(specs):
        go.Figure(spec).write_image(folder / f"each{i}.png")
    return (time.monotonic() - started) / len(specs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    machine = system.environment()
    print(json.dumps({key: machine[key] for key in ("cpu_model", "cores", "kernel", "labkit_commit")}), flush=True)
    specs = [go.Figure(go.Scatter(x=[1, 2, 3], y=[i, 2, 1])).to_dict() for i in range(args.figures)]
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            ours.append(long_lived(specs))
            theirs.append(browser_per_figure(specs, Path(folder)))
            print(json.dumps({"round": round_ + 1, "long_lived_s_per_figure": round(ours[-1], 3),
                              "browser_per_figure_s": round(theirs[-1], 3)}), flush=True)
    median_ours, median_theirs = statistics.median(ours), statistics.median(theirs)
    print(json.dumps({"median_long_lived_s_per_figure": round(median_ours, 3),
                      "median_browser_per_figure_s": round(median_theirs, 3),
                      "browser_per_figure_over_long_lived": round(median_theirs / median_ours, 2)}))


if __name__ == "__main__":
    main()
