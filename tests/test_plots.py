"""Diagrams draw the numbers of the summaries: checked on the drawn data and the rendered PNG."""

from __future__ import annotations

import matplotlib
import matplotlib.colors
import matplotlib.patches

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import sqlcal  # noqa: E402
from sqlcal import plots  # noqa: E402
from tests.conftest import calibration_data  # noqa: E402


def test_cumulative_plot_draws_the_running_residual_sum(upload, tmp_path):
    df = calibration_data(3000, seed=1, groups=2, ties=True)
    ax = plots.cumulative_plot(upload(df), score="p", label="y", by="g", cells=64)
    curves = [line for line in ax.get_lines() if line.get_label() in ("g0", "g1")]
    assert len(curves) == 2
    for line in curves:
        part = df[df.g == line.get_label()].sort_values("p")
        cell = np.minimum(np.floor(part.p * 64), 63).to_numpy()
        s = np.cumsum((part.y - part.p).to_numpy()) / len(part)
        ends = np.concatenate([[0.0], s[np.append(cell[1:] != cell[:-1], True)]])
        np.testing.assert_allclose(line.get_ydata(), ends, atol=1e-12)
        # the curve's range is the grid value of the cutoff error
        grid = sqlcal.cutoff_error(part, score="p", label="y", method="grid", cells=64)
        assert np.ptp(line.get_ydata()) == pytest.approx(grid.cutoff_error.iloc[0], abs=1e-12)
    path = tmp_path / "cumulative.png"
    ax.figure.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reliability_diagram_has_one_point_per_bin(upload, tmp_path):
    df = calibration_data(2000, seed=2)
    ax = plots.reliability_diagram(upload(df), score="p", label="y", bins=10)
    table = sqlcal.reliability(upload(df), score="p", label="y", bins=10)
    (bars,) = [c for c in ax.containers if c.get_label() == "all"]
    points = bars.lines[0]
    np.testing.assert_allclose(np.asarray(points.get_xdata(), float), table.mean_score)
    np.testing.assert_allclose(np.asarray(points.get_ydata(), float), table.observed)
    assert ax.get_xlabel() == "mean score in bin"
    path = tmp_path / "reliability.png"
    ax.figure.savefig(path)
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.std() > 0  # a real, non-blank picture


def test_smooth_reliability_diagram_draws_the_kernel_curve(upload, tmp_path):
    df = calibration_data(4000, seed=3, groups=2)
    ax = plots.smooth_reliability_diagram(upload(df), score="p", label="y", by="g")
    curve = sqlcal.smooth_reliability(upload(df), score="p", label="y", by="g")
    values = sqlcal.smooth_ece(upload(df), score="p", label="y", by="g")
    lines = [line for line in ax.get_lines() if line.get_label().startswith("g")]
    assert len(lines) == 2
    for line in lines:
        g = line.get_label().split(" ")[0]
        np.testing.assert_allclose(line.get_ydata(), curve[curve.g == g].observed)
        value = values.set_index("g").smooth_ece[g]
        assert f"{value:.3f}" in line.get_label()
    path = tmp_path / "smooth.png"
    ax.figure.savefig(path)
    assert path.stat().st_size > 10_000


def test_tce_diagram_draws_each_bin(upload, tmp_path):
    df = calibration_data(3000, seed=4)
    ax = plots.tce_diagram(upload(df), score="p", label="y", strategy="quantile")
    table = sqlcal.tce_bins(upload(df), score="p", label="y", strategy="quantile")
    bars = [line for line in ax.get_lines() if line.get_linewidth() == 2.5
            and line.get_color() == "C0"]
    np.testing.assert_allclose(sorted(b.get_ydata()[0] for b in bars), sorted(table.rate))
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == sorted(f"{r:.0f}/{w:.0f}" for r, w in zip(table.rejected, table.W))
    ax.figure.savefig(tmp_path / "tce.png")
    assert (tmp_path / "tce.png").stat().st_size > 10_000


# -- the rendered PNG ---------------------------------------------------------------------------
# Each diagram is rendered by Agg at a fixed size and dpi, decoded, and checked on its pixels:
# data coordinates are mapped to pixels with the Axes' own transforms, and every check allows a
# pixel or two (antialiasing, dashes) instead of comparing with a golden image.

DPI = 80


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def png_pixels(ax) -> np.ndarray:
    """Render ax's figure to PNG in memory at DPI and decode it: (rows, cols, RGB) in [0, 1]."""
    import io

    import matplotlib.image

    fig = ax.figure
    fig.set_dpi(DPI)  # savefig at the figure's own dpi keeps ax.transData valid for the PNG
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    buf.seek(0)
    image = matplotlib.image.imread(buf, format="png")[..., :3]
    width, height = fig.get_size_inches() * DPI
    assert image.shape[:2] == (round(height), round(width))
    return image


