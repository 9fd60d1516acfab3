"""``metatrain calibrate``: candidate levels, guess floors, the band, and the command's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from metatrain.cli.app import app
from metatrain.conformance.calibration import (
    CALIBRATION_BAND,
    LevelResult,
    ModelScore,
    calibrate,
    choose_level,
    family_levels,
)
from metatrain.conformance.guessing import GUESS_FLOOR_LIMIT
from metatrain.plugins import load_plugins
from metatrain.protocols import TaskFamily
from metatrain_families.dispatch import LEVELS, Dispatch

FAMILIES = ("calc_chain", "multi_hop", "string_pipeline", "ledger", "dispatch", "triage")


def _score(model: str, score: float) -> ModelScore:
    return ModelScore(
        model=model, score=score, ci95=(0.0, 1.0), n=10, tool_calls_per_rollout=1.0, seconds=1.0
    )


def _level(label: str, best: float, floor: float = 0.0) -> LevelResult:
    return LevelResult(
        label=label,
        current=False,
        eval_max_turns=4,
        guess_floor=floor,
        guess_policy="always 'x'",
        scores=(_score("a", 0.0), _score("b", best)),
    )


def test_the_hardest_level_in_the_band_is_chosen() -> None:
    low, high = CALIBRATION_BAND
    results = [
        _level("hardest", low / 2),
        _level("guessable", 0.3, floor=GUESS_FLOOR_LIMIT),
        _level("ok", low),
    ]
    results += [_level("easier", 0.5), _level("too easy", high + 0.01)]
    assert [r.in_band() for r in results] == [False, False, True, True, False]
    assert results[1].best == _score("b", 0.3)
    assert choose_level(results) == "ok"
    assert choose_level(results[:2]) is None
    assert choose_level([_level("x", 0.9)], band=(0.5, 0.95)) == "x"


def test_a_leveled_family_offers_its_knobs_hardest_first_and_stays_itself() -> None:
    family = Dispatch()
    levels = family.calibration_levels("full")
    assert list(levels) == list(LEVELS["full"])
    current = [label for label, level in levels.items() if level is family]
    assert current == ["3 tickets, 3 rules"]
    for label, level in levels.items():
        assert (level.name, level.version, level.held_out) == (family.name, family.version, False)
        assert level.knobs("full") == LEVELS["full"][label]
        assert level.knobs("fast") == family.knobs("fast")
    other = levels["2 tickets, 4 rules on ticket facts"]
    assert other.hidden_eval("full")[0].prompt != family.hidden_eval("full")[0].prompt
    assert type(other).__module__ == type(family).__module__
    assert Dispatch().knobs("full") == LEVELS["full"]["3 tickets, 3 rules"]  # the class is untouched


def test_family_levels_for_a_family_without_levels_and_unknown_labels() -> None:
    family = load_plugins().task_family("calc_chain")

    class Plain:  # a third-party family with no levels: just the current knobs
        name = "plain"

        def __getattr__(self, attr: str) -> object:
            if attr == "calibration_levels":
                raise AttributeError(attr)
            return getattr(family, attr)

    plain: TaskFamily = Plain()  # type: ignore[assignment]
    assert family_levels(plain, "full") == {"current": plain}
    with pytest.raises(ValueError, match="has no level 'nope' for 'full'; its levels: '3 ops"):
        family_levels(family, "full", ["nope"])
    assert list(family_levels(family, "full", ["2 ops, start <= 30, operands <= 12"])) == [
        "2 ops, start <= 30, operands <= 12"
    ]


@pytest.mark.parametrize("name", FAMILIES)
def test_every_declared_level_keeps_a_blind_guess_under_the_floor(name: str) -> None:
    """Any candidate may be adopted as a new version: none may be guessable, without tools or with one
    call (triage's owner-shipped levels and multi_hop 1.3.0's ``fast`` were, by one call)."""
    family = load_plugins().task_family(name)
    played: list[tuple[str, str, int | None]] = []

    def play(label: str, level: TaskFamily, model: str, limit: int | None) -> ModelScore:
        played.append((label, model, limit))
        return _score(model, 0.1 if level is family else 0.0)

    results = calibrate(family, "full", ["m1", "m2"], play, limit=3)
    labels = list(family_levels(family, "full"))
    assert len(labels) >= 3 and [r.label for r in results] == labels
    assert played == [(label, m, 3) for m in ("m1", "m2") for label in labels]  # each model once, outer
    assert [r.current for r in results].count(True) == 1
    guessable = {r.label: r.guess_policy for r in results if r.guess_floor >= GUESS_FLOOR_LIMIT}
    assert not guessable, guessable
    current = next(r.label for r in results if r.current)
    assert choose_level(results) == current


def test_the_command_prints_levels_and_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's plumbing with a stand-in player (the real one plays models: the slow test)."""
    import metatrain.cli.calibrate_cmd as cmd

    class Player:
        def __init__(self, budget: str, device: str, model_dirs: dict[str, Path], *rest: object) -> None:
            self.on_start, self.on_progress = rest[1], rest[2]
            assert (budget, device, list(model_dirs)) == ("full", "cpu", ["qwen2.5-coder-0.5b"])
            assert rest[3] == "bfloat16"  # --dtype reaches the player

        def __call__(self, label: str, level: TaskFamily, model: str, limit: int | None) -> ModelScore:
            self.on_start(model, label, limit or 0)  # type: ignore[operator]
            self.on_progress(limit or 0)  # type: ignore[operator]
            return _score(model, 0.2 if "ticket facts" in label else 0.0)

    monkeypatch.setattr(cmd, "ModelPlayer", Player)
    monkeypatch.setattr(cmd, "console", Console(width=240))
    monkeypatch.setattr("metatrain.models.prepare_model", lambda key, progress=None: tmp_path / key)
    out = tmp_path / "cal.json"
    args = ["calibrate", "dispatch", "--models", "qwen2.5-coder-0.5b", "--limit", "4", "--json", str(out)]
    result = CliRunner().invoke(app, [*args, "--dtype", "bfloat16"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "on cpu in bfloat16" in result.output
    assert "3 tickets, 3 rules (current)" in result.output
    assert "hardest level in the band: 3 tickets, 3 rules on ticket facts" in result.output
    report = json.loads(out.read_text())
    assert report["chosen"] == "3 tickets, 3 rules on ticket facts"
    assert report["command"].startswith("metatrain ") and report["limit"] == 4
    assert report["dtype"] == "bfloat16"
    unguided = [0.0, 0.2, 0.0, 0.2]
    without_customer_ids = [0.2, 0.2]  # the guided levels on ticket facts, again without the id
    one_tool = [0.2]  # the last of those with get_ticket alone
    category = [0.0, 0.0, 0.0]  # rules on the category alone: their labels say "category rules"
    tables = [0.0, 0.0]  # one ticket by two tables, without and with the worked example
    scores = [lv["scores"][0]["score"] for lv in report["levels"]]
    assert scores == [*unguided, *unguided, *without_customer_ids, *one_tool, *category, *tables]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["calibrate", "no_such_family"], "no_such_family"),
        (["calibrate", "dispatch", "--level", "5 tickets"], "has no level '5 tickets'"),
        (["calibrate", "dispatch", "--budget", "huge"], "budget must be fast or full"),
        (["calibrate", "dispatch", "--dtype", "int8"], "dtype must be one of float32, bfloat16, float16"),
    ],
)
def test_bad_arguments_are_specific_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.slow
def test_the_command_plays_a_real_model(tmp_path: Path) -> None:
    """SmolLM2 on two hidden-eval draws of calc_chain's ``fast`` (no declared levels: the current one)."""
    out = tmp_path / "cal.json"
    args = ["calibrate", "calc_chain", "--budget", "fast", "--models", "smollm2-135m", "--limit", "2"]
    result = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["dtype"] == "float32"  # the fast eval's, which the command names when not told
    (level,) = report["levels"]
    assert (level["label"], level["current"], level["eval_max_turns"]) == ("current", True, 4)
    (score,) = level["scores"]
    assert score["model"] == "smollm2-135m" and score["n"] == 2 and score["seconds"] > 0
    assert score["score"] in (0.0, 0.5, 1.0) and score["ci95"][0] <= score["score"] <= score["ci95"][1]
    in_band = CALIBRATION_BAND[0] <= score["score"] <= CALIBRATION_BAND[1]
    assert report["chosen"] == ("current" if in_band else None)


