"""Round five's gate, re-run without a model on the designer replies round four committed.

bench/validity/levels.jsonl and plain.jsonl hold 1,136 replies of the `cpu` preset's designer
(Qwen2.5-Coder-1.5B), 101 of them valid by round four's gate. Each reply's code goes through
`spade_mini.gate.admit` under the `cpu` preset's rules (turn cap 6, 24 tokens a turn, K = 8) with
an archive that starts with the bundled environments and takes in each admitted design in file
order, as a run would. Then, on the 101, every check of the new gate is asked on its own
(`decided`, `given_away`, `hint`, `question`, the re-skin check against the bundled archive)
and held against a second reader's labels (tests/golden/valid_design_labels.json): per defect
kind, how many of the designs labelled with it the check refuses (recall), and how many it
refuses that are not labelled with it (false refusals).

    python bench/gate_rerun.py --json bench/gate_rerun.json   # the sandbox only, 2 threads
    python bench/gate_rerun.py --files bench/validity/gate5.jsonl --json bench/validity/gate5_regated.json

`--files` re-gates other samples files (designer_validity.py's) the same way, without the labels:
a long measurement's replies all judged by the gate as it is now, whatever gate wrote their
stages, with the admitted counted per skill.

The labels' kinds and the check each belongs to: reskin_of -> duplicate (the re-skin check),
hint_gives_answer -> hint, answer_in_observation -> given_away, question_reward_mismatch ->
question, coin_flip -> decided.
"""
import argparse
import collections
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spade_mini.config import Config  # noqa: E402
from spade_mini.designer import extract_code  # noqa: E402
from spade_mini.envs.actions import as_played  # noqa: E402
from spade_mini.gate import ANSWER_SEEDS, TEXT_CHECKS, Archive, admit, check  # noqa: E402
from spade_mini.reward.invalidity import INVALID_STAGES  # noqa: E402
from spade_mini.sandbox import SandboxError, solve  # noqa: E402
from spade_mini.sandbox.env import SEED_BOUND  # noqa: E402
from spade_mini.settings import gate_settings  # noqa: E402

FILES = ("bench/validity/levels.jsonl", "bench/validity/plain.jsonl")
LABELS = ROOT / "tests" / "golden" / "valid_design_labels.json"
KINDS = {"reskin_of": "duplicate", "hint_gives_answer": "hint", "answer_in_observation": "given_away",
         "question_reward_mismatch": "question", "coin_flip": "decided"}


