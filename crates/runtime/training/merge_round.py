"""Append a blind round's wordings (one <intent>.txt per intent, as in intents/) to
intents/*.txt, skipping lines whose normalised form already exists in the same context.

Usage: python3 merge_round.py DIR "round N (...): provenance note"
Then run the frozen-overlap test (cargo test -p opencouch-runtime --test intent_layer)."""
import sys, importlib.util
from pathlib import Path
REPO = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("gi", REPO / "generate_intents.py")
gi = importlib.util.module_from_spec(spec); sys.modules["gi"] = gi; spec.loader.exec_module(gi)
src = Path(sys.argv[1]); note = sys.argv[2]
ctx_of = {}
seen = {}
for f in sorted((REPO / "intents").glob("*.txt")):
    intent = f.stem
    lines = f.read_text().splitlines()
    ctx = next(l.split(":", 1)[1].strip() for l in lines if l.startswith("# context:"))
    ctx_of[intent] = ctx
    for l in lines:
        if l.strip() and not l.startswith("#"):
            m = gi.LANG_TAG.match(l.strip()); t = m.group("text") if m else l.strip()
            seen.setdefault(ctx, set()).add(gi.norm_key(t))
total = 0
for f in sorted(src.glob("*.txt")):
    intent = f.stem
    if intent not in ctx_of:
        print("skip unknown", f); continue
    ctx = ctx_of[intent]
    add = []
    for l in f.read_text().splitlines():
        l = l.strip()
        if not l or l.startswith("#"):
            continue
        m = gi.LANG_TAG.match(l); t = m.group("text") if m else l
        k = gi.norm_key(t)
        if not k or k in seen[ctx]:
            continue
        seen[ctx].add(k); add.append(l)
    if add:
        p = REPO / "intents" / f"{intent}.txt"
        body = p.read_text().rstrip("\n") + f"\n# {note}\n" + "\n".join(add) + "\n"
        p.write_text(body)
    print(intent, len(add)); total += len(add)
print("total", total)