def test_band_note_places_a_score_against_the_band() -> None:
    from metatrain.conformance.calibration import band_note

    low, high = CALIBRATION_BAND
    assert [band_note(x) for x in (0.0, low, 0.3, high, high + 0.01)] == [
        "below band",
        "in band",
        "in band",
        "in band",
        "above band",
    ]


def test_families_lists_where_each_best_untrained_score_lies(monkeypatch: pytest.MonkeyPatch) -> None:
    import metatrain.cli.families as cmd
    from metatrain.baselines import load_baselines
    from metatrain.conformance.calibration import band_note

    monkeypatch.setattr(cmd, "console", Console(width=300))
    result = CliRunner().invoke(app, ["families"])
    assert result.exit_code == 0, result.output
    for name in FAMILIES:
        family = load_plugins().task_family(name)
        allowed = list(family.task_spec("full").bounds.models)
        scores = {
            m: e.score for m, e in load_baselines(family, "full", allowed).models.items() if m in allowed
        }
        best = max(scores.values())
        (row,) = [line for line in result.output.splitlines() if f" {name} " in line]
        assert f"{best:.3f}" in row and band_note(best) in row, row
        if list(scores.values()).count(best) == len(allowed):
            assert "every model" in row


def test_the_level_table_marks_the_current_level_once() -> None:
    from metatrain.cli.calibrate_cmd import level_table

    console = Console(width=200, record=True)
    current = _level("current", 0.1).model_copy(update={"current": True})
    named = _level("2 tickets", 0.1).model_copy(update={"current": True})
    console.print(level_table([current, named, _level("other", 0.9)], ["a", "b"]))
    text = console.export_text()
    assert "current (current)" not in text and "2 tickets (current)" in text
    assert text.count("yes") == 2 and "0.900 [0.000, 1.000] n=10" in text
