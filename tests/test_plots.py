"""Diagrams draw the numbers of the summaries: checked on the drawn data and the rendered PNG."""

from __future__ import annotations

import matplotlib

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
        grid = sqlcal.cutoff_error(part, score="p", label="y", exact=False, cells=64)
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
