"""Renders the dashboard's "Lag in seconds per group" panel from a real run into docs/images/lag-seconds-panel.png.

Starts ``offsetstore serve`` with ``/metrics``, then plays a topic and three groups for
``--seconds``: the log end of two partitions grows by ``--rate`` records a second (reported
every second with ReportWatermarks), ``etl-fast`` commits close behind the log end,
``etl-slow`` consumes at 70 % of the rate, and ``etl-stalled`` stops committing halfway. It
scrapes ``/metrics`` every two seconds, evaluates the panel's expression (``max by (group)
(offsetstore_group_lag_seconds)``) over the scraped samples, plots it with matplotlib and
prints the run's final ``offsetstore groups describe``.

Usage: ``python bench/lag_panel.py [--seconds 150] [--rate 50]`` (needs matplotlib, a dev dependency).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from _server import free_port, served

ROOT = Path(__file__).resolve().parent.parent
PANEL = "Lag in seconds per group"
GROUPS = ("etl-fast", "etl-slow", "etl-stalled")


def panel_expr() -> str:
    dashboard = json.loads((ROOT / "deploy/grafana/offsetstore-dashboard.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p.get("title") == PANEL]
    return panel["targets"][0]["expr"]


def scrape(url: str, metric: str) -> dict[str, float]:
    """``metric``'s samples by group label, from one scrape of ``/metrics``."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    found: dict[str, float] = {}
    for match in re.finditer(rf"^{metric}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        group = labels.get("group", "")
        found[group] = max(found.get(group, float("-inf")), float(match.group(2)))  # max by (group)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--rate", type=int, default=50, help="records a second per partition")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/images/lag-seconds-panel.png")
    args = parser.parse_args()
    expr = panel_expr()
    metric = re.search(r"(offsetstore_group_lag_seconds)", expr).group(1)
    metrics_listen = f"127.0.0.1:{free_port()}"

    from offsetstore.client import OffsetStoreClient
    from offsetstore.core.types import OffsetCommit, Watermark

    with served(extra_args=("--metrics-listen", metrics_listen), prefix="offsetstore-lag-panel-") as server:
        url = f"http://{metrics_listen}/metrics"
        stop = threading.Event()
        started = time.monotonic()
        series: dict[str, list[tuple[float, float]]] = {g: [] for g in GROUPS}

        def play() -> None:
            consumed = {g: 0.0 for g in GROUPS}
            with OffsetStoreClient(server.address) as client:
                while not stop.is_set():
                    elapsed = time.monotonic() - started
                    log_end = int(elapsed * args.rate)
                    client.report_watermarks([Watermark("orders", p, 0, log_end) for p in range(2)])
                    consumed["etl-fast"] = max(0, log_end - args.rate // 5)
                    consumed["etl-slow"] = elapsed * args.rate * 0.7
                    if elapsed < args.seconds / 2:
                        consumed["etl-stalled"] = max(0, log_end - args.rate // 5)
                    for group in GROUPS:
                        offset = int(consumed[group])
                        client.commit_offsets(group, [OffsetCommit("orders", p, offset) for p in range(2)])
                    stop.wait(1.0)

        player = threading.Thread(target=play, daemon=True)
        player.start()
        while time.monotonic() - started < args.seconds:
            time.sleep(2.0)
            at = time.monotonic() - started
            try:
                values = scrape(url, metric)
            except OSError as error:
                print(f"scrape failed: {error}", file=sys.stderr)
                continue
            for group in GROUPS:
                if group in values:
                    series[group].append((at, values[group]))
        stop.set()
        player.join()
        describe = subprocess.run(
            [
                sys.executable,
                "-m",
                "offsetstore.cli.main",
                "groups",
                "describe",
                "etl-slow",
                "--server",
                server.address,
            ],
            capture_output=True,
            text=True,
        )
        print("$ offsetstore groups describe etl-slow")
        print(describe.stdout + describe.stderr)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    fig.patch.set_facecolor("#181b1f")
    ax.set_facecolor("#181b1f")
    for group in GROUPS:
        xs = [x for x, _ in series[group]]
        ys = [y for _, y in series[group]]
        ax.plot(xs, ys, linewidth=1.5, label=group)
        ax.fill_between(xs, ys, alpha=0.1)
    ax.set_title(PANEL, color="#d8d9da", loc="left", fontsize=11)
    ax.set_xlabel("seconds into the run (scraped every 2 s)", color="#8e8e8e")
    ax.set_ylabel("seconds", color="#8e8e8e")
    ax.tick_params(colors="#8e8e8e")
    ax.grid(color="#2c3235")
    for spine in ax.spines.values():
        spine.set_color("#2c3235")
    ax.legend(facecolor="#181b1f", edgecolor="#2c3235", labelcolor="#d8d9da", loc="upper left")
    fig.text(0.01, 0.01, expr.replace("$", r"\$"), color="#6e6e6e", fontsize=7, family="monospace")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, facecolor=fig.get_facecolor())
    for group in GROUPS:
        last = series[group][-1] if series[group] else None
        print(f"{group}: {len(series[group])} samples, last {last}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
