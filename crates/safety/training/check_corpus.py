#!/usr/bin/env python3
"""Validate corpus.jsonl against the targets described in SOURCES.md.

Usage:  python3 check_corpus.py [path/to/corpus.jsonl]
Exit status 0 when every check passes, 1 otherwise.  Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
LANGS = {"en", "es", "fr", "de", "pt", "it"}
SOURCES = {"hand", "template", "long"}
KEYS = ["id", "text", "level", "kind", "lang", "source"]
# The generator's list, so the two never disagree.
from generate_corpus import LOOKALIKE_KINDS  # noqa: E402
# Benign distress (data/distress_<lang>.txt, kinds distress_<topic>, level 0).
DISTRESS_PREFIX = "distress_"
DISTRESS_MIN_ROWS = 2500        # level-0 benign-distress rows
DISTRESS_SHORT_MAX = 300        # short/medium rows are 40-300 chars, long posts longer
DISTRESS_RISK_MIN_POSTS = 400   # level-1/2 long posts whose body is a distress post
DISTRESS_MIN_SENTENCES = {"en": 400, "es": 35, "fr": 35, "de": 35, "pt": 35, "it": 35}


def load_distress_sentences() -> dict[str, list[str]]:
    """Sentences of data/distress_<lang>.txt, and a check that every header is '@ 0 distress_*'."""
    out: dict[str, list[str]] = {}
    for lg in sorted(LANGS):
        sents, bad = [], 0
        for line in (HERE / "data" / f"distress_{lg}.txt").read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("@"):
                parts = line[1:].split()
                bad += not (len(parts) == 2 and parts[0] == "0" and parts[1].startswith(DISTRESS_PREFIX))
                continue
            sents.append(line)
        out[lg] = sents if not bad else []
    return out


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "corpus.jsonl"
    failures: list[str] = []

    def check(ok: bool, msg: str) -> None:
        print(("ok    " if ok else "FAIL  ") + msg)
        if not ok:
            failures.append(msg)

    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            failures.append(f"line {n}: invalid JSON ({e})")
    check(not failures, "every line is valid JSON")

    bad = [r for r in rows if list(r) != KEYS]
    check(not bad, "every row has exactly the keys id,text,level,kind,lang,source in order")
    check(all(isinstance(r["text"], str) and r["text"].strip() for r in rows), "texts are non-empty strings")
    check(all(r["level"] in (0, 1, 2, 3) for r in rows), "levels are 0..3")
    check(all(r["lang"] in LANGS for r in rows), "langs are en/es/fr/de/pt/it")
    check(all(r["source"] in SOURCES for r in rows), "sources are hand/template/long")
    check(all(re.fullmatch(r"[a-z][a-z0-9_]*", r["kind"]) for r in rows), "kinds are snake_case")
    check(all(re.fullmatch(r"c\d{5}", r["id"]) for r in rows), "ids look like c00001")
    check(len({r["id"] for r in rows}) == len(rows), "ids are unique")
    check(len({r["text"] for r in rows}) == len(rows), "texts are unique (exact dedup)")

    total = len(rows)
    level = Counter(r["level"] for r in rows)
    lang = Counter(r["lang"] for r in rows)
    check(total >= 7000, f"at least 7000 rows ({total})")
    check(total <= 14000, f"at most 14000 rows ({total})")
    for lv, want in {0: 0.55, 1: 0.17, 2: 0.17, 3: 0.11}.items():
        share = level[lv] / total
        check(abs(share - want) <= 0.03, f"level {lv} share {share:.3f} ~ {want}")
    check(0.75 <= lang["en"] / total <= 0.85, f"English share {lang['en'] / total:.3f} ~ 0.80")
    for lg in sorted(LANGS - {"en"}):
        check(lang[lg] >= 250, f"{lg} has >= 250 rows ({lang[lg]})")
        lv_missing = [lv for lv in range(4) if not any(r["lang"] == lg and r["level"] == lv for r in rows)]
        check(not lv_missing, f"{lg} covers all four levels")

    lens = [len(r["text"]) for r in rows]
    over150 = sum(n > 150 for n in lens) / total
    over600 = sum(n > 600 for n in lens) / total
    check(over150 >= 0.25, f"rows > 150 chars: {over150:.3f} >= 0.25")
    check(over600 >= 0.08, f"rows > 600 chars: {over600:.3f} >= 0.08")
    check(max(lens) <= 2100, f"longest row {max(lens)} chars <= ~2000")

    l0 = [r for r in rows if r["level"] == 0]
    look = sum(r["kind"] in LOOKALIKE_KINDS for r in l0) / len(l0)
    check(look >= 0.40, f"benign look-alikes among level 0: {look:.3f} >= 0.40")

    # benign distress: level 0 only, enough rows, ~40 % short/medium and ~60 % long
    sentences = load_distress_sentences()
    for lg in sorted(LANGS):
        n = len(set(sentences[lg]))
        check(n >= DISTRESS_MIN_SENTENCES[lg],
              f"data/distress_{lg}.txt: '@ 0 distress_*' headers only, {n} distinct sentences "
              f">= {DISTRESS_MIN_SENTENCES[lg]}")
    dis = [r for r in rows if r["kind"].startswith(DISTRESS_PREFIX)]
    check(all(r["level"] == 0 for r in dis), "distress_* rows are all level 0")
    check(len(dis) >= DISTRESS_MIN_ROWS, f"level-0 benign-distress rows: {len(dis)} >= {DISTRESS_MIN_ROWS}")
    check(all(any(r["lang"] == lg for r in dis) for lg in LANGS), "every language has benign-distress rows")
    if dis:
        dlens = [len(r["text"]) for r in dis]
        n_short = sum(40 <= n <= DISTRESS_SHORT_MAX for n in dlens)
        n_long = sum(n > DISTRESS_SHORT_MAX for n in dlens)
        short, long_ = n_short / len(dis), n_long / len(dis)
        check(0.35 <= short <= 0.45, f"benign-distress rows of 40-{DISTRESS_SHORT_MAX} chars: {short:.3f} ~ 0.40")
        check(0.55 <= long_ <= 0.65, f"benign-distress rows over {DISTRESS_SHORT_MAX} chars: {long_:.3f} ~ 0.60")
        check(n_short + n_long == len(dis), "no benign-distress row is shorter than 40 chars")

    # level-1/2 long posts built on a distress body (contain a distress sentence)
    folded = {s.lower() for sents in sentences.values() for s in sents}
    dr = Counter(r["level"] for r in rows
                 if r["source"] == "long" and r["level"] in (1, 2)
                 and any(s in r["text"].lower() for s in folded))
    check(dr[1] + dr[2] >= DISTRESS_RISK_MIN_POSTS and min(dr[1], dr[2]) >= DISTRESS_RISK_MIN_POSTS // 4,
          f"level-1/2 long posts with a distress body: {dr[1]} + {dr[2]} >= {DISTRESS_RISK_MIN_POSTS}")

    # the same wording (case/punctuation/accents folded) must not carry two levels
    import unicodedata

    def key(t: str) -> str:
        t = unicodedata.normalize("NFD", t.lower().replace("ß", "ss"))
        t = "".join(c for c in t if unicodedata.category(c) != "Mn")
        return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", "", t)).strip()

    seen: dict[str, int] = {}
    clashes = 0
    for r in rows:
        k = key(r["text"])
        if k in seen and seen[k] != r["level"]:
            clashes += 1
        seen.setdefault(k, r["level"])
    check(clashes == 0, f"no normalised wording with two levels ({clashes})")

    print(f"\n{total} rows; {len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
