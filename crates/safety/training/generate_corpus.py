#!/usr/bin/env python3
"""Generate the training corpus for the OpenCouch crisis-gate text classifier.

Usage:  python3 generate_corpus.py            (writes corpus.jsonl next to this file)
        python3 generate_corpus.py --out PATH (writes PATH; SOURCES.md is left alone)

corpus.jsonl is not kept in git (it is large and fully determined by this
script and data/): the trainer and the safety crate's tests regenerate it.

Python 3.11, standard library only, deterministic (fixed seed).

The corpus combines three sources:
  hand      hand-written sentences from data/hand_<lang>.txt, data/hand_r4_<lang>.txt,
            data/hand_r7_<lang>.txt, data/hand_r8_<lang>.txt and
            data/distress_<lang>.txt (benign distress, level 0)
  template  (a) slot templates from data/templates_<lang>.json,
            (b) surface variants (lower case, no punctuation, typos, texting
                abbreviations, accent stripping) of hand and template sentences,
            (c) short combinations of 2-3 benign-distress sentences (40-300 chars)
  long      long posts: 2-8 ordinary narrative sentences from
            data/narrative_<lang>.json with zero or one risk sentence inserted
            at a random position; labelled by the inserted sentence.  Also
            benign-distress posts (300-2,000 chars) built from distress and
            narrative sentences: level 0 as they are, or level 1/2 when one
            hopelessness/burden/disappearing or ideation/self-harm sentence is
            inserted

Each output line is a JSON object:
  {"id": "c00001", "text": ..., "level": 0-3, "kind": ..., "lang": ..., "source": ...}

See SOURCES.md for level definitions and kinds.  All text is invented.
"""

from __future__ import annotations

import json
import random
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

SEED = 20240611
HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
OUT = HERE / "corpus.jsonl"
SOURCES_MD = HERE / "SOURCES.md"

LANGS = ["en", "es", "fr", "de", "pt", "it"]

# Rows wanted per language (after dedup).  English is ~80 % of the corpus.
TOTAL_PER_LANG = {"en": 10400, "es": 520, "fr": 520, "de": 520, "pt": 520, "it": 520}
# Share of each risk level inside every language.  Level 0 is ~55 % since the
# benign-distress rows were added (see DISTRESS_* below).
LEVEL_SHARE = {0: 0.55, 1: 0.17, 2: 0.17, 3: 0.11}
# Minimum share of every (language, level) cell that is made of long posts.
LONG_SHARE = 0.34
# Probability that a hand/template sentence also yields one surface variant.
VARIANT_PROB = {"en": 0.45, "es": 0.9, "fr": 0.9, "de": 0.9, "pt": 0.9, "it": 0.9}
# Level-0 long posts: probability that a benign look-alike sentence is inserted.
LEVEL0_INSERT_PROB = 0.55
MAX_LONG_CHARS = 2000
# Share of long posts built from the longest narrative sentences (up to ~2,000 chars).
VERY_LONG_PROB = 0.12
# Kinds of level 0 that count as "benign look-alikes" (share is checked).
LOOKALIKE_KINDS = {
    "lookalike_transport", "lookalike_knife", "lookalike_medication",
    "lookalike_dosage", "lookalike_place", "lookalike_idiom",
    "lookalike_last_day", "lookalike_farewell", "lookalike_stress_relief",
    "negation", "hypothetical", "advice_to_others", "supporting_friend",
    "past_recovery", "fiction_media", "news_history", "medical_vet",
    "video_game",
    # round four's hand-written look-alikes (data/hand_r4_<lang>.txt)
    "benign_commute", "benign_heights_holiday", "benign_means_words",
    "benign_finality_phrases", "benign_lookalike_misc", "idiom_hyperbole", "gaming",
    "fiction_news_history", "advice_to_other", "denial", "song_quote_humor",
    # round seven's hand-written look-alikes (data/hand_r7_<lang>.txt)
    "benign_risky_words", "burn_benign", "charcoal_sealed_garage_benign", "date_plan_benign",
    "fiction_news_lessons", "forum_advice_more", "forum_advice_to_others",
    "forum_benign_lookalike", "forum_benign_lookalike_more", "forum_benign_lookalike_more2",
    "forum_fiction_news", "forum_hyperbole", "forum_past_recovery", "forum_past_recovery_more",
    "forum_recovery_advice_more2", "forum_recovery_more", "forum_support_more2",
    "forum_supporting_friend", "forum_supporting_someone_more", "height_water_benign",
    "hyperbole_literal_looking", "means_held_benign", "ordinary_goodbyes_giveaways",
    "others_and_advice_short", "past_recovery_short", "rope_benign", "tweet_benign_lookalike",
    "tweet_de_hyperbel", "tweet_death_idiom", "tweet_es_hiperbole", "tweet_fr_hyperbole",
    "tweet_idiom_more", "tweet_it_iperbole", "tweet_more_idiom_benign", "tweet_news_games_films",
    "tweet_pt_hiperbole", "vehicle_train_benign", "es_cotidiano_y_parecidos",
    "fr_cotidien_parecidos", "it_quotidiano_simili", "pt_cotidiano_parecidos",
    "de_alltag_aehnlich",
    # round eight's hand-written look-alikes (data/hand_r8_<lang>.txt)
    "about_others_friend_at_risk", "admin_just_in_case", "benign_means_words_chat",
    "commute_train_platform", "cutting_knives_ordinary", "denial_safe_statements",
    "fandom_gaming_sport_tweet", "final_mixed_lookalikes", "giving_away_selling_moving",
    "harmlose_doppelgaenger", "hiperbole_girias", "hiperbole_modismos",
    "hyperbole_idiom_tweet", "hyperbole_tweet_more", "hyperboles_expressions",
    "iperboli_modi_di_dire", "joke_slang_clear_more", "joke_slang_clear_tweet",
    "lookalike_means_time_benign", "lyrics_film_quotes_invented", "lyrics_quotes_more",
    "medicine_for_others", "news_fiction_lessons", "no_going_back_dates_letters",
    "others_news_fiction_chat", "parecidos_benignos", "past_recovery", "places_benign_chat",
    "sosia_innocui", "sosies_benins", "uebertreibung_redewendung", "view_trip_bridge_cliff_roof",
}

