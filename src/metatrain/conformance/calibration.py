"""Where a family's difficulty stands for untrained models (``metatrain calibrate``).

A family is calibrated when the best untrained allowed model scores inside ``CALIBRATION_BAND`` on
its hidden eval and a tool-free guess stays under ``GUESS_FLOOR_LIMIT``. A family may declare
candidate levels (``LeveledFamily``); each is scored on its own hidden-eval draw (same secret, the
level's knobs), greedily, as the eval plays. Nothing here writes baselines: a level that is
adopted becomes a new family version, seeded with ``metatrain seed-baselines``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from metatrain.conformance.checks import measure_guess_floor, measure_one_lookup_floor
from metatrain.conformance.guessing import GUESS_FLOOR_LIMIT
from metatrain.protocols import LeveledFamily, TaskFamily

CALIBRATION_BAND = (0.05, 0.8)
"""The best untrained model's hidden-eval score a family is tuned into (the original system's
untrained best_pre ranged 0.24-0.74)."""


def band_note(score: float, band: tuple[float, float] = CALIBRATION_BAND) -> str:
    """Where a best untrained score lies: ``below band``, ``in band`` or ``above band``."""
    return "below band" if score < band[0] else "above band" if score > band[1] else "in band"


class ModelScore(BaseModel):
    """One untrained model on one level's hidden eval."""

    model_config = ConfigDict(frozen=True)

    model: str
    score: float
    ci95: tuple[float, float]
    n: int
    tool_calls_per_rollout: float
    seconds: float


class LevelResult(BaseModel):
    """One candidate level: its guess floor and each model's score."""

    model_config = ConfigDict(frozen=True)

    label: str
    current: bool
    """Whether these are the knobs the family's version ships."""
    eval_max_turns: int
    guess_floor: float
    """The best cheap guess: tool-free, or one tool call's field (the kit's two floors)."""
    guess_policy: str
    scores: tuple[ModelScore, ...]

    @property
    def best(self) -> ModelScore | None:
        return max(self.scores, key=lambda s: s.score, default=None)

    def in_band(self, band: tuple[float, float] = CALIBRATION_BAND) -> bool:
        """Best untrained score inside ``band`` and a guess floor under the limit."""
        best = self.best
        return (
            best is not None
            and band_note(best.score, band) == "in band"
            and self.guess_floor < GUESS_FLOOR_LIMIT
        )


class CalibrationReport(BaseModel):
    """What ``metatrain calibrate --json`` writes."""

    family: str
    version: str
    command: str
    budget: str
    device: str
    limit: int | None
    dtype: str | None = None
    """The weights' dtype while decoding (reports before 2026-12-07 lack it: ``eval_dtype``'s)."""
    band: tuple[float, float] = CALIBRATION_BAND
    levels: tuple[LevelResult, ...]
    chosen: str | None
    """The hardest level in the band (levels are declared hardest first), if any."""


def family_levels(family: TaskFamily, budget: str, only: Sequence[str] = ()) -> dict[str, TaskFamily]:
    """The family's candidate levels (just ``current`` when it declares none), or ``only`` those;
    an unknown label is a ValueError naming the known ones."""
    levels = dict(family.calibration_levels(budget)) if isinstance(family, LeveledFamily) else {}
    levels = levels or {"current": family}
    unknown = [label for label in only if label not in levels]
    if unknown:
        known = ", ".join(repr(k) for k in levels)
        raise ValueError(f"{family.name} has no level {unknown[0]!r} for {budget!r}; its levels: {known}")
    return {k: v for k, v in levels.items() if not only or k in only}


def choose_level(results: Sequence[LevelResult], band: tuple[float, float] = CALIBRATION_BAND) -> str | None:
    """The first (hardest) level in the band, or None."""
    return next((r.label for r in results if r.in_band(band)), None)


PlayLevel = Callable[[str, TaskFamily, str, int | None], ModelScore]
"""(level label, level family, model key, limit) -> that model's score on the level's hidden eval."""


def calibrate(
    family: TaskFamily,
    budget: str,
    models: Sequence[str],
    play_level: PlayLevel,
    limit: int | None = None,
    only: Sequence[str] = (),
) -> list[LevelResult]:
    """Score ``models`` on each level of ``family`` (``only`` those labels, when given), hardest first."""
    levels = family_levels(family, budget, only)
    scores: dict[str, list[ModelScore]] = {label: [] for label in levels}
    for model in models:  # the model outer, so a real player loads each model once
        for label, level in levels.items():
            scores[label].append(play_level(label, level, model, limit))
    results = []
    for label, level in levels.items():
        floor = max(
            measure_guess_floor(level, budget), measure_one_lookup_floor(level, budget), key=lambda f: f.score
        )
        results.append(
            LevelResult(
                label=label,
                current=level is family,
                eval_max_turns=level.task_spec(budget).eval.max_turns,
                guess_floor=floor.score,
                guess_policy=floor.policy,
                scores=tuple(scores[label]),
            )
        )
    return results


class ModelPlayer:
    """Plays levels with real models, greedily as the hidden eval does, keeping one model loaded."""

    def __init__(
        self,
        budget: str,
        device: str,
        model_dirs: Mapping[str, Path],
        batch_size: int = 64,
        on_start: Callable[[str, str, int], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
        dtype: str | None = None,
    ) -> None:
        from metatrain.training.evaluation import eval_dtype

        self.budget, self.device, self.model_dirs, self.batch_size = budget, device, model_dirs, batch_size
        self.dtype = dtype or eval_dtype(budget, device)  # the hidden eval's unless given
        self.on_start, self.on_progress = on_start, on_progress
        self._loaded: tuple[str, object, object] | None = None

    def _model(self, key: str) -> tuple[object, object]:
        from metatrain.training.evaluation import load_model

        if self._loaded is None or self._loaded[0] != key:
            self._loaded = None  # free the previous model first
            model, tokenizer = load_model(self.model_dirs[key], self.device, self.dtype)
            self._loaded = (key, model, tokenizer)
        return self._loaded[1], self._loaded[2]

    def __call__(self, label: str, level: TaskFamily, model_key: str, limit: int | None) -> ModelScore:
        from metatrain.training.evaluation import play, score_rollouts

        model, tokenizer = self._model(model_key)
        examples = level.hidden_eval(self.budget)
        examples = examples[:limit] if limit else examples
        if self.on_start is not None:
            self.on_start(model_key, label, len(examples))
        t0 = time.monotonic()
        rollouts = play(level, self.budget, examples, model, tokenizer, self.batch_size, self.on_progress)
        report = score_rollouts(level, examples, rollouts, t0)
        return ModelScore(
            model=model_key,
            score=report.score,
            ci95=report.ci95,
            n=report.n,
            tool_calls_per_rollout=report.tool_calls_per_rollout,
            seconds=round(report.seconds, 1),
        )
