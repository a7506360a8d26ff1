"""fatstudio.notebook: each view holds what the core computes for a small trained run (tested through the widgets'
state, without a browser), the probe slider brings back that step's saved maps, and anywidget stays optional."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from fatstudio.core.inference.attention_maps import max_pool
from fatstudio.core.inspect.ablation import knockout_table
from fatstudio.core.inspect.probes import load_probe_lens, probe_path
from fatstudio.core.inspect.token_loss import token_losses
from fatstudio.core.names import MEAN_HEAD, MapName
from fatstudio.core.runs.folder import Run, load_at_step
from fatstudio.notebook import INSTALL, open_run
from fatstudio.notebook import state as notebook_state

ROOT = Path(__file__).parents[1]


def _training_helpers():
    spec = importlib.util.spec_from_file_location("training_helpers", ROOT / "tests" / "core" / "training_helpers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return _training_helpers().trained_run(tmp_path_factory, 30)  # probes at steps 10, 20, 30


def test_importing_fatstudio_imports_no_anywidget():
    code = "import sys, fatstudio, fatstudio.notebook; print('anywidget' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_anywidget_open_run_says_in_one_line_how_to_install(monkeypatch, run_dir):
    monkeypatch.setitem(sys.modules, "anywidget", None)  # import anywidget raises ImportError
    with pytest.raises(ImportError) as e:
        open_run(run_dir)
    assert str(e.value) == INSTALL and "\n" not in INSTALL and 'pip install "fatstudio[notebook]"' in INSTALL


def test_the_views_carry_their_javascript_in_the_package():
    from fatstudio.notebook.views import JS, View

    state = View(view="loss").get_state()
    js = JS / "views.js"
    assert js.parent == ROOT / "fatstudio" / "notebook" / "js"
    assert state["_esm"] == js.read_text(encoding="utf-8") and state["_css"] == (JS / "views.css").read_text(encoding="utf-8")
    code = state["_esm"].replace("http://www.w3.org/2000/svg", "")  # SVG's namespace, a name, not a fetch
    assert "export default" in code and "import " not in code and "http" not in code and "fetch(" not in code


def test_loss_curves_hold_the_runs_metrics(run_dir):
    rows = Run.open(run_dir).metrics()
    view = open_run(run_dir).loss_curves()
    assert view.train == [[r["step"], r["train_loss"]] for r in rows] and len(view.train) == 30
    assert view.val == [[r["step"], r["val_loss"]] for r in rows if "val_loss" in r] and len(view.val) == 3


def test_attention_holds_the_saved_probe_and_the_slider_changes_it(run_dir):
    run = Run.open(run_dir)
    assert run.probe_steps() == [10, 20, 30]
    view = open_run(run_dir).attention()
    maps = run.load_probe(30)
    assert view.step == 30 and view.kind == "self" and (view.layer, view.head) == maps.focused_head("self")
    assert view.matrix == maps.matrix(MapName("self", view.layer), view.head).tolist()
    assert [(c["layer"], c["head"]) for c in view.grid] == [(0, 0), (0, 1), (0, MEAN_HEAD)]
    assert view.grid[1]["cells"] == max_pool(maps.matrix(MapName("self", 0), 1), 32).tolist()
    assert view.grid[1]["entropy"] == float(maps.entropy(MapName("self", 0))[1])
    assert set(view.grid[0]["scores"]) == {"prev", "diag", "sink", "induction"}

    view.step = 10  # the slider, as the page sets it
    first = run.load_probe(10)
    assert view.matrix == first.matrix(MapName("self", view.layer), view.head).tolist() != maps.matrix(
        MapName("self", view.layer), view.head).tolist()
    assert view.grid[1]["cells"] == max_pool(first.matrix(MapName("self", 0), 1), 32).tolist()
    view.head = MEAN_HEAD  # a thumbnail clicked
    assert view.matrix == first.mean_over_heads(MapName("self", 0)).tolist()
    assert view.query_tokens == notebook_state.labels(first.tokens) and view.error == ""


def test_a_step_without_probe_maps_is_a_message_not_a_traceback(run_dir):
    view = open_run(run_dir).attention()
    before = view.matrix
    view.step = 15
    assert "no probe maps at step 15" in view.error and view.matrix == before
    view.step = 20
    assert view.error == ""


def test_the_lens_holds_the_lens_saved_with_each_step(run_dir):
    view = open_run(run_dir).lens(step=20)
    saved = load_probe_lens(probe_path(run_dir, 20))
    assert [r["probs"] for r in view.rows] == saved.top_probs.tolist()
    assert [r["label"] for r in view.rows] == ["embedding", "output"]
    view.step = 10
    assert [r["probs"] for r in view.rows] == load_probe_lens(probe_path(run_dir, 10)).top_probs.tolist()


def test_token_loss_holds_every_validation_tokens_loss(run_dir):
    found = token_losses(load_at_step(Run.open(run_dir), None))
    view = open_run(run_dir).token_loss(limit=50)
    assert view.tokens == found.tokens[:50] and view.loss == found.loss[:50].tolist()
    assert view.mean == found.mean and view.n_tokens == found.n_tokens > 50 and view.step == 30


def test_the_knockout_table_is_the_cores_and_its_kind_recomputes(run_dir):
    nb = open_run(run_dir)
    view = nb.knockout()
    table = knockout_table(load_at_step(Run.open(run_dir), None), "zero")
    assert view.baseline == table.baseline_loss
    assert sorted(view.rows, key=lambda r: r["component"]) == sorted(
        ({**d, "label": r.component.label} for r, d in zip(table.rows, table.to_dict()["rows"])), key=lambda r: r["component"])
    assert {r["label"] for r in view.rows} == {"layer 1 · head 1", "layer 1 · head 2", "layer 1 · MLP"}
    assert [r["delta_loss"] for r in view.rows] == sorted((r["delta_loss"] for r in view.rows), reverse=True)
    view.kind = "mean"  # chosen in the page
    mean = knockout_table(nb.model(), "mean")
    assert {r["component"]: r["loss"] for r in view.rows} == {str(r.component): r.loss for r in mean.rows}
    view.kind = "sideways"
    assert "sideways" in view.error


def test_the_walkthrough_notebook_runs(tmp_path, monkeypatch):
    """docs/notebooks/walkthrough.ipynb executed by nbclient on its tiny setting: no cell fails, and every view it
    shows is in the saved widget state, drawn from the runs it trained."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "docs" / "notebooks" / "walkthrough.ipynb", as_version=4)
    monkeypatch.setenv("FATSTUDIO_WALKTHROUGH_TINY", "1")  # the kernel inherits the environment
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the notebook's runs go
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] for o in outputs
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    states = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    views = [states[m]["state"]["view"] for m in shown]
    assert views == ["loss", "attention", "lens", "loss", "attention", "token_loss", "knockout"]
    knockout = states[shown[-1]]["state"]
    assert knockout["kind"] == "mean" and len(knockout["rows"]) == 2 * 2 + 2 and not knockout["error"]


def test_a_run_without_probe_maps_says_so(tmp_path, run_dir):
    empty = Run.create(Run.open(run_dir).config, tmp_path, "new")  # created, not trained
    for view in (open_run(empty.path).attention(), open_run(empty.path).lens()):
        assert view.error == "new has no probe maps saved (none of its evaluations ran yet)." and view.steps == []
