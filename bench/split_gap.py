"""How far a folder's validation text is from its training text under each split rule (`core.data.splits`).

    OMP_NUM_THREADS=1 python bench/split_gap.py [--folder DIR] [--files 6] [--seeds 10]

Without --folder it writes a folder of German then Russian text files (de-0.txt … then ru-0.txt …) from the
system's gettext catalogs (/usr/share/locale/{de,ru}/LC_MESSAGES/*.mo: real translated sentences), the case
that issue 35 met. For each rule it splits the folder's text with val_fraction 0.1 and prints the gap between
the two splits (`splits.gap`) in characters and in BPE tokens: the total variation (with what two samples of one
text show by chance) and KL(val ‖ train) in nats, and the Russian share of each split's letters. "documents"
(whole files drawn at random with a seed, the alternative the issue named) is measured over --seeds seeds for
comparison: the mean and the worst; the shipped rules, "tail" and "blocks", have no seed.
"""
from __future__ import annotations

import argparse
import gettext
import random
import tempfile
from pathlib import Path

import numpy as np

from fatstudio.core.data import splits
from fatstudio.core.data.corpora import build_dataset, load_corpus
from fatstudio.core.data.tokenization import train_tokenizer

LOCALES = Path("/usr/share/locale")


def catalog_sentences(lang: str) -> list[str]:
    """Every translated message of the system's catalogs for ``lang`` (one a line, long ones first cut)."""
    out: list[str] = []
    for mo in sorted((LOCALES / lang / "LC_MESSAGES").glob("*.mo")):
        try:
            with open(mo, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog  # type: ignore[attr-defined]
        except (OSError, UnicodeDecodeError, gettext.error if hasattr(gettext, "error") else OSError):  # noqa: B030
            continue
        out += [" ".join(str(v).split()) for k, v in catalog.items() if k and isinstance(v, str) and len(v) > 20]
    return out


def write_folder(folder: Path, files: int) -> Path:
    for lang in ("de", "ru"):
        lines = catalog_sentences(lang)
        if len(lines) < 100:
            raise SystemExit(f"too few {lang} messages in {LOCALES}; give --folder")
        random.Random(lang).shuffle(lines)
        for i, part in enumerate(np.array_split(np.array(lines, dtype=object), files)):
            (folder / f"{lang}-{i}.txt").write_text("\n".join(part) + "\n", encoding="utf-8")
    return folder


def gap_of(data: np.ndarray, val: list[tuple[int, int]]) -> splits.SplitGap:
    mask = np.zeros(len(data), bool)
    for a, b in val:
        mask[a:b] = True
    n = int(data.max()) + 1
    gap = splits.gap(np.bincount(data[~mask], minlength=n), np.bincount(data[mask], minlength=n))
    assert gap is not None
    return gap


def cyrillic(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum("а" <= c.lower() <= "я" or c in "ёЁ" for c in letters) / max(len(letters), 1)


def documents(parts: list[tuple[str, int]], f: float, seed: int, n: int, total: int) -> list[tuple[int, int]]:
    """Whole files drawn with ``seed`` until they hold val_fraction of the text, as ranges of a stream of ``n``."""
    order = np.random.default_rng(seed).permutation(len(parts))
    starts = np.concatenate(([0], np.cumsum([c for _, c in parts])))
    val, held = [], 0
    for i in order:
        if held >= f * total:
            break
        val.append((round(starts[i] / total * n), round(starts[i + 1] / total * n)))
        held += parts[i][1]
    return sorted(val)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path)
    ap.add_argument("--files", type=int, default=6, help="files per language (default 6)")
    ap.add_argument("--seeds", type=int, default=10)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.folder or write_folder(Path(tmp), a.files)
        corpus = load_corpus(str(folder))
        text = corpus.text or ""
        print(f"{folder}: {len(corpus.parts)} files, {len(text):,} characters, "
              f"Russian {cyrillic(text):.0%} of the letters; val_fraction 0.1")
        chars = np.frombuffer(text.encode("utf-32-le"), np.uint32).astype(np.int64)
        bpe = train_tokenizer("bpe", corpus.texts(), 2000)
        tokens = np.asarray(build_dataset(corpus, bpe, "next_token", 64, split="tail")._all, np.int64)
        print(f"{'rule':<24} {'chars TV (chance)':>18} {'chars KL':>9} {'BPE TV (chance)':>16} {'BPE KL':>8}  "
              "Russian: train / val")
        rows = {rule: [(splits.plan(len(text), 0.1, rule).ranges(len(chars))[1],
                        splits.plan(len(text), 0.1, rule).ranges(len(tokens))[1])] for rule in splits.SPLITS}
        rows[f"documents ({a.seeds} seeds)"] = [
            (documents(corpus.parts, 0.1, s, len(chars), len(text)), documents(corpus.parts, 0.1, s, len(tokens), len(text)))
            for s in range(a.seeds)]
        for rule, cases in rows.items():
            measured = []
            for val_chars, val_tokens in cases:
                c, t = gap_of(chars, val_chars), gap_of(tokens, val_tokens)
                val_text = "".join(text[x:y] for x, y in val_chars)
                mask = np.zeros(len(text), bool)
                for x, y in val_chars:
                    mask[x:y] = True
                train_text = "".join(ch for ch, m in zip(text, mask) if not m) if len(cases) == 1 else ""
                measured.append((c, t, cyrillic(train_text) if train_text else float("nan"), cyrillic(val_text)))
            tv = [m[0].tv for m in measured]
            worst = max(range(len(measured)), key=lambda i: tv[i])
            c, t, ru_train, ru_val = measured[worst]
            mean = f" (mean TV {np.mean(tv):.3f}, worst shown)" if len(measured) > 1 else ""
            print(f"{rule:<24} {c.tv:>8.3f} ({c.chance:.3f}) {c.kl:>9.3f} {t.tv:>7.3f} ({t.chance:.3f}) {t.kl:>8.3f}  "
                  f"{ru_train:.0%} / {ru_val:.0%}{mean}")


if __name__ == "__main__":
    main()