# Benign distress (data/distress_<lang>.txt): first-person distress about stress,
# anxiety, panic, trauma, abuse, relationships, money, work, family, loneliness,
# breakups, insomnia, grief, health and school WITHOUT any risk signal.  It
# teaches the layer that distress without risk is level 0.
DISTRESS_PREFIX = "distress_"
# Share of every language's level-0 cell made of benign-distress rows.
DISTRESS_SHARE_OF_L0 = 0.385
# Of those: short/medium rows (single sentences, variants, 2-3 sentence combos)...
DISTRESS_SHORT_SHARE = 0.40
DISTRESS_SHORT_RANGE = (40, 300)
# ...of which at most this share are hand sentences and surface variants; the
# rest are 2-3 sentence combinations.  Everything else is long posts.
DISTRESS_SHORT_HAND_MAX = 0.60
DISTRESS_SHORT_VARIANT_MAX = 0.20
# Long distress posts: more than 300 characters; target length drawn per post.
DISTRESS_LONG_MIN = 301
DISTRESS_LONG_TARGETS = {(301, 600): 40, (600, 1200): 40, (1200, 1990): 20}
# Sentence sources inside a long distress post: the post's distress topic, the
# matching narrative topics, and one second distress topic ("everything at once").
DISTRESS_SOURCE_WEIGHTS = {"primary": 60, "narrative": 28, "other": 12}
# Narrative topics that fit each distress topic.
DISTRESS_NARRATIVE = {
    "stress": ["work", "school", "family", "money"], "anxiety": ["work", "school", "insomnia"],
    "panic": ["work", "school", "insomnia"], "ptsd": ["insomnia", "family"],
    "abuse": ["family", "breakup"], "relationship": ["breakup", "family"],
    "money": ["money"], "work": ["work"], "family": ["family"],
    "loneliness": ["breakup", "family"], "breakup": ["breakup"], "insomnia": ["insomnia"],
    "grief": ["family"], "health": ["work", "insomnia", "money"], "school": ["school"],
}
# Level-1/2 long posts whose body is a benign-distress post with one risk
# sentence inserted (per language and level), and the kinds that may be inserted:
# level 1 about life itself, level 2 explicit ideation or self-harm.
DISTRESS_RISK_POSTS = {"en": 200, "es": 12, "fr": 12, "de": 12, "pt": 12, "it": 12}
DISTRESS_RISK_KINDS = {
    1: {"hopelessness", "pointlessness", "burdensomeness", "disappearing", "thwarted_belonging"},
    2: {"ideation_explicit", "ideation_implicit", "passive_death_wish", "self_harm", "rumination"},
}