def tokenizer_counter(cfg):
    """The preset model's token count (its tokenizer only), for the turn's token budget."""
    from transformers import AutoTokenizer

    from spade_mini.policy.models import checkpoint
    tok = AutoTokenizer.from_pretrained(checkpoint(cfg.model, cfg.cache_dir))
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def every_check(code: str, gate, key: str, archive: Archive) -> dict:
    """Each check of the gate on its own (not stopping at the first refusal)."""
    result = check(code, gate, random.Random(key))
    out = {"validation": result.stage}
    rng = random.Random(f"texts:{key}")
    try:
        solved = solve(code, [rng.randrange(SEED_BOUND) for _ in range(ANSWER_SEEDS)], max_actions=gate.play_turns,
                       limits=gate.limits)
    except SandboxError as exc:
        return {**out, "texts": f"unread: {exc}"}
    seen = [(s.seed, s.observation, tuple(as_played(a, s.tool_use) for a in s.actions or ()), s.hint) for s in solved]
    for stage, reasons_of in TEXT_CHECKS:
        out[stage] = out.get(stage, False) or bool(reasons_of(seen))
    out["decided"] = result.stage == "decided"
    out["duplicate"] = archive.reskin_of(code, limits=gate.limits)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="only the first N replies of each file (a quick look)")
    parser.add_argument("--files", nargs="+", default=FILES, help="samples files to re-gate (default: round four's)")
    args = parser.parse_args()
    cfg = Config.from_preset("cpu")
    gate, count = gate_settings(cfg), tokenizer_counter(cfg)
    rows = [(f, i, json.loads(line)) for f in args.files
            for i, line in enumerate((ROOT / f).read_text(encoding="utf-8").splitlines()[:args.limit or None])]
    t0 = time.time()

    def texts_and_validation(row):  # the gate without the archive, which must grow in order
        f, i, r = row
        code = extract_code(r["reply"])
        return "no_code" if code is None else admit(code, gate, random.Random(f"{f}:{i}"), count_tokens=count)

    with ThreadPoolExecutor(max_workers=2) as pool:
        first = list(pool.map(texts_and_validation, rows))
    archive, stages = Archive.bundled(), []
    for (f, i, r), result in zip(rows, first):
        stage = result if isinstance(result, str) else result.stage
        if stage == "valid":
            code = extract_code(r["reply"])
            why = archive.reskin_of(code, limits=gate.limits)
            stage = "duplicate" if why else "valid"
            if not why:
                archive.add(f"{f}:{i}", code)
        stages.append(stage)
    print(f"{len(rows)} replies through the gate in {time.time() - t0:.0f} s")
    old = collections.Counter(r["stage"] for _, _, r in rows)
    new = collections.Counter(stages)
    print("| stage | as the file has it (round four's gate for the default files) | the gate now |\n|---|---|---|")
    for stage in (*INVALID_STAGES, "valid"):
        if old[stage] or new[stage]:
            print(f"| {stage} | {old[stage]} | {new[stage]} |")
    summary = {"files": list(args.files), "replies": len(rows), "old": dict(old), "new": dict(new),
               "admitted": [f"{f}:{i}" for (f, i, _), s in zip(rows, stages) if s == "valid"],
               "admitted_by_skill": dict(collections.Counter(r.get("skill", "?") for (_, _, r), s in zip(rows, stages)
                                                             if s == "valid"))}
    print(f"admitted: {len(summary['admitted'])}, per 1,000 replies {1000 * len(summary['admitted']) / len(rows):.1f}; "
          f"by skill {summary['admitted_by_skill']}")
    if tuple(args.files) != FILES:
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1) + "\n")
        return 0
    summary.update(labelled(gate))
    by_key = {f"{lab['file']}:{lab['line']}": lab for lab in json.loads(LABELS.read_text())["labels"]}
    admitted = [by_key.get(key) for key in summary["admitted"]]
    summary["admitted_labelled"] = {kind: sum(bool(lab and lab[kind]) for lab in admitted) for kind in KINDS}
    summary["admitted_unlabelled"] = sum(lab is None for lab in admitted)
    print("of the admitted, labelled "
          + ", ".join(f"{k} {v}" for k, v in summary["admitted_labelled"].items())
          + f"; not among the labelled 101: {summary['admitted_unlabelled']}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def labelled(gate) -> dict:
    """Every check on each of the 101 labelled designs, against the labels."""
    labels = json.loads(LABELS.read_text())["labels"]
    archive = Archive.bundled()
    lines = {f: (ROOT / f).read_text(encoding="utf-8").splitlines() for f in FILES}
    checks = []
    for lab in labels:
        code = extract_code(json.loads(lines[lab["file"]][lab["line"]])["reply"])
        checks.append(every_check(code, gate, f"{lab['file']}:{lab['line']}", archive))
    table = {}
    for kind, stage in KINDS.items():
        positive = [c for lab, c in zip(labels, checks) if lab[kind]]
        negative = [c for lab, c in zip(labels, checks) if not lab[kind]]
        table[kind] = {"check": stage, "labelled": len(positive), "refused": sum(bool(c.get(stage)) for c in positive),
                       "false_refusals": sum(bool(c.get(stage)) for c in negative), "not_labelled": len(negative)}
    print("\n| defect (labels) | check | labelled | refused (recall) | refused, not labelled |\n|---|---|---|---|---|")
    for kind, t in table.items():
        print(f"| {kind} | {t['check']} | {t['labelled']} | {t['refused']} | {t['false_refusals']} of {t['not_labelled']} |")
    clean = [c for lab, c in zip(labels, checks) if not any(lab[k] for k in KINDS)]
    print(f"labelled with no defect of these kinds: {len(clean)}; refused by some check: "
          f"{sum(any(bool(c.get(s)) for s in KINDS.values()) for c in clean)}")
    return {"labelled": table, "checks": [{"file": lab["file"], "line": lab["line"], **{k: (v if isinstance(v, (bool, str)) or v is None else str(v))
                                           for k, v in c.items()}} for lab, c in zip(labels, checks)]}


if __name__ == "__main__":
    raise SystemExit(main())
