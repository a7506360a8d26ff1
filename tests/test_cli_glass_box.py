"""``fatstudio glass-box induction|superposition --out RUN_DIR``: a run of hand-set weights that the other commands
open like any, and its errors in a line."""
import json

import pytest

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.runs.folder import Run


def test_glass_box_builds_a_run_the_other_commands_open(tmp_path, capsys):
    assert main(["glass-box", "induction", "--out", str(tmp_path / "ind")]) == 0
    out = capsys.readouterr().out
    assert "built the induction glass-box model" in out and "previous-token head" in out and "fatstudio ablate" in out
    assert Run.open(tmp_path / "ind").info.glass_box == "induction"
    assert main(["ablate", str(tmp_path / "ind"), "--out", str(tmp_path / "ablation.json")]) == 0
    costs = {r["component"]: r["delta_loss"] for r in json.loads((tmp_path / "ablation.json").read_text())["rows"]}
    assert max(costs, key=costs.get) in ("self/0/0", "self/1/0")  # the constructed heads cost the most
    assert main(["glass-box", "superposition", "--out", str(tmp_path / "sup")]) == 0
    assert "--point mlp/0/out" in capsys.readouterr().out
    assert (tmp_path / "sup" / "known_features.safetensors").is_file()


def test_glass_box_refuses_a_taken_folder_or_an_unknown_model_in_a_line(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["glass-box", "induction", "--out", str(tmp_path / "taken")]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "already exists and is not empty" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"  # untouched
    with pytest.raises(SystemExit) as e:  # argparse: the choices, in a line
        main(["glass-box", "gossip", "--out", str(tmp_path / "x")])
    assert e.value.code == EXIT_ERROR
    assert "invalid choice: 'gossip'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