SLOT_RE = re.compile(r"\{(\w+)\}")


# --------------------------------------------------------------------------
# Loading data files
# --------------------------------------------------------------------------

def load_hand(lang: str, stem: str = "hand") -> list[dict]:
    """Parse data/<stem>_<lang>.txt: '@ <level> <kind>' headers, one sentence per line."""
    path = DATA / f"{stem}_{lang}.txt"
    rows, level, kind = [], None, None
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            parts = line[1:].split()
            if len(parts) != 2 or parts[0] not in "0123":
                sys.exit(f"{path}:{lineno}: bad header {line!r}")
            level, kind = int(parts[0]), parts[1]
            continue
        if level is None:
            sys.exit(f"{path}:{lineno}: sentence before any header")
        rows.append({"text": line, "level": level, "kind": kind, "lang": lang, "source": "hand"})
    return rows


def load_distress(lang: str) -> list[dict]:
    """Benign-distress sentences: every header must be '@ 0 distress_<topic>'."""
    rows = load_hand(lang, "distress")
    bad = [r for r in rows if r["level"] != 0 or not r["kind"].startswith(DISTRESS_PREFIX)]
    if bad:
        sys.exit(f"distress_{lang}.txt: only '@ 0 {DISTRESS_PREFIX}<topic>' headers allowed")
    return rows


def load_json(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------

def capitalize_first(text: str) -> str:
    for i, ch in enumerate(text):
        if ch.isalpha():
            return text[:i] + ch.upper() + text[i + 1:]
    return text


def tidy(text: str) -> str:
    """Clean whitespace/punctuation produced by slot filling and capitalise sentences."""
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([,.!?;:])", r"\1", text)
    text = re.sub(r",\s*\.", ".", text)
    text = re.sub(r"([?!])\.", r"\1", text)
    text = re.sub(r"\.\.+", ".", text)
    text = re.sub(r",,+", ",", text)
    # capitalise the first letter and the first letter after ". ", "? ", "! "
    parts = re.split(r"([.!?] )", text)
    out = []
    for p in parts:
        out.append(p if re.fullmatch(r"[.!?] ", p) else capitalize_first(p))
    return "".join(out)


def strip_accents(text: str) -> str:
    text = text.replace("ß", "ss")
    norm = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(c for c in norm if unicodedata.category(c) != "Mn"))


