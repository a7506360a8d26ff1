"""Benchmark: generating from an imported GPT-2-shaped model (ℓ_max = 1024), on the command line and in the app.

    OMP_NUM_THREADS=1 python bench/imported_generate.py [--n-embd 768 --n-layer 12] [--repeats 2]

Makes a transformers GPT2LMHeadModel with random weights (n_positions 1024, N_V 50257: a byte-level BPE trained
on tinyshakespeare, padded with unused special tokens) and imports it (`fatstudio import`), once, into a folder
kept for the next run (--work). Then, each in a fresh process:
(a) `fatstudio generate RUN --prompt P --tokens 23 --seed 1`: the whole process's wall time;
(b) the app: the run opened (the model loaded), the Attention tab shown, Generate pressed for 23 tokens (seed 1)
    and, as soon as it has ended, pressed again (the Attention tab's lens and head scores of the first text, and
    the decode step's compile, then run beside it): the seconds from each click to its 23rd token.
Prints each measurement, and the generated text, which must be the same everywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT, TOKENS, SEED = "the cat sat on the", 23, 1
CORPUS = Path("/work/shared/data/tinyshakespeare.txt")


def make_checkpoint(out: Path, n_embd: int, n_layer: int) -> None:
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    V = 50257
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator([CORPUS.read_text(encoding="utf-8")], trainers.BpeTrainer(
        vocab_size=V - 1, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([f"<|unused{i}|>" for i in range(V - 1 - tok.get_vocab_size())] + ["<|endoftext|>"])
    eot = tok.token_to_id("<|endoftext|>")
    torch.manual_seed(0)
    cfg = tf.GPT2Config(vocab_size=V, n_positions=1024, n_embd=n_embd, n_layer=n_layer, n_head=12,
                        bos_token_id=eot, eos_token_id=eot)
    tf.GPT2LMHeadModel(cfg).save_pretrained(out)
    tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                               eos_token="<|endoftext|>").save_pretrained(out)


def child_app(run: str) -> None:
    """The app, driven: open the run, show the Attention tab, generate twice; prints one JSON line."""
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    from fatstudio.core.runs.folder import Run
    from fatstudio.qt.main_window import MainWindow

    w = MainWindow()
    w.show()

    def wait(done, limit=600.0):
        t = time.monotonic()
        while not done() and time.monotonic() - t < limit:
            app.processEvents()
            time.sleep(0.005)

    wait(lambda: w.corpus_panel.info is not None and w.workspace.jobs.idle)
    w.open_run(Run.open(run))
    wait(lambda: w.loaded_model is not None)
    panel = w.prompt_panel
    w.viewTabs.setCurrentWidget(w._attention_host)
    panel.promptEdit.setPlainText(PROMPT)
    panel.tokensSpin.setValue(TOKENS)
    panel.seedSpin.setValue(SEED)
    seconds, texts = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        panel.generateButton.click()
        wait(lambda: len(panel.generated) >= TOKENS or not panel.is_running())
        seconds.append(time.perf_counter() - t0)
        wait(lambda: not panel.is_running())
        texts.append("".join(c.text for c in panel.generated))
    print(json.dumps({"seconds": seconds, "texts": texts}), flush=True)
    w.workspace.jobs.shutdown(0)
    os._exit(0)


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "QT_QPA_PLATFORM": "offscreen",
            "FATSTUDIO_RUNS": str(work / "runs"), "FATSTUDIO_CACHE": str(work / "cache"),
            "FATSTUDIO_STATE": str(work / "state.ini"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--child-app"]:
        child_app(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", default="/tmp/fatstudio-bench-imported", help="where the checkpoint and run are kept")
    a = ap.parse_args(argv)
    work = Path(a.work) / f"gpt2-{a.n_embd}x{a.n_layer}"
    hf, run = work / "hf", work / "runs" / "imported"
    env = _env(work)
    if not (run / "meta.json").exists():
        make_checkpoint(hf, a.n_embd, a.n_layer)
        subprocess.run([sys.executable, "-m", "fatstudio", "import", str(hf), "--out", str(run)], env=env, check=True)
    cli, first, second, texts = [], [], [], set()
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "fatstudio", "generate", str(run), "--prompt", PROMPT,
                              "--tokens", str(TOKENS), "--seed", str(SEED)], env=env, capture_output=True, text=True,
                             check=True)
        cli.append(time.perf_counter() - t0)
        texts.add(out.stdout.strip().removeprefix(PROMPT))
        out = subprocess.run([sys.executable, __file__, "--child-app", str(run)], env=env, capture_output=True,
                             text=True, timeout=900)
        got = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("{")))
        first.append(got["seconds"][0])
        second.append(got["seconds"][1])
        texts.update(got["texts"])
        print(f"fatstudio generate: {cli[-1]:.2f} s; the app, to the {TOKENS}th token: {first[-1]:.2f} s, "
              f"then again {second[-1]:.2f} s", flush=True)
    print(f"medians: fatstudio generate {statistics.median(cli):.2f} s; app first {statistics.median(first):.2f} s, "
          f"again {statistics.median(second):.2f} s; the same text everywhere: {len(texts) == 1} {sorted(texts)[0]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
