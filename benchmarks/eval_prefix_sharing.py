"""Hidden-eval play with and without the shared prefix computed once, side by side in one run.

The eval's conversations all start with the same system prompt and tool schemas (hundreds of
tokens); ``run_rollouts(share_prefix=True)`` computes their keys and values once per eval and pads
each batch after them. This plays the same examples both ways on the same loaded model and prints
the wall-time ratio and how many rollouts came out identical (greedy: they should all, up to
floating-point ties).

    .venv/bin/python benchmarks/eval_prefix_sharing.py                                   # SmolLM2, CPU
    .venv/bin/python benchmarks/eval_prefix_sharing.py --family triage --model qwen2.5-coder-0.5b --n 8
"""

from __future__ import annotations

import argparse
import time

from metatrain.models import prepare_model
from metatrain.plugins import load_plugins
from metatrain.training.evaluation import eval_dtype, load_model, play


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="calc_chain")
    parser.add_argument("--budget", default="fast")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n", type=int, default=16, help="hidden-eval examples played each way")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--repeats", type=int, default=2, help="plays each way (alternating); the best counts"
    )
    args = parser.parse_args()

    family = load_plugins().task_family(args.family)
    examples = family.hidden_eval(args.budget)[: args.n]
    model, tokenizer = load_model(
        prepare_model(args.model), args.device, eval_dtype(args.budget, args.device)
    )
    timings, played = {}, {}
    for share in (False, True) * args.repeats:  # alternating, so warm caches count for both
        t0 = time.perf_counter()
        rollouts = play(family, args.budget, examples, model, tokenizer, args.batch_size, share_prefix=share)
        timings.setdefault(share, []).append(time.perf_counter() - t0)
        played[share] = rollouts
    plain, shared = min(timings[False]), min(timings[True])
    same = sum(a.messages == b.messages for a, b in zip(played[False], played[True], strict=True))
    scores = [
        sum(family.score(ex, r.final_text) for ex, r in zip(examples, played[s], strict=True))
        for s in (False, True)
    ]
    turns = sum(r.turns for r in played[True]) / len(examples)
    print(
        f"{args.family} {args.budget}, {args.model} on {args.device}: "
        f"{len(examples)} examples, {turns:.1f} turns each"
    )
    print(f"  left-padded batches : {plain:7.1f} s   (best of {args.repeats})")
    print(f"  shared prefix once  : {shared:7.1f} s   (best of {args.repeats})")
    print(f"  speed-up            : {plain / shared:7.2f}x")
    print(f"  identical rollouts  : {same}/{len(examples)}; scores {scores[0]:.0f} vs {scores[1]:.0f}")


if __name__ == "__main__":
    main()