def pixel(ax, x, y, transform=None) -> tuple[int, int]:
    """(row, column) of the data point (x, y) in the decoded image (rows run down)."""
    col, up = (transform or ax.transData).transform((x, y))
    return int(ax.figure.bbox.height - up), int(col)


def blend(colour, alpha: float) -> np.ndarray:
    """The colour of a translucent fill over the white background."""
    return alpha * np.asarray(matplotlib.colors.to_rgb(colour)) + (1 - alpha)


def near(image, at, colour, *, tol: float = 0.1, r: int = 1) -> bool:
    """Whether a pixel within r of ``at`` has ``colour`` (each channel within tol)."""
    row, col = at
    window = image[max(row - r, 0): row + r + 1, max(col - r, 0): col + r + 1]
    target = np.asarray(matplotlib.colors.to_rgb(colour))
    return bool((np.abs(window - target).max(axis=-1) <= tol).any())


def tint_near(image, at, colour, *, at_least: float = 0.45, r: int = 1) -> bool:
    """Whether a pixel within r of ``at`` is ``colour`` laid over white with opacity at least
    ``at_least``: a thin or dotted line, which antialiasing renders only partly opaque."""
    row, col = at
    window = image[max(row - r, 0): row + r + 1, max(col - r, 0): col + r + 1]
    ink = 1 - np.asarray(matplotlib.colors.to_rgb(colour))
    alpha = (1 - window) @ ink / (ink @ ink)
    off = np.abs(1 - window - alpha[..., None] * ink).max(axis=-1)
    return bool(((alpha >= at_least) & (off <= 0.06)).any())


def grey_near(image, at, *, darker_than: float, r: int = 1) -> bool:
    """Whether a neutral (grey to black) pixel darker than ``darker_than`` lies within r of at."""
    row, col = at
    window = image[max(row - r, 0): row + r + 1, max(col - r, 0): col + r + 1]
    neutral = np.ptp(window, axis=-1) < 0.04
    return bool((neutral & (window.mean(axis=-1) < darker_than)).any())


def runs(mask: np.ndarray, *, gap: int = 3, shortest: int = 3) -> list[tuple[int, int]]:
    """[start, stop) of the runs of True along a scanline; gaps up to ``gap`` pixels (a thin line
    drawn across a bar) are bridged, runs shorter than ``shortest`` (antialiased edges) dropped."""
    found: list[list[int]] = []
    for i in np.flatnonzero(mask):
        if found and i - found[-1][1] <= gap:
            found[-1][1] = i + 1
        else:
            found.append([i, i + 1])
    return [(a, b) for a, b in found if b - a >= shortest]


def share(hits) -> float:
    hits = list(hits)
    return sum(hits) / len(hits)


def assert_frame_drawn(image, ax):
    """The four spines are dark lines along the Axes' box; the axis labels are rendered text."""
    edge = np.linspace(0.03, 0.97, 40)
    for points in ([(0, t) for t in edge], [(1, t) for t in edge],
                   [(t, 0) for t in edge], [(t, 1) for t in edge]):
        assert all(grey_near(image, pixel(ax, *p, ax.transAxes), darker_than=0.3)
                   for p in points)
    # a few pixels right of the right spine, the background again: a line, not a dark area
    right = [pixel(ax, 1, t, ax.transAxes) for t in edge]
    assert all(image[r, c + 4].min() > 0.95 for r, c in right)
    renderer = ax.figure.canvas.get_renderer()
    for text in (ax.xaxis.label, ax.yaxis.label, ax.title):
        box = text.get_window_extent(renderer)
        assert max(box.width, box.height) > 20
        top, bottom = (int(ax.figure.bbox.height - y) for y in (box.y1, box.y0))
        assert image[top:bottom + 1, int(box.x0): int(box.x1) + 1].min() < 0.3  # dark glyphs


