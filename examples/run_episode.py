"""The smallest recipe: run one episode from Python and print its reward breakdown.

.venv/bin/python examples/run_episode.py --family calc_chain --device cpu
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metatrain import load_plugins
from metatrain.episode.loop import EpisodeConfig, run_episode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", default="calc_chain")
    parser.add_argument("--agent", default="reference")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=Path, default=Path("runs"))
    args = parser.parse_args()

    def progress(event: str, data: dict[str, object]) -> None:
        if event in {"phase", "validation"}:
            print(event, {k: v for k, v in data.items() if k != "errors"})

    config = EpisodeConfig(family=args.family, agent=args.agent, device=args.device, runs_root=args.runs)
    result = run_episode(config, load_plugins(), progress)
    print(result.reward.model_dump_json(indent=2))
    print("run directory:", result.run_dir)


if __name__ == "__main__":
    main()
