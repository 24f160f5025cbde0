"""Draw the documentation's screenshots, one per diagram type, on the demo data (``sqlcal demo``).

    python docs/make_screenshots.py            # writes docs/img/*.png
    python docs/make_screenshots.py demo.duckdb  # reuse a table written by `sqlcal demo`

Re-runnable: the demo data is seeded, so the pictures change only when the diagrams do. Each is
640 × 420 px.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

# draw with this checkout's sqlcal, not an installed copy
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from sqlcal import plots  # noqa: E402
from sqlcal.cli.demo import write_demo  # noqa: E402
from sqlcal.reporting.scheduled import metric_series, series_plot  # noqa: E402

OUT = Path(__file__).resolve().parent / "img"
SIZE, DPI = (6.4, 4.2), 100
COLUMNS = dict(table="predictions", score="score", label="label", weight="weight")

# (file name, diagram, its options): mostly the v1 model, whose segments are miscalibrated in four
# different ways (see sqlcal/cli/demo.py), so each picture has something to show
DIAGRAMS = [
    ("reliability.png", plots.reliability_diagram,
     dict(by="model", where="segment = 'ios'", bins=10)),
    ("smooth_reliability.png", plots.smooth_reliability_diagram,
     dict(by="segment", where="model = 'v1'")),
    ("tce.png", plots.tce_diagram,
     dict(where="model = 'v1' AND segment = 'ios'", strategy="quantile", bins=8)),
    ("cumulative.png", plots.cumulative_plot,
     dict(by="segment", where="model = 'v1'")),
]


def main(demo: str | None = None) -> None:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = demo or write_demo(str(Path(tmp) / "demo.duckdb"))
        for name, draw, options in DIAGRAMS:
            fig, ax = plt.subplots(figsize=SIZE, dpi=DPI, layout="constrained")
            draw(path, **COLUMNS, **options, ax=ax)
            ax.title.set_fontsize("medium")  # the long titles fit the narrower picture
            fig.savefig(OUT / name, dpi=DPI, pil_kwargs={"optimize": True})
            plt.close(fig)
            print(f"{OUT / name}: {(OUT / name).stat().st_size / 1000:.0f} kB")
        # the scheduled report's chart over time: the cutoff error per day, v1 by segment
        series = metric_series(path, **COLUMNS, by="segment", where="model = 'v1'", time="day",
                               metrics=["cutoff_error"])
        fig = series_plot(series, time="day", by=["segment"])
        fig.set_size_inches(*SIZE)
        fig.tight_layout()
        fig.savefig(OUT / "series.png", dpi=DPI, pil_kwargs={"optimize": True})
        plt.close(fig)
        print(f"{OUT / 'series.png'}: {(OUT / 'series.png').stat().st_size / 1000:.0f} kB")


if __name__ == "__main__":
    main(*sys.argv[1:2])