def assert_not_blank(image):
    assert (image.min(axis=-1) < 0.9).mean() > 0.01
    assert len(np.unique((image * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 20


def assert_diagonal_drawn(image, ax):
    """The dashed grey y = x reference: found along the diagonal, not beside it."""
    t = np.linspace(0.1, 0.85, 150)
    on = share(grey_near(image, pixel(ax, v, v), darker_than=0.8) for v in t)
    beside = share(grey_near(image, pixel(ax, v, v + 0.08), darker_than=0.8) for v in t)
    assert on > 0.6 and beside < 0.1, (on, beside)


def sloped_data(n: int = 4000, seed: int = 0, *, gap=(0.3, 0.4), groups: int = 0,
                apart: float = 0.0):
    """Uniform scores with no score in ``gap`` (an empty bin), observed rate 0.1 + 0.8 p; in
    group g<i> (``groups`` of them) the rate is lifted by ``apart`` · i."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    p = rng.random(n)
    p = p[(p < gap[0]) | (p >= gap[1])]
    g = rng.integers(0, max(groups, 1), len(p))
    rate = np.clip(0.1 + 0.8 * p + apart * g, 0, 1)
    df = pd.DataFrame({"p": p, "y": (rng.random(len(p)) < rate).astype(np.int64)})
    if groups:
        df["g"] = np.array([f"g{i}" for i in range(groups)])[g]
    return df


def test_reliability_diagram_png_has_one_bar_per_nonempty_bin():
    df = sloped_data()
    ax = plots.reliability_diagram(df, score="p", label="y", bins=10)
    table = sqlcal.reliability(df, score="p", label="y", bins=10)
    assert len(table) == 9  # bin [0.3, 0.4) is empty
    (hist,) = ax.child_axes
    bars = [p for p in hist.patches if isinstance(p, matplotlib.patches.Rectangle)]
    assert len(bars) == len(table)
    shares = table.W / table.W.sum()
    np.testing.assert_allclose(sorted(b.get_height() for b in bars), sorted(shares))
    np.testing.assert_allclose(sorted(b.get_x() + b.get_width() / 2 for b in bars),
                               sorted(table.mean_score))
    assert (ax.get_xlim(), ax.get_ylim()) == ((0, 1), (0, 1))
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("mean score in bin", "observed rate")
    assert "B = 10" in ax.get_title()

    image = png_pixels(ax)
    assert_not_blank(image)
    assert_frame_drawn(image, ax)
    assert_diagonal_drawn(image, ax)
    # a scanline through the bars, halfway up the lowest one
    row, _ = pixel(hist, 0.5, shares.min() / 2)
    bar_colour = np.abs(image[row] - blend("C0", 0.35)).max(axis=-1) <= 0.06
    found = runs(bar_colour)
    assert len(found) == len(table)
    width = (pixel(ax, 0.8 / 10, 0)[1] - pixel(ax, 0, 0)[1])
    for (start, stop), centre in zip(found, table.mean_score):
        assert abs((start + stop - 1) / 2 - pixel(ax, centre, 0)[1]) <= 2
        assert abs((stop - start) - width) <= 3
    # the empty bin leaves the background; above the bars' tops the scanline is clear
    assert image[row, pixel(ax, 0.35, 0)[1]].min() > 0.95
    above, _ = pixel(hist, 0.5, shares.max() * 1.3)
    assert not runs(np.abs(image[above] - blend("C0", 0.35)).max(axis=-1) <= 0.06)
    # each bin's point (marker) is drawn at (mean score, observed rate)
    assert all(near(image, pixel(ax, x, y), "C0")
               for x, y in zip(table.mean_score, table.observed))


def test_reliability_diagram_png_draws_each_group_in_its_colour():
    df = sloped_data(groups=2)
    ax = plots.reliability_diagram(df, score="p", label="y", by="g", bins=5)
    table = sqlcal.reliability(df, score="p", label="y", by="g", bins=5)
    (hist,) = ax.child_axes
    assert len(hist.patches) == len(table)
    image = png_pixels(ax)
    colours = {c.get_label(): c.lines[0].get_color() for c in ax.containers}
    assert sorted(colours) == ["g0", "g1"] and len(set(colours.values())) == 2
    for g, part in table.groupby("g"):
        assert share(near(image, pixel(ax, x, y), colours[g])
                     for x, y in zip(part.mean_score, part.observed)) >= 0.8
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["calibrated", *colours]


def test_smooth_reliability_diagram_png_draws_curves_and_bands():
    df = sloped_data(6000, seed=1, groups=2, apart=-0.25)
    ax = plots.smooth_reliability_diagram(df, score="p", label="y", by="g")
    curve = sqlcal.smooth_reliability(df, score="p", label="y", by="g")
    assert (ax.get_xlim(), ax.get_ylim()) == ((0, 1), (0, 1))
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("score", "smoothed observed rate")
    assert len(ax.collections) == 2  # one band per group

    image = png_pixels(ax)
    assert_not_blank(image)
    assert_frame_drawn(image, ax)
    assert_diagonal_drawn(image, ax)
    lines = {line.get_label().split(" ")[0]: line.get_color() for line in ax.get_lines()[1:]}
    parts = {g: part.reset_index(drop=True) for g, part in curve.groupby("g")}
    a, b = (parts[g] for g in sorted(parts))
    # where the two curves are apart, each is drawn in its colour, inside its band's colour
    gap = (a.observed - b.observed).abs().to_numpy()
    apart = gap > 0.06
    for g, part in parts.items():
        inside = ((part.t > 0.03) & (part.t < 0.97)).to_numpy()
        seen = inside & (gap > 0.02)  # where the other curve does not cover this one
        assert seen.sum() > 20
        assert share(near(image, pixel(ax, t, y), lines[g])
                     for t, y in zip(part.t[seen], part.observed[seen])) > 0.95
        half = 0.02 * part.density / part.density.max()
        wide = apart & inside & (half.to_numpy() > 0.012)
        assert wide.sum() > 5
        edge = part.observed + 0.7 * half  # inside the band, a few pixels off the curve
        assert share(near(image, pixel(ax, t, y), blend(lines[g], 0.25), tol=0.06, r=0)
                     for t, y in zip(part.t[wide], edge[wide])) > 0.8
    # outside the bands, well above both curves, the background
    top = np.maximum(a.observed, b.observed) + 0.08
    assert share(image[pixel(ax, t, y)].min() > 0.95
                 for t, y in zip(a.t, top) if 0.3 < t < 0.85 and y < 0.95) > 0.95


def test_smooth_reliability_diagram_orders_groups_like_the_other_diagrams():
    from sqlcal.cli.demo import demo_frame

    df = demo_frame(rows=20_000)
    kw = dict(score="score", label="label", weight="weight", by="segment")
    smooth = plots.smooth_reliability_diagram(df, **kw).get_legend().get_texts()
    binned = plots.reliability_diagram(df, **kw).get_legend().get_texts()
    names = [t.get_text().split(" ")[0] for t in smooth[1:]]
    assert names == sorted(names) == [t.get_text() for t in binned[1:]]


def test_tce_diagram_png_draws_bars_and_verdicts():
    df = sloped_data(3000, seed=2, gap=(0, 0))
    ax = plots.tce_diagram(df, score="p", label="y", strategy="quantile", bins=8)
    table = sqlcal.tce_bins(df, score="p", label="y", strategy="quantile", bins=8)
    assert (ax.get_xlim(), ax.get_ylim()) == ((0, 1), (0, 1))
    total = 100 * table.rejected.sum() / table.W.sum()
    assert f"TCE {total:.1f}%" in ax.get_title()
    assert len(ax.texts) == len(table) == 8

    image = png_pixels(ax)
    assert_not_blank(image)
    assert_frame_drawn(image, ax)
    for _, row in table.iterrows():
        lo, hi, rate = row.score_min, row.score_max, row.rate
        # the bin's bar, away from where the diagonal crosses it
        xs = [x for x in np.linspace(lo, hi, 12)[1:-1] if abs(x - rate) > 0.03]
        assert share(near(image, pixel(ax, x, rate), "C0", tol=0.06) for x in xs) > 0.8
        accepted = [(max(a, lo), min(b, hi)) for a, b in row.accepted]
        for a, b in accepted:
            if b - a > 0.03:  # long enough to see: the accepted scores in solid green
                middle = np.linspace(a, b, 7)[1:-1]
                assert share(near(image, pixel(ax, v, v), "C2", tol=0.06)
                             for v in middle if abs(v - rate) > 0.02) > 0.8
        # the rejected scores are a red dotted diagonal
        rejected = [v for v in np.linspace(lo, hi, 40)[1:-1]
                    if abs(v - rate) > 0.03
                    and not any(a - 0.01 <= v <= b + 0.01 for a, b in accepted)]
        if len(rejected) > 4:
            assert share(tint_near(image, pixel(ax, v, v), "C3") for v in rejected) > 0.8
    assert table.rejected.sum() > 0 and (table.accepted.map(len) > 0).any()


def test_cumulative_plot_png_draws_curve_bands_and_zero_line():
    df = sloped_data(3000, seed=3)
    ax = plots.cumulative_plot(df, score="p", label="y", cells=16)
    line = next(line for line in ax.get_lines() if line.get_label() == "all")
    src = sqlcal.source(df, score="p", label="y")
    from sqlcal.metrics.cells import cells_summary

    curve = plots.cumulative_curve(cells_summary(src, ("residuals",), 16).sort_values("cell"))
    np.testing.assert_allclose(line.get_ydata(), curve.s)
    assert ax.get_xlabel() == "cumulative share of weight"
    assert ax.get_ylabel().startswith("cumulative residual")
    low, high = ax.get_ylim()
    assert low <= min(curve.s_low.min(), -2 * curve.null_sd.max())
    assert high >= max(curve.s_high.max(), 2 * curve.null_sd.max())

    image = png_pixels(ax)
    assert_not_blank(image)
    assert_frame_drawn(image, ax)
    x, s, c = curve.weight_share, curve.s, line.get_color()
    # the curve through every cell end
    assert share(near(image, pixel(ax, a, b), c, tol=0.06) for a, b in zip(x, s)) == 1
    # the dotted ±2σ band of a calibrated model, where it is clear of the curve
    scale = np.ptp(ax.get_ylim()) / ax.bbox.height  # data units per pixel
    fine = np.linspace(0.05, 0.95, 150)
    curve_s, sigma = np.interp(fine, x, s), np.interp(fine, x, curve.null_sd)
    for sign in (1, -1):
        clear = [(a, sign * 2 * v) for a, b, v in zip(fine, curve_s, sigma)
                 if abs(sign * 2 * v - b) > 4 * scale]
        assert len(clear) > 50
        assert share(tint_near(image, pixel(ax, a, b), c) for a, b in clear) > 0.8
    # the shaded reach of S inside each cell, between the curve and its upper edge
    reach = [(a, (b + h) / 2) for a, b, h in zip(x, s, curve.s_high) if h - b > 8 * scale]
    assert len(reach) > 5
    shaded = blend(c, 0.15)
    assert share(near(image, pixel(ax, a, b), shaded, tol=0.05, r=2) for a, b in reach) > 0.8
    # the grey zero line across the plot
    zero = np.linspace(0.05, 0.95, 60)
    assert share(grey_near(image, pixel(ax, a, 0), darker_than=0.8) for a in zero) > 0.8


def test_series_chart_png_draws_one_line_per_group_with_a_point_per_day(upload):
    """The scheduled report's chart over time: one panel per statistic, one line per group, a
    marker per time value in the group's colour where the numbers put it."""
    from sqlcal.reporting.scheduled import metric_series, series_plot

    df = calibration_data(3000, seed=3, groups=3)
    df["day"] = np.random.default_rng(3).integers(1, 6, len(df))
    series = metric_series(upload(df), score="p", label="y", by="g", time="day",
                           metrics=["brier", "ece"])
    fig = series_plot(series, time="day", by=["g"])
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.lines]
    assert [ax.get_title() for ax in panels] == ["brier", "ece"]
    for ax in panels:
        assert len(ax.lines) == 3 and ax.get_xlabel() == "day"
        image = png_pixels(ax)
        assert_not_blank(image)
        metric = ax.get_title()
        for line, (g, part) in zip(ax.lines, series[series.metric == metric].groupby("g")):
            assert line.get_label() == g
            np.testing.assert_allclose(line.get_ydata(), part.sort_values("day").value)
            colour = line.get_color()
            hits = [near(image, pixel(ax, d, v), colour, tol=0.15, r=2)
                    for d, v in zip(part.sort_values("day").day, part.sort_values("day").value)]
            assert share(hits) >= 0.8


def test_one_group_drawn_from_the_summary_of_all_equals_its_own_diagram(upload):
    """``group=`` draws one group from the all-groups summary cached on a Source (no pass per
    group): the same curves as a diagram of that group's rows alone."""
    from sqlcal.query import reductions

    df = calibration_data(3000, seed=4, groups=3, weights=True)
    src = sqlcal.source(upload(df), score="p", label="y", weight="w", by="g")
    sqlcal.reliability(src, bins=10)
    sqlcal.cutoff_error(src)
    calls = []
    real = reductions.execute
    reductions.execute = lambda expr: calls.append(expr) or real(expr)
    try:
        one = plots.reliability_diagram(src, bins=10, group={"g": "g1"})
        curve = plots.cumulative_plot(src, group={"g": "g1"})
    finally:
        reductions.execute = real
    assert calls == []  # both diagrams came from summaries the metrics had cached
    alone = sqlcal.source(upload(df[df.g == "g1"]), score="p", label="y", weight="w")
    ref = plots.reliability_diagram(alone, bins=10)
    np.testing.assert_allclose(one.lines[1].get_xydata(), ref.lines[1].get_xydata())
    ref_curve = plots.cumulative_plot(alone)
    np.testing.assert_allclose(curve.lines[0].get_xydata(), ref_curve.lines[0].get_xydata())
    assert [t.get_text() for t in one.get_legend().get_texts()] == ["calibrated", "g1"]
    with pytest.raises(ValueError, match="not group keys"):
        plots.reliability_diagram(src, bins=10, group={"segment": "x"})
