"""The episode display: progress bars on a terminal, log lines where output is a file or a pipe."""

from __future__ import annotations

import io

from rich.console import Console

from metatrain.cli.display import EpisodeDisplay


def _run(console: Console) -> str:
    with EpisodeDisplay(console) as display:
        display("phase", {"name": "pre_eval"})
        for done in (10, 20, 30, 40, 48):
            display("eval", {"phase": "pre_eval", "done": done, "total": 48})
        display("phase", {"name": "train", "max_steps": 3})
        for step, reward in ((1, 0.25), (2, 0.5)):
            display("step", {"step": step, "max_steps": 3, "reward": reward})
        display("eval", {"phase": "post_eval", "done": 48, "total": 48})
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_a_log_file_gets_each_step_and_eval_quarters_as_lines() -> None:
    out = _run(Console(file=io.StringIO(), width=120, force_terminal=False))
    lines = [line for line in out.splitlines() if "pre-eval (hidden): " in line]
    # 10/48 is under a quarter; 20, 30, 40 reach quarters 1, 2, 3; 48 is the end.
    assert [line.split("pre-eval (hidden): ")[1].split()[0] for line in lines] == [
        "20/48",
        "30/48",
        "40/48",
        "48/48",
    ]
    assert "training step 1/3: reward 0.250" in out
    assert "training step 2/3: reward 0.500" in out
    assert "post-eval (hidden): 48/48" in out


def test_a_terminal_gets_bars_not_step_lines() -> None:
    out = _run(Console(file=io.StringIO(), width=120, force_terminal=True))
    assert "training step 1/3" not in out
    assert "training (GRPO)" in out
