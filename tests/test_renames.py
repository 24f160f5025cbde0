"""One word per concept: an option or value renamed in 0.x is refused under its old spelling
with an OptionError that names the new one, never read under the new meaning."""

from __future__ import annotations

import pytest

import sqlcal
from sqlcal.monitor import config as monitor_config
from sqlcal.monitor.monitor import check_detect
from sqlcal.options import OptionError

# the checks run at the boundary, before the store is opened: a path that does not exist
STORE = "/nonexistent/store.duckdb"


def test_detect_horizon_as_a_number_of_checks_names_checks():
    # horizon=365 meant 365 daily checks; read as days it would silently change the maturity
    with pytest.raises(OptionError, match=r"horizon must be .*checks="):
        sqlcal.detect(STORE, horizon=365)


def test_detect_maturity_horizon_names_horizon():
    with pytest.raises(OptionError, match=r"maturity_horizon= was renamed horizon="):
        sqlcal.detect(STORE, maturity_horizon="30d")


def test_monitor_toml_detect_horizon_names_checks(tmp_path):
    with pytest.raises(monitor_config.ConfigError, match=r"\[detect\] horizon was renamed checks"):
        check_detect({"horizon": 365})
    assert check_detect({"checks": 30})["checks"] == 30


def test_monitor_command_refuses_detect_horizon(tmp_path, capsys):
    from sqlcal.cli.commands import main
    toml = tmp_path / "monitor.toml"
    toml.write_text('[source]\ndata = "unused.duckdb"\nscore = "p"\nlabel = "y"\ntime = "t"\n'
                    f'[snapshot]\nstore = "{tmp_path / "s.duckdb"}"\n[detect]\nhorizon = 365\n')
    assert main(["monitor", "--config", str(toml)]) == 2
    assert "[detect] horizon was renamed checks" in capsys.readouterr().err


@pytest.mark.parametrize("function, old, new", [
    ("platt", "tolerance", "epsilon"),
    ("multiclass", "tolerance", "sum_tolerance"),
    ("temperature_scaling", "tolerance", "sum_tolerance"),
])
def test_renamed_tolerance_names_the_new_keyword(function, old, new):
    import pandas as pd
    df = pd.DataFrame({"p": [0.2, 0.7], "y": [0, 1]})
    with pytest.raises(OptionError, match=rf"{function}\(\): {old}= was renamed {new}="):
        getattr(sqlcal, function)(df, **{old: 0.05})


def test_modified_platt_reports_its_epsilon():
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng(3)
    p = rng.uniform(0.05, 0.95, 400)
    df = pd.DataFrame({"p": p, "y": (rng.random(400) < p).astype(int)})
    table = sqlcal.platt(df, score="p", label="y", modified=True, epsilon=0.3).table
    assert "tolerance" not in table and table["epsilon"].tolist() == [0.3]


@pytest.mark.parametrize("function, old, new", [
    ("cutoff_error", "cells", "grid"), ("kuiper", "levels", "exact"), ("ks", "cells", "grid"),
    ("lipschitz_calibration_error", "cells", "grid"),
    ("distance_to_calibration", "cells", "grid"),
    ("interval_calibration_error", "levels", "exact"),
    ("isotonic", "levels", "exact"),
    ("decompose", "levels", "exact"),
])
def test_old_method_values_name_the_new_ones(function, old, new):
    import pandas as pd
    df = pd.DataFrame({"p": [0.2, 0.7], "y": [0, 1]})
    with pytest.raises(OptionError, match=rf"method='{old}' was renamed method='{new}'"):
        getattr(sqlcal, function)(df, score="p", label="y", method=old)


def test_segments_levels_strategy_names_lattice():
    import pandas as pd
    df = pd.DataFrame({"p": [0.2, 0.7], "y": [0, 1], "f": ["a", "b"]})
    with pytest.raises(OptionError, match=r"strategy='levels' was renamed strategy='lattice'"):
        sqlcal.segments(df, score="p", label="y", features=["f"], strategy="levels")


def test_ls_ece_step_names_grid_step():
    import pandas as pd
    df = pd.DataFrame({"p": [0.2, 0.7], "y": [0, 1]})
    with pytest.raises(OptionError, match=r"ls_ece\(\): step= was renamed grid_step="):
        sqlcal.ls_ece(df, score="p", label="y", step=0.01)
