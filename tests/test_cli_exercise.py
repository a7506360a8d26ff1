"""``fatstudio exercise``: list, show, and check with exit status 0 only for a pass, so that a teacher can grade a
folder of submissions in a loop; bad input is one line and exit status 2."""
from fatstudio.cli import main
from fatstudio.core.paper.exercises.catalog import BY_NAME, EXERCISES


def test_list_names_every_exercise_and_which_train(capsys):
    assert main(["exercise", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [e.name for e in EXERCISES]
    assert "(Train with my code)" in lines[4] and lines[4].startswith("attention ")
    assert "(Train with my code)" not in lines[-1]


def test_show_prints_the_stub_its_hints_and_the_solution(capsys):
    assert main(["exercise", "show", "layer_norm", "--hints"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(BY_NAME["layer_norm"].stub) and "# hint 2: ε goes under the square root" in out
    assert main(["exercise", "show", "layer_norm", "--solution"]) == 0
    assert capsys.readouterr().out == BY_NAME["layer_norm"].solution


def test_a_teacher_grades_a_folder_of_submissions_by_exit_status(tmp_path, capsys):
    e = BY_NAME["layer_norm"]
    subs = {"alice.py": e.solution, "bob.py": e.solution.replace("(v + eps) ** 0.5", "v ** 0.5 + eps"),
            "carol.py": e.stub}
    for name, text in subs.items():
        (tmp_path / name).write_text(text)
    codes = {name: main(["exercise", "check", "layer_norm", str(tmp_path / name)]) for name in sorted(subs)}
    assert codes == {"alice.py": 0, "bob.py": 1, "carol.py": 1}
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "Passed" in out[0] and "ê[0] is" in out[1] and "not written yet" in out[2]


def test_bad_input_is_one_line_and_exit_status_2(tmp_path, capsys):
    (tmp_path / "s.py").write_text("")
    for argv, said in ((["exercise", "check", "layer_nrom", str(tmp_path / "s.py")], "did you mean 'layer_norm'?"),
                       (["exercise", "check", "layer_norm", str(tmp_path / "none.py")], "No such file"),
                       (["exercise", "check", "bpe_merges", str(tmp_path / "s.py"), "--train"],
                        "bpe_merges cannot be trained with")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err


def test_show_into_a_reader_that_went_is_quiet_and_exercise_has_no_force_memory(capsys):
    import subprocess
    import sys

    import pytest

    p = subprocess.Popen([sys.executable, "-m", "fatstudio", "exercise", "show", "attention", "--hints"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # `| head` gone before the first line is written
    assert p.stderr.read() == "" and p.wait(timeout=120) == 141
    p.stderr.close()
    for command in (["exercise", "--help"], ["glass-box", "--help"], ["cache", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
        assert "--force-memory" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--force-memory" in capsys.readouterr().out