def german_translit(text: str) -> str:
    table = {"ä": "ae", "ö": "oe", "ü": "ue", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue", "ß": "ss"}
    return "".join(table.get(c, c) for c in text)


def no_punct(text: str, rng: random.Random) -> str:
    chars = ".,!?;:¿¡\"“”…"
    if rng.random() < 0.5:
        chars += "'’"
    text = "".join(c for c in text if c not in chars)
    return re.sub(r"\s+", " ", text).strip()


KEYBOARD_NEIGHBOURS = {
    "a": "qs", "s": "ad", "d": "sf", "e": "wr", "i": "uo", "o": "ip", "n": "bm",
    "t": "ry", "r": "et", "l": "k", "m": "n", "u": "yi", "h": "gj", "g": "fh",
}


def add_typos(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    idx = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
    if not idx:
        return text
    for i in rng.sample(idx, min(len(idx), rng.choice([1, 1, 2]))):
        w = words[i]
        j = rng.randrange(1, len(w) - 1)
        op = rng.choice(["swap", "drop", "double", "neighbour"])
        if op == "swap":
            w = w[:j] + w[j + 1] + w[j] + w[j + 2:]
        elif op == "drop":
            w = w[:j] + w[j + 1:]
        elif op == "double":
            w = w[:j] + w[j] + w[j:]
        else:
            c = w[j].lower()
            if c in KEYBOARD_NEIGHBOURS:
                w = w[:j] + rng.choice(KEYBOARD_NEIGHBOURS[c]) + w[j + 1:]
        words[i] = w
    return " ".join(words)


def apply_abbrev(text: str, abbrev: dict, rng: random.Random) -> str:
    for key in sorted(abbrev, key=len, reverse=True):
        pat = re.compile(r"(?<![\w'])" + re.escape(key) + r"(?![\w'])", re.IGNORECASE)

        def repl(m, key=key):
            return rng.choice(abbrev[key]) if rng.random() < 0.7 else m.group(0)

        text = pat.sub(repl, text)
    return text


VARIANT_RECIPES = {
    "en": [["lower"], ["nopunct"], ["lower", "nopunct"], ["typo"], ["abbrev"],
           ["abbrev", "lower"], ["abbrev", "lower", "nopunct"], ["typo", "lower"]],
    "other": [["lower"], ["nopunct"], ["lower", "nopunct"], ["typo"], ["abbrev", "lower"],
              ["strip_accents"], ["strip_accents", "lower"],
              ["strip_accents", "lower", "nopunct"], ["abbrev", "strip_accents", "lower"]],
    "de_extra": [["translit"], ["translit", "lower"], ["translit", "lower", "nopunct"]],
}


def make_variant(text: str, lang: str, abbrev: dict, rng: random.Random) -> str | None:
    recipes = VARIANT_RECIPES["en"] if lang == "en" else VARIANT_RECIPES["other"]
    if lang == "de":
        recipes = recipes + VARIANT_RECIPES["de_extra"]
    recipe = rng.choice(recipes)
    out = text
    for op in recipe:
        if op == "lower":
            out = out.lower()
        elif op == "nopunct":
            out = no_punct(out, rng)
        elif op == "typo":
            out = add_typos(out, rng)
        elif op == "abbrev":
            out = apply_abbrev(out, abbrev, rng)
        elif op == "strip_accents":
            out = strip_accents(out)
        elif op == "translit":
            out = german_translit(out)
    out = out.strip()
    return out if out and out != text else None


def norm_key(text: str) -> str:
    """Normalised form used to detect the same wording with two different labels."""
    t = strip_accents(text.lower())
    t = re.sub(r"[^\w\s]", "", t)
    return re.sub(r"\s+", " ", t).strip()


# --------------------------------------------------------------------------
# Template expansion
# --------------------------------------------------------------------------

def expand(pattern: str, slots: dict, rng: random.Random) -> str:
    used: dict[str, set] = defaultdict(set)

    def sub(m: re.Match) -> str:
        name = m.group(1)
        values = slots[name]
        fresh = [v for v in values if v not in used[name]]
        v = rng.choice(fresh or values)
        used[name].add(v)
        return v

    text = pattern
    for _ in range(8):
        new = SLOT_RE.sub(sub, text)
        if new == text:
            break
        text = new
    return tidy(text)


def template_rows(lang: str, spec: dict, rng: random.Random) -> list[dict]:
    slots = spec["slots"]
    rows = []
    for group in spec["groups"]:
        seen, attempts = set(), 0
        while len(seen) < group["n"] and attempts < group["n"] * 40:
            attempts += 1
            text = expand(rng.choice(group["patterns"]), slots, rng)
            if text in seen:
                continue
            seen.add(text)
            rows.append({"text": text, "level": group["level"], "kind": group["kind"],
                         "lang": lang, "source": "template"})
    return rows


# --------------------------------------------------------------------------
# Long posts
# --------------------------------------------------------------------------

LENGTH_WEIGHTS = {2: 10, 3: 12, 4: 13, 5: 14, 6: 16, 7: 17, 8: 18}


def make_long_post(lang: str, level: int, narrative: dict, inserts: list[dict],
                   rng: random.Random) -> dict:
    topics = sorted(narrative["topics"])
    t1 = rng.choice(topics)
    pool = list(narrative["topics"][t1])
    rng.shuffle(pool)
    if rng.random() < 0.35:
        t2 = rng.choice([t for t in topics if t != t1])
        extra = list(narrative["topics"][t2])
        rng.shuffle(extra)
        pool += extra
    k = rng.choices(list(LENGTH_WEIGHTS), weights=list(LENGTH_WEIGHTS.values()))[0]
    if rng.random() < VERY_LONG_PROB:
        # "very long" post: the longest sentences of one or two topics
        pool.sort(key=len, reverse=True)
        pool = pool[:12]
        rng.shuffle(pool)
        k = rng.choice([6, 7, 8])
    body = pool[:min(k, len(pool))]

    insert = None
    if level > 0 or rng.random() < LEVEL0_INSERT_PROB:
        insert = dict(rng.choice(inserts))
        if insert["text"][-1].isalnum():
            insert["text"] += "."

    def assemble(body_sents: list[str]) -> str:
        sents = list(body_sents)
        if insert is not None:
            sents.insert(pos if pos <= len(sents) else len(sents), insert["text"])
        if opener:
            sents.insert(0, opener)
        if closer:
            sents.append(closer)
        if sep == "para":
            # break into 2-3 paragraphs
            cut = sorted(rng_local.sample(range(1, len(sents)), min(2, len(sents) - 1))) if len(sents) > 2 else []
            chunks, prev = [], 0
            for c in cut + [len(sents)]:
                chunks.append(" ".join(sents[prev:c]))
                prev = c
            text = "\n\n".join(chunks)
        elif sep == "newline":
            text = "\n".join(sents)
        else:
            text = " ".join(sents)
        return text.lower() if lower else text

    pos = rng.randint(0, len(body))
    opener = rng.choice(narrative["openers"]) if rng.random() < 0.35 else None
    closer = rng.choice(narrative["closers"]) if rng.random() < 0.35 else None
    if insert is not None and insert["kind"] in ("lookalike_farewell", "vague_farewell"):
        pos, closer = 10_000, None  # a farewell closes the post
    sep = rng.choices(["space", "para", "newline"], weights=[70, 22, 8])[0]
    lower = rng.random() < 0.12
    rng_local = random.Random(rng.random())

    text = assemble(body)
    while len(text) > MAX_LONG_CHARS and len(body) > 2:
        body = body[:-1]
        rng_local = random.Random(rng.random())
        text = assemble(body)

    kind = insert["kind"] if insert is not None else f"narrative_{t1}"
    return {"text": text, "level": level, "kind": kind, "lang": lang, "source": "long"}


# --------------------------------------------------------------------------
# Benign-distress rows
# --------------------------------------------------------------------------

def distress_by_topic(rows: list[dict]) -> dict[str, list[str]]:
    """Hand-written distress sentences of one language, grouped by topic."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if r["source"] == "hand":
            out[r["kind"][len(DISTRESS_PREFIX):]].append(r["text"])
    return dict(out)


def make_distress_short(lang: str, distress: dict, rng: random.Random) -> dict | None:
    """2-3 sentences of one distress topic, 40-300 characters."""
    topic = rng.choice(sorted(distress))
    sents = rng.sample(distress[topic], min(len(distress[topic]), rng.choice([2, 2, 3])))
    while len(sents) > 1 and len(" ".join(sents)) > DISTRESS_SHORT_RANGE[1]:
        sents.pop()
    text = " ".join(sents)
    if rng.random() < 0.1:
        text = text.lower()
    lo, hi = DISTRESS_SHORT_RANGE
    if len(sents) < 2 or not lo <= len(text) <= hi:
        return None
    return {"text": text, "level": 0, "kind": DISTRESS_PREFIX + topic, "lang": lang,
            "source": "template"}


def join_sentences(sents: list[str], sep: str, rng: random.Random) -> str:
    if sep == "para" and len(sents) > 2:
        cut = sorted(rng.sample(range(1, len(sents)), min(rng.choice([1, 2, 3]), len(sents) - 1)))
        chunks, prev = [], 0
        for c in cut + [len(sents)]:
            chunks.append(" ".join(sents[prev:c]))
            prev = c
        return "\n\n".join(chunks)
    if sep == "newline":
        return "\n".join(sents)
    return " ".join(sents)


def make_distress_post(lang: str, level: int, distress: dict, narrative: dict,
                       inserts: list[dict], rng: random.Random) -> dict | None:
    """A long (301-2,000 chars) benign-distress post.

    Level 0: distress and narrative sentences only, kind distress_<topic>.
    Level 1/2: the same kind of post with one risk sentence from `inserts`
    inserted at a random position; it takes that sentence's level and kind.
    """
    topics = sorted(distress)
    t1 = rng.choice(topics)
    t2 = rng.choice([t for t in topics if t != t1])
    sources = {
        "primary": list(distress[t1]),
        "narrative": [s for t in DISTRESS_NARRATIVE.get(t1, []) for s in narrative["topics"].get(t, [])],
        "other": list(distress[t2]),
        "rest": [s for t in topics if t not in (t1, t2) for s in distress[t]],
    }
    for v in sources.values():
        rng.shuffle(v)
    (lo, hi), = rng.choices(list(DISTRESS_LONG_TARGETS), weights=list(DISTRESS_LONG_TARGETS.values()))
    target = rng.randint(lo, hi)

    # the body starts with two sentences of the post's own distress topic
    body = [sources["primary"].pop() for _ in range(min(2, len(sources["primary"])))]
    length = sum(len(b) + 1 for b in body)
    while length < target:
        names = [n for n in DISTRESS_SOURCE_WEIGHTS if sources[n]]
        if not names:
            if not sources["rest"]:
                break
            names = ["rest"]  # small languages: other topics once the first two run out
        name = rng.choices(names, weights=[DISTRESS_SOURCE_WEIGHTS.get(n, 1) for n in names])[0]
        body.append(sources[name].pop())
        length += len(body[-1]) + 1

    insert = None
    if level > 0:
        insert = dict(rng.choice(inserts))
        if insert["text"][-1].isalnum():
            insert["text"] += "."
    pos = rng.randint(0, len(body))
    opener = rng.choice(narrative["openers"]) if rng.random() < 0.3 else None
    closer = rng.choice(narrative["closers"]) if rng.random() < 0.3 else None
    sep = rng.choices(["space", "para", "newline"], weights=[60, 30, 10])[0]
    lower = rng.random() < 0.12
    seed = rng.random()

    def assemble(body_sents: list[str]) -> str:
        sents = list(body_sents)
        if insert is not None:
            sents.insert(min(pos, len(sents)), insert["text"])
        if opener:
            sents.insert(0, opener)
        if closer:
            sents.append(closer)
        text = join_sentences(sents, sep, random.Random(seed))
        return text.lower() if lower else text

    text = assemble(body)
    while len(text) > MAX_LONG_CHARS and len(body) > 2:
        body = body[:-1]
        text = assemble(body)
    if not DISTRESS_LONG_MIN <= len(text) <= MAX_LONG_CHARS:
        return None
    kind = insert["kind"] if insert is not None else DISTRESS_PREFIX + t1
    return {"text": text, "level": level, "kind": kind, "lang": lang, "source": "long",
            "_distress_body": True}


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def build() -> list[dict]:
    rng = random.Random(SEED)

    # 1. candidate pools: hand, template, variants
    pools: dict[str, list[dict]] = {}
    narratives: dict[str, dict] = {}
    distress: dict[str, dict] = {}
    for lang in LANGS:
        spec = load_json(f"templates_{lang}.json")
        narratives[lang] = load_json(f"narrative_{lang}.json")
        abbrev = spec.get("abbrev", {})
        distress_rows = load_distress(lang)
        distress[lang] = distress_by_topic(distress_rows)
        base = (load_hand(lang) + load_hand(lang, "hand_r4") + load_hand(lang, "hand_r7")
                + load_hand(lang, "hand_r8")
                + template_rows(lang, spec, rng)
                + distress_rows)
        rows = []
        for r in base:
            rows.append(r)
            if rng.random() < VARIANT_PROB[lang]:
                v = make_variant(r["text"], lang, abbrev, rng)
                if v:
                    rows.append({**r, "text": v, "source": "template"})
        pools[lang] = rows

    # 2. drop wordings that appear with two different levels
    levels_by_key: dict[str, set] = defaultdict(set)
    for rows in pools.values():
        for r in rows:
            levels_by_key[norm_key(r["text"])].add(r["level"])
    conflicts = {k for k, v in levels_by_key.items() if len(v) > 1}
    if conflicts:
        print(f"warning: dropping {len(conflicts)} wordings with conflicting levels:", file=sys.stderr)
        for k in sorted(conflicts)[:40]:
            print(f"  {k!r} -> {sorted(levels_by_key[k])}", file=sys.stderr)
    for lang in LANGS:
        pools[lang] = [r for r in pools[lang] if norm_key(r["text"]) not in conflicts]

    # 3. select per (language, level) and fill with long posts
    seen: set[str] = set()
    out: list[dict] = []

    def take(row: dict) -> bool:
        if row["text"] in seen:
            return False
        seen.add(row["text"])
        out.append(row)
        return True

    def fill(make, n: int, label: str) -> None:
        made, attempts = 0, 0
        while made < n and attempts < n * 50:
            attempts += 1
            row = make()
            made += row is not None and take(row)
        if made < n:
            print(f"warning: only {made}/{n} {label}", file=sys.stderr)

    for lang in LANGS:
        by_level: dict[int, list[dict]] = defaultdict(list)
        for r in pools[lang]:
            by_level[r["level"]].append(r)
        for level in (0, 1, 2, 3):
            target = round(TOTAL_PER_LANG[lang] * LEVEL_SHARE[level])
            cell = [r for r in by_level[level] if not r["kind"].startswith(DISTRESS_PREFIX)]
            if level == 0:
                # benign distress: its own share of the level-0 cell
                n_distress = round(target * DISTRESS_SHARE_OF_L0)
                target -= n_distress
                dcell = [r for r in by_level[0] if r["kind"].startswith(DISTRESS_PREFIX)]
                lo, hi = DISTRESS_SHORT_RANGE
                n_short = round(n_distress * DISTRESS_SHORT_SHARE)
                dhand = [r for r in dcell if r["source"] == "hand" and lo <= len(r["text"]) <= hi]
                dvar = [r for r in dcell if r["source"] != "hand" and lo <= len(r["text"]) <= hi]
                rng.shuffle(dhand)
                rng.shuffle(dvar)
                taken = sum(take(r) for r in dhand[:round(n_short * DISTRESS_SHORT_HAND_MAX)])
                taken += sum(take(r) for r in dvar[:round(n_short * DISTRESS_SHORT_VARIANT_MAX)])
                fill(lambda: make_distress_short(lang, distress[lang], rng), n_short - taken,
                     f"short distress rows for {lang}")
                fill(lambda: make_distress_post(lang, 0, distress[lang], narratives[lang], [], rng),
                     n_distress - n_short, f"long distress posts for {lang}")
            n_long = round(target * LONG_SHARE)
            short_budget = target - n_long
            hand = [r for r in cell if r["source"] == "hand"]
            tmpl = [r for r in cell if r["source"] != "hand"]
            rng.shuffle(tmpl)
            taken = sum(take(r) for r in hand)
            for r in tmpl:
                if taken >= short_budget:
                    break
                taken += take(r)
            n_long = target - taken if taken < target else n_long

            # level 1/2: some long posts are benign-distress posts with one risk
            # sentence inserted, so that the risk sentence, not the distress,
            # carries the label
            if level in DISTRESS_RISK_KINDS:
                n_dr = min(DISTRESS_RISK_POSTS[lang], n_long)
                dr_inserts = [r for r in cell if r["kind"] in DISTRESS_RISK_KINDS[level]]
                fill(lambda: make_distress_post(lang, level, distress[lang], narratives[lang],
                                                dr_inserts, rng),
                     n_dr, f"level-{level} distress posts for {lang}")
                n_long -= n_dr

            # sentences that may be inserted into long posts
            if level == 0:
                inserts = [r for r in cell if r["kind"] in LOOKALIKE_KINDS]
            else:
                inserts = cell
            made, attempts = 0, 0
            while made < n_long and attempts < n_long * 50:
                attempts += 1
                made += take(make_long_post(lang, level, narratives[lang], inserts, rng))
            if made < n_long:
                print(f"warning: only {made}/{n_long} long posts for {lang} level {level}",
                      file=sys.stderr)

    rng.shuffle(out)
    for i, r in enumerate(out, 1):
        r["id"] = f"c{i:05d}"
    # "_distress_body" marks long posts built on a benign-distress body; it is
    # used for the counts only and not written to corpus.jsonl
    return [{k: r[k] for k in ("id", "text", "level", "kind", "lang", "source")}
            | {"_distress_body": r.get("_distress_body", False)} for r in out]


def length_bucket(n: int) -> str:
    if n <= 50:
        return "0001-0050"
    if n <= 150:
        return "0051-0150"
    if n <= 600:
        return "0151-0600"
    if n <= 1200:
        return "0601-1200"
    return "1201+"


def summarise(rows: list[dict]) -> dict:
    return {
        "total": len(rows),
        "level": Counter(r["level"] for r in rows),
        "lang": Counter(r["lang"] for r in rows),
        "source": Counter(r["source"] for r in rows),
        "length": Counter(length_bucket(len(r["text"])) for r in rows),
        "kind": Counter((r["level"], r["kind"]) for r in rows),
        "lang_level": Counter((r["lang"], r["level"]) for r in rows),
        "distress_len": Counter(
            ("short" if len(r["text"]) <= DISTRESS_SHORT_RANGE[1] else "long")
            for r in rows if r["kind"].startswith(DISTRESS_PREFIX)),
        "distress_lang": Counter(r["lang"] for r in rows if r["kind"].startswith(DISTRESS_PREFIX)),
        "distress_risk": Counter((r["lang"], r["level"]) for r in rows
                                 if r["_distress_body"] and r["level"] > 0),
    }


def render_counts(s: dict) -> str:
    total = s["total"]
    lines = [f"Total rows: **{total}**", ""]

    def table(title, counter, keys):
        lines.append(f"| {title} | rows | share |")
        lines.append("|---|---:|---:|")
        for k in keys:
            lines.append(f"| {k} | {counter[k]} | {100 * counter[k] / total:.1f}% |")
        lines.append("")

    table("level", s["level"], sorted(s["level"]))
    table("lang", s["lang"], LANGS)
    table("source", s["source"], sorted(s["source"]))
    table("length (chars)", s["length"], sorted(s["length"]))
    over150 = sum(v for k, v in s["length"].items() if k not in ("0001-0050", "0051-0150"))
    over600 = s["length"]["0601-1200"] + s["length"]["1201+"]
    lines.append(f"Rows longer than 150 characters: {over150} ({100 * over150 / total:.1f}%); "
                 f"longer than 600: {over600} ({100 * over600 / total:.1f}%).")
    lines.append("")
    lines.append("| lang | level 0 | level 1 | level 2 | level 3 |")
    lines.append("|---|---:|---:|---:|---:|")
    for lang in LANGS:
        lines.append(f"| {lang} | " + " | ".join(str(s["lang_level"][(lang, lv)]) for lv in range(4)) + " |")
    lines.append("")
    lines.append("| level | kind | rows |")
    lines.append("|---:|---|---:|")
    for (lv, kind), n in sorted(s["kind"].items()):
        lines.append(f"| {lv} | {kind} | {n} |")
    l0 = s["level"][0]
    look = sum(n for (lv, k), n in s["kind"].items() if lv == 0 and k in LOOKALIKE_KINDS)
    lines.append("")
    lines.append(f"Level-0 rows that are benign look-alikes: {look} of {l0} ({100 * look / l0:.1f}%).")
    dl = s["distress_len"]
    nd = dl["short"] + dl["long"]
    lines.append("")
    lines.append(f"Level-0 benign-distress rows (kind `distress_*`): {nd} of {l0} ({100 * nd / l0:.1f}%); "
                 f"{DISTRESS_SHORT_RANGE[0]}-{DISTRESS_SHORT_RANGE[1]} chars: {dl['short']} "
                 f"({100 * dl['short'] / nd:.1f}%), over {DISTRESS_SHORT_RANGE[1]} chars: {dl['long']} "
                 f"({100 * dl['long'] / nd:.1f}%).")
    lines.append("")
    lines.append("| lang | distress (level 0) | distress post + level-1 sentence | distress post + level-2 sentence |")
    lines.append("|---|---:|---:|---:|")
    for lang in LANGS:
        lines.append(f"| {lang} | {s['distress_lang'][lang]} | {s['distress_risk'][(lang, 1)]} | "
                     f"{s['distress_risk'][(lang, 2)]} |")
    dr1 = sum(n for (lg, lv), n in s["distress_risk"].items() if lv == 1)
    dr2 = sum(n for (lg, lv), n in s["distress_risk"].items() if lv == 2)
    lines.append(f"| all | {nd} | {dr1} | {dr2} |")
    return "\n".join(lines)


def update_sources_md(s: dict) -> None:
    if not SOURCES_MD.exists():
        return
    text = SOURCES_MD.read_text(encoding="utf-8")
    start, end = "<!-- counts:start -->", "<!-- counts:end -->"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        SOURCES_MD.write_text(f"{head}{start}\n{render_counts(s)}\n{end}{tail}", encoding="utf-8")


def main() -> None:
    out = OUT
    if len(sys.argv) == 3 and sys.argv[1] == "--out":
        out = Path(sys.argv[2])
    elif len(sys.argv) != 1:
        sys.exit("usage: generate_corpus.py [--out PATH]")
    rows = build()
    with out.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if not k.startswith("_")},
                               ensure_ascii=False) + "\n")
    s = summarise(rows)
    if out == OUT:
        update_sources_md(s)
    print(render_counts(s))
    print(f"\nwrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()
