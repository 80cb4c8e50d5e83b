"""``ptlab dataset`` and ``ptlab evaluate``: the learning censor's data and its
classifiers, trained and measured (docs/lab/learning-censor.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from netns.sh import require_root, require_tools

from .common import Subparsers, die, term_to_exit


def evaluate_tlsintls(args: argparse.Namespace) -> int:
    """``ptlab evaluate DATASET --tlsintls``: fit Xue et al. 2024's detector on the
    benign half, measure it on the rest (docs/censors/tlsintls.md §2)."""
    from ..ml import tlsintls as tt

    path = Path(args.dataset)
    seq_file = path / "sequences.jsonl.gz"
    try:
        seqs = (tt.read_sequences(seq_file) if seq_file.exists()
                else tt.sequences_from_dataset(path))
        if not seq_file.exists():
            tt.write_sequences(seq_file, seqs)
        train, test = tt.split(seqs, args.seed)
        model = tt.fit(train, fpr_target=args.fpr_target)
    except (OSError, ValueError, KeyError) as exc:
        return die(f"evaluate --tlsintls: {exc}")
    result = tt.evaluate(model, test)
    out = Path(args.out) if args.out else path / "evaluation"
    out.mkdir(parents=True, exist_ok=True)
    (out / "tlsintls.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.save_models:
        Path(args.save_models).mkdir(parents=True, exist_ok=True)
        model.name = "tlsintls-2024"
        (Path(args.save_models) / "tlsintls-2024.json").write_text(
            json.dumps(model.to_json(), indent=1, sort_keys=True) + "\n")
    fpr = result["fpr"]
    print(f"delta {model.delta}, gamma {model.gamma}, overhead {model.overhead} bytes")
    print(f"false positives on held-out benign flows: {fpr['flagged']}/{fpr['flows']} "
          f"[{fpr['wilson95'][0]:.4f}, {fpr['wilson95'][1]:.4f}]")
    for name, c in {**result["by_class"], **result["by_setting"]}.items():
        print(f"  {name:24s} {c['flagged']:5d}/{c['flows']:<5d} "
              f"[{c['wilson95'][0]:.3f}, {c['wilson95'][1]:.3f}]")
    # The base rate, with the false-positive rate at its interval's upper bound: a
    # handful of held-out flows cannot show a rate near the paper's 0.0544 %.
    p, f = args.prevalence, fpr["wilson95"][1]
    for name, c in result["by_class"].items():
        if not name.startswith("benign:") and c["rate"]:
            share = c["rate"] * p / (c["rate"] * p + f * (1 - p))
            print(f"  at prevalence {p:g}, FPR {f:.4f}: {share:.2%} of flagged flows "
                  f"would be {name}")
    return 0


def cmd_dataset(args: argparse.Namespace) -> int:
    from ..ml.dataset import collect, load_dataset_spec, scaled

    spec = load_dataset_spec(Path(args.spec))
    if args.scale != 1.0:
        if not 0 < args.scale <= 100:
            return die("--scale must be in (0, 100]")
        spec = scaled(spec, args.scale)
    require_root()
    require_tools("ip", "nft", "tc", "tcpdump")
    term_to_exit()
    manifest = collect(spec, Path(args.out), lab_id=args.lab_id)
    print(f"dataset: {manifest['flows']} flows in {args.out} "
          f"({', '.join(f'{k}: {sum(v.values())}' for k, v in manifest['counts'].items())})")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..ml.dataset import load_dataset
    from ..ml.evaluate import EvalOptions, evaluate
    from ..ml.report import render, summary_lines

    if args.tlsintls:
        return evaluate_tlsintls(args)
    ds = load_dataset(Path(args.dataset))
    if not 0 < args.prevalence < 1:
        return die("--prevalence must be in (0, 1)")
    if not 0 < args.test_size < 1:
        return die("--test-size must be in (0, 1)")
    opts = EvalOptions(seed=args.seed, test_size=args.test_size, prevalence=args.prevalence,
                       train_setting=args.train_setting, test_setting=args.test_setting,
                       save_models=Path(args.save_models) if args.save_models else None)
    out = Path(args.out) if args.out else Path(args.dataset) / "evaluation"
    try:
        result = evaluate(ds, opts)
    except ValueError as exc:
        return die(f"evaluate: {exc}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "evaluation.json").write_text(json.dumps(result, indent=1) + "\n")
    report = render(result, out)
    for line in summary_lines(result):
        print(line)
    print(f"report: {report}")
    return 0


def add_parser(sub: Subparsers) -> None:
    ds = sub.add_parser("dataset", help="collect a learning-censor dataset in the lab",
                        description="Run transports and benign traffic under each link "
                                    "setting of a dataset spec; write flows.csv (labelled "
                                    "per-flow features), pcaps/ and dataset.json to OUT.")
    ds.add_argument("spec", help="dataset TOML, e.g. experiments/ml-dataset.toml")
    ds.add_argument("out", help="output directory")
    ds.add_argument("--scale", type=float, default=1.0,
                    help="multiply every flow and session count (0.1 for a quick run)")
    ds.add_argument("--lab-id", help="lab id to use (default random)")
    ds.set_defaults(fn=cmd_dataset)

    ev = sub.add_parser("evaluate", help="train and test flow classifiers on a dataset",
                        description="TPR/FPR per transport with 95 % intervals, ROC curves, "
                                    "the cross-setting (portability) drop and the base-rate "
                                    "arithmetic; writes evaluation.json and report.html.")
    ev.add_argument("dataset", help="dataset directory (from ptlab dataset)")
    ev.add_argument("--out", help="output directory (default DATASET/evaluation)")
    ev.add_argument("--seed", type=int, default=1, help="seed of the split and the learners")
    ev.add_argument("--test-size", type=float, default=0.3, help="held-out share per label")
    ev.add_argument("--prevalence", type=float, default=1e-6,
                    help="share of flows that are the transport, for the base-rate arithmetic")
    ev.add_argument("--train-setting", help="portability: train on this link setting ...")
    ev.add_argument("--test-setting", help="... and test on this one (default: every pair)")
    ev.add_argument("--save-models", help="directory for the trained models (JSON)")
    ev.add_argument("--tlsintls", action="store_true",
                    help="train and test the TLS-in-TLS detector (Xue et al. 2024) instead")
    ev.add_argument("--fpr-target", type=float, default=0.01,
                    help="--tlsintls: false-positive rate the thresholds may reach in training")
    ev.set_defaults(fn=cmd_evaluate)
