"""The notebooks run top to bottom on the checkout and show what their text says.

Each notebook is executed in a fresh ``python3`` kernel (nbclient) in a temporary directory, with
the repository root first on the kernel's PYTHONPATH so that it imports this checkout rather than
an installed sqlcal. A last cell, appended here and never saved, prints a few of the notebook's
own results as JSON for the assertions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

QUICKSTART_CHECKS = """
import json
print(json.dumps({
    "sqlcal_file": sqlcal.__file__,
    "groups": report[["model", "segment"]].values.tolist(),
    "held_out_ece": comparison["ece"].reset_index().to_dict("records"),
    "held_out_mean": comparison.mean().unstack().to_dict("index"),
    "in_sample_cutoff": float(in_sample["cutoff_error"].abs().max()),
    "infinite_log_loss": {k: int(v["n_infinite"].sum()) for k, v in log_loss.items()},
}))
"""

CHOOSING_CHECKS = """
import json
print(json.dumps({
    "sqlcal_file": sqlcal.__file__,
    "groups": side_by_side[["model", "segment"]].values.tolist(),
    "columns": list(side_by_side.columns),
    "decisions": decisions.to_dict("records"),
    "two_atoms": pd.DataFrame([two_atoms(e) for e in [0.0, 0.01]]).to_dict("records"),
}))
"""

GROUPS = [[m, s] for m in ("v1", "v2") for s in ("android", "ios", "partner", "web")]


def run(name: str, checks: str, cwd: Path) -> tuple[object, dict]:
    """Execute notebook ``name`` with ``checks`` appended; return it and the checks' JSON."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(checks))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)  # raises CellExecutionError on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    # stdout only: a warning on stderr (printed once per process) must not end the JSON line
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs
                   if o.output_type == "stream" and o.get("name") == "stdout")
    result = json.loads(last.strip().splitlines()[-1])
    assert Path(result["sqlcal_file"]).resolve() == ROOT / "sqlcal" / "__init__.py"
    return nb, result


def png_outputs(nb) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
               for o in c.outputs)


def test_quickstart(tmp_path):
    nb, out = run("quickstart.ipynb", QUICKSTART_CHECKS, tmp_path)
    assert (tmp_path / "demo.duckdb").exists()  # the demo data went to the working directory
    assert out["groups"] == GROUPS
    assert png_outputs(nb) == 2  # the reliability diagram and the cumulative plot
    # recalibration on week 1 fixes v1's static miscalibration on the held-out week ...
    ece = {(r["model"], r["segment"]): r for r in out["held_out_ece"]}
    for group in [("v1", "android"), ("v1", "ios")]:
        assert ece[group]["isotonic"] < 0.5 * ece[group]["score"]
        assert ece[group]["platt"] < 0.5 * ece[group]["score"]
    # ... and lowers every held-out metric on average over the groups
    mean = out["held_out_mean"]
    for metric in ("ece", "cutoff_error", "brier"):
        assert mean[metric]["isotonic"] < mean[metric]["score"]
        assert mean[metric]["platt"] < mean[metric]["score"]
    assert out["in_sample_cutoff"] < 1e-12  # isotonic is calibrated on its own rows
    # isotonic's blocks at exactly 0 or 1 meet the other label next week; Platt's never do
    assert out["infinite_log_loss"]["isotonic"] > 0
    assert out["infinite_log_loss"]["platt"] == 0


def test_choosing_a_metric(tmp_path):
    nb, out = run("choosing_a_metric.ipynb", CHOOSING_CHECKS, tmp_path)
    assert out["groups"] == GROUPS
    for column in ("ece", "ece_quantile", "cutoff_error", "cutoff_lower", "cutoff_upper",
                   "noise_floor", "kuiper_p", "smooth_ece", "ls_ece", "smce", "tce"):
        assert column in out["columns"]
    for row in out["decisions"]:  # Props. 3.1 and 3.2 of Rossellini et al. on the sample
        assert row["monotone_risk_gap"] <= row["two_cutoff"] + 1e-12
        assert row["risk_gap"] <= row["plug_in_ece"] + 1e-12
    calibrated, moved = out["two_atoms"]  # Fixture A: ECE jumps, smCE moves by O(ε)
    assert calibrated["ece_10_bins"] == pytest.approx(0, abs=1e-12)
    assert moved["ece_10_bins"] == pytest.approx(0.49)
    assert moved["ece_11_bins"] == pytest.approx(0, abs=1e-12)
    assert moved["smce"] == pytest.approx(0.01 * 0.98 / 2)
    text = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for paper in ("Rossellini", "Gopalan", "Chidambaram", "Matsubara", "Błasiok", "Gao"):
        assert paper in text


MONITORING_CHECKS = """
import json
print(json.dumps({
    "sqlcal_file": sqlcal.__file__,
    "alarms_day70": len(check70.alarms),
    "alarms": check75.alarms[["change_day", "alarm_day"]].astype(str).values.tolist(),
    "intercept_share": float(alarm.intercept / alarm.mcb),
    "rewritten": int((written.status == "written").sum()),
}))
"""


def test_monitoring(tmp_path):
    nb, out = run("monitoring.ipynb", MONITORING_CHECKS, tmp_path)
    assert (tmp_path / "monitoring.duckdb").exists()
    assert out["alarms_day70"] == 0  # the change has barely reached the final days
    [(change, alarm)] = out["alarms"]  # one alarm, dated near the planted day 2026-07-30
    assert abs((np.datetime64(change) - np.datetime64("2026-07-30")).astype(int)) <= 3
    assert "2026-07-30" <= alarm <= "2026-08-07"
    assert out["intercept_share"] >= 0.8  # a planted intercept change
    assert png_outputs(nb) == 1
