"""The shared file helpers the experiments use: CSV text and a folder's step-N files."""
import csv
import io

from fatstudio.core.files import csv_text, step_files


def test_csv_text_quotes_and_reads_back():
    rows = [("position", "token"), (0, 'a "b", c'), (1, "line\nbreak")]
    text = csv_text(rows)
    assert text.startswith("position,token\n")
    assert "\r" not in text.replace("\n", "") and not text.endswith("\r\n")
    assert list(csv.reader(io.StringIO(text))) == [[str(c) for c in r] for r in rows]


def test_step_files_by_step_ascending(tmp_path):
    assert step_files(tmp_path / "missing") == {}
    for name in ("step-00000010.safetensors", "step-2.safetensors", "step-3.npz", ".step-4.safetensors.tmp",
                 "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    found = step_files(tmp_path)
    assert list(found) == [2, 10]
    assert found[10].name == "step-00000010.safetensors"
