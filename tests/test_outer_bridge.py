"""The outer loop: bridge hand-off, waits, cancellation, hangs and crashes, datums, resume, a local run.

No real model is loaded: prompts use a byte-level tokenizer with the project's ChatML template, and
the local-trainer runs use a tiny random Llama built in a temp directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tinker
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages, trajectory_to_data
from tinker_cookbook.rl.rollouts import do_single_rollout
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition
from tiny_tokenizer import save_tiny_model, tiny_tokenizer

from metatrain.episode.tools import AGENT_TOOL_SCHEMAS
from metatrain.outer.bridge import EpisodeEnv, EpisodeOutcome, Observed, fallback_reward
from metatrain.outer.config import EpisodeSettings, OuterConfig
from metatrain.outer.dataset import EpisodeGroupBuilder, holdout_dataset, training_dataset
from metatrain.outer.prompts import ChatTemplateCodec
from metatrain.outer.store import EpisodeLog, PersistingRollouts, read_episode_log
from metatrain.protocols import Policy, ProgressFn, RewardInputs
from metatrain.specs import CostSummary, EpisodeResult, JobSummary, ValidationSummary
from metatrain_reward import DefaultReward

TESTS = Path(__file__).parent
SCHEME = DefaultReward()
SYSTEM = {"role": "system", "content": "You write RL jobs."}
USER = {"role": "user", "content": "Your task is in TASK.md."}
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "TASK.md"}}\n</tool_call>'


TOK = tiny_tokenizer("chatml")
CODEC = ChatTemplateCodec(TOK)
IM_END = TOK.convert_tokens_to_ids("<|im_end|>")


def tiny_codec(model_name: str, renderer: str | None) -> ChatTemplateCodec:
    return CODEC


def action(text: str, end: bool = True) -> list[int]:
    return [*TOK.encode(text, add_special_tokens=False), *([IM_END] if end else [])]


def make_result(
    reward: Any, turns: int, run_dir: str = "/nonexistent", model: str | None = None
) -> EpisodeResult:
    return EpisodeResult(
        run_id="r",
        family="calc_chain",
        family_version="1",
        budget="fast",
        agent="outer-bridge",
        provider="test",
        model=model,
        validation=ValidationSummary(attempts=reward.attempts, valid=reward.validation > 0),
        job=JobSummary(status="succeeded" if reward.outcome == "succeeded" else "not_run"),
        reward=reward,
        cost=CostSummary(),
        turns=turns,
        wall_seconds=0.0,
        run_dir=run_dir,
    )


def loop_like(
    policy: Policy, progress: ProgressFn, turns: int, job_seconds: float, crash: bool, seen: list[Any]
) -> EpisodeResult:
    """What run_episode does with a policy: turns with tool results, validation, a job, a reward."""
    messages: list[dict[str, Any]] = [dict(SYSTEM), dict(USER)]
    for i in range(turns):
        turn = policy.next_turn(list(messages), AGENT_TOOL_SCHEMAS)
        seen.append(turn)
        assistant: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.tool_calls:
            assistant["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls
            ]
        messages.append(assistant)
        for c in turn.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c.id, "name": c.name, "content": f"result {i}"})
        if not turn.tool_calls:
            messages.append({"role": "user", "content": "You did not call a tool."})
    valid = any(c.name == "submit_job" for t in seen for c in t.tool_calls)
    progress("validation", {"attempt": 1, "ok": valid})
    time.sleep(job_seconds)
    if crash:
        raise RuntimeError("the provider exploded")
    reward = SCHEME.compute(
        RewardInputs(
            any_parseable=valid,
            attempts=1 if valid else 0,
            valid=valid,
            job_status="succeeded" if valid else None,
            post=0.5 if valid else None,
            best_pre=0.4,
            train_seconds=90.0,
            budget="fast",
        )
    )
    return make_result(reward, turns, model="smollm2-135m" if valid else None)


def episode_fn(
    turns: int = 2, job_seconds: float = 0.0, crash: bool = False, record: list[Any] | None = None
):
    def run(policy: Policy, progress: ProgressFn) -> EpisodeResult:
        return loop_like(policy, progress, turns, job_seconds, crash, record if record is not None else [])

    return run


def env_for(fn: Any, key: str = "e0", timeout: float = 30.0, on_end: Any = None) -> EpisodeEnv:
    return EpisodeEnv(key, fn, CODEC, SCHEME, "fast", timeout, on_end, models=("smollm2-135m", "gemma3-270m"))


class Scripted(TokenCompleter):
    """A TokenCompleter that answers from a script, with made-up logprobs (-0.5 per token)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)
        self.prompts: list[list[int]] = []

    async def __call__(self, model_input: tinker.ModelInput, stop: Any, *, max_tokens: int | None = None):
        self.prompts.append(model_input.to_ints())
        tokens = action(self.texts.pop(0))
        return TokensWithLogprobs(tokens, [-0.5] * len(tokens), "stop")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------------------------------------
# hand-off and rendering
# ---------------------------------------------------------------------------------------------


def test_turns_are_handed_off_one_by_one_and_the_reward_comes_at_the_end() -> None:
    seen: list[Any] = []
    submit = '<tool_call>\n{"name": "submit_job", "arguments": {}}\n</tool_call>'

    async def main() -> None:
        env = env_for(episode_fn(turns=2, record=seen))
        first_ob = await env.initial_observation()
        assert isinstance(first_ob, tuple)
        ob, stop = first_ob
        assert ob.to_ints() == CODEC.first_prompt([SYSTEM, USER], AGENT_TOOL_SCHEMAS)
        assert stop == [IM_END]
        first = await env.step(action(CALL))
        assert not first.episode_done and first.reward == 0.0
        assert [c.name for c in seen[0].tool_calls] == ["read_file"]
        assert json.loads(seen[0].tool_calls[0].arguments) == {"path": "TASK.md"}
        text = TOK.decode(first.next_observation.to_ints()[len(ob.to_ints()) :])
        assert text.startswith(
            CALL + "<|im_end|>\n<|im_start|>user\n<tool_response>\nresult 0\n</tool_response>"
        )
        assert text.endswith("<|im_start|>assistant\n")
        last = await env.step(action(submit))
        assert last.episode_done
        assert last.reward == pytest.approx(0.35 + 0.60 * (0.25 * 0.5 + 0.75 * 0.5) + 0.05 * 0.9)
        assert last.metrics["valid"] == 1.0 and last.metrics["model/smollm2-135m"] == 1.0
        assert last.metrics["model/gemma3-270m"] == 0.0 and last.metrics["episode/crashed"] == 0.0

    run(main())


def test_observations_extend_each_other_so_an_episode_is_one_datum() -> None:
    texts = [CALL, "thinking without a tool", CALL]

    async def main() -> Trajectory:
        env = env_for(episode_fn(turns=3))
        return await do_single_rollout(Scripted(texts), env)

    traj = run(main())
    assert len(traj.transitions) == 3
    for prev, nxt in zip(traj.transitions, traj.transitions[1:], strict=False):
        extended = prev.ob.to_ints() + prev.ac.tokens
        assert nxt.ob.to_ints()[: len(extended)] == extended
    (datum,) = trajectory_to_data(traj, traj_advantage=0.25)
    mask = datum.loss_fn_inputs["mask"].to_torch()
    assert int(mask.sum()) == sum(len(t.ac.tokens) for t in traj.transitions)
    # the unnudged text turn got the template's nudge as a user turn; the rendering matches the template
    full = traj.transitions[-1].ob.to_ints() + traj.transitions[-1].ac.tokens
    assert "You did not call a tool." in TOK.decode(full)


def test_a_truncated_turn_gets_its_end_of_turn_token_before_the_next_messages() -> None:
    async def main() -> None:
        env = env_for(episode_fn(turns=2))
        first_ob = await env.initial_observation()
        assert isinstance(first_ob, tuple)
        ob, _ = first_ob
        cut = action(CALL, end=False)
        res = await env.step(cut)
        tail = res.next_observation.to_ints()[len(ob.to_ints()) + len(cut) :]
        assert TOK.decode(tail).startswith("<|im_end|>\n<|im_start|>user")
        await env.step(action("done"))

    run(main())


# ---------------------------------------------------------------------------------------------
# waits, cancellation, hangs, crashes
# ---------------------------------------------------------------------------------------------


def test_a_slow_episode_does_not_block_the_others_or_the_event_loop() -> None:
    async def main() -> tuple[list[str], int]:
        order: list[str] = []
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        async def one(name: str, seconds: float) -> None:
            env = env_for(episode_fn(turns=1, job_seconds=seconds), key=name)
            await env.initial_observation()
            await env.step(action(CALL))
            order.append(name)

        tick = asyncio.create_task(ticker())
        await asyncio.gather(one("slow", 1.5), one("fast", 0.0), one("fast2", 0.1))
        tick.cancel()
        return order, ticks

    order, ticks = run(main())
    assert order[-1] == "slow" and set(order[:2]) == {"fast", "fast2"}
    assert ticks >= 15  # the loop kept running while the slow job held its thread


def test_cancelling_a_step_ends_the_episode_thread() -> None:
    async def main() -> EpisodeEnv:
        env = env_for(episode_fn(turns=3, job_seconds=0.0))
        await env.initial_observation()
        await env.step(action(CALL))
        step = asyncio.create_task(env.step(action(CALL)))
        await asyncio.sleep(0)  # the second turn is handed off; now the loop gives up on the episode
        step.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step
        return env

    env = run(main())
    assert env._thread is not None
    env._thread.join(timeout=5)
    assert not env._thread.is_alive()
    assert env.turns == 2


def test_a_hung_episode_is_scored_with_the_schemes_error_value() -> None:
    outcomes: list[EpisodeOutcome] = []

    async def main() -> Any:
        env = env_for(episode_fn(turns=1, job_seconds=3.0), timeout=0.4, on_end=outcomes.append)
        await env.initial_observation()
        return await env.step(action(CALL))

    t0 = time.monotonic()
    res = run(main())
    assert time.monotonic() - t0 < 2.5
    assert res.episode_done and res.reward == pytest.approx(-0.1)
    assert res.metrics["episode/hung"] == 1.0 and res.metrics["outcome/no_submission"] == 1.0
    assert outcomes[0].hung and outcomes[0].error == "hung"


def test_a_crash_after_a_valid_submission_keeps_the_validation_credit_and_is_logged(tmp_path: Path) -> None:
    log = EpisodeLog(tmp_path / "episodes.jsonl")
    submit = '<tool_call>\n{"name": "submit_job", "arguments": {}}\n</tool_call>'

    async def main() -> Any:
        env = env_for(episode_fn(turns=1, crash=True), on_end=log)
        await env.initial_observation()
        return await env.step(action(submit))

    res = run(main())
    assert res.episode_done and res.reward == pytest.approx(0.35)  # valid, then the job "died"
    assert res.metrics["episode/crashed"] == 1.0 and res.metrics["outcome/job_died"] == 1.0
    (record,) = read_episode_log(tmp_path / "episodes.jsonl")
    assert record["error"] == "RuntimeError: the provider exploded" and record["reward"]["total"] == 0.35


def test_a_crash_before_the_first_turn_still_yields_a_scored_trajectory() -> None:
    def broken(policy: Policy, progress: ProgressFn) -> EpisodeResult:
        raise FileNotFoundError("no baselines")

    traj = run(do_single_rollout(Scripted([]), env_for(broken)))
    assert [t.reward for t in traj.transitions] == [pytest.approx(-0.1)]
    assert trajectory_to_data(traj, 0.3) == []  # no tokens to train on, but it counts in the group mean


def test_fallback_reward_follows_the_scheme() -> None:
    assert fallback_reward(SCHEME, Observed(), "fast").total == pytest.approx(-0.1)
    after_valid = fallback_reward(SCHEME, Observed(attempts=2, valid=True), "fast")
    assert after_valid.outcome == "job_died" and after_valid.total == pytest.approx(0.35 * 0.75)


# ---------------------------------------------------------------------------------------------
# advantages and datums, against hand-computed values
# ---------------------------------------------------------------------------------------------


def _traj(ob: list[int], ac: list[int], lp: list[float], reward: float) -> Trajectory:
    t = Transition(tinker.ModelInput.from_ints(ob), TokensWithLogprobs(ac, lp), reward, True)
    return Trajectory([t], tinker.ModelInput.empty())


def test_group_centred_advantages_and_datum_fields_match_hand_computation() -> None:
    rewards = [0.6, -0.1, 0.35, 0.35]
    group = TrajectoryGroup([_traj([1, 2, 3], [4, 5], [-0.1, -0.2], r) for r in rewards], [0.0] * 4, [{}] * 4)
    (adv,) = compute_advantages([group])
    mean = sum(rewards) / 4  # 0.3
    assert adv.tolist() == pytest.approx([0.3, -0.4, 0.05, 0.05])
    assert mean == pytest.approx(0.3)
    data, meta = assemble_training_data([group], [adv])
    assert len(data) == 4 and [m["traj_idx"] for m in meta] == [0, 1, 2, 3]
    d = data[1]
    assert d.model_input.to_ints() == [1, 2, 3, 4]
    assert d.loss_fn_inputs["target_tokens"].to_torch().tolist() == [2, 3, 4, 5]
    assert d.loss_fn_inputs["mask"].to_torch().tolist() == [0.0, 0.0, 1.0, 1.0]
    assert d.loss_fn_inputs["advantages"].to_torch().tolist() == pytest.approx([0.0, 0.0, -0.4, -0.4])
    assert d.loss_fn_inputs["logprobs"].to_torch().tolist() == pytest.approx([0.0, 0.0, -0.1, -0.2])


# ---------------------------------------------------------------------------------------------
# dataset, builders, persistence
# ---------------------------------------------------------------------------------------------


def _config(tmp_path: Path, **kw: Any) -> OuterConfig:
    base: dict[str, Any] = {
        "log_dir": tmp_path,
        "families": ["calc_chain", "ledger"],
        "group_size": 3,
        "groups_per_batch": 2,
        "steps": 4,
    }
    return OuterConfig.model_validate(base | kw)


def test_dataset_keys_families_and_the_holdout_arm(tmp_path: Path) -> None:
    config = _config(tmp_path)
    ds = training_dataset(config)
    assert len(ds) == 4
    batch = [b for b in ds.get_batch(1) if isinstance(b, EpisodeGroupBuilder)]
    assert len(batch) == 2
    assert [b.key for b in batch] == ["b0001-g00", "b0001-g01"]
    assert [b.family for b in batch] == ["calc_chain", "ledger"]
    assert all(b.group_size == 3 and b.persist for b in batch)
    clone = pickle.loads(pickle.dumps(batch[0]))
    assert clone.key == "b0001-g00" and clone.settings == config.episode
    holdout = holdout_dataset(config)
    assert holdout is not None
    (arm,) = [b for b in holdout.get_batch(0) if isinstance(b, EpisodeGroupBuilder)]
    assert arm.family == "triage" and not arm.persist
    with pytest.raises(ValueError, match="held-out family"):
        _config(tmp_path, families=["calc_chain", "triage"])
    with pytest.raises(IndexError):
        ds.get_batch(4)


def scripted_factory(family: str, settings: EpisodeSettings, runs_root: Path, episode_id: str, seed: int):
    """Episodes for trainer runs: two turns; valid when the agent's first text has an even length.

    ``METATRAIN_TEST_MARKS`` (a directory) gets one file per episode run; ``METATRAIN_TEST_SLOW``
    (a key prefix) makes those episodes take 4 s in their "job".
    """
    marks = os.environ.get("METATRAIN_TEST_MARKS")
    slow = os.environ.get("METATRAIN_TEST_SLOW", "-")
    key = episode_id.rsplit("-", 1)[0]

    def run(policy: Policy, progress: ProgressFn) -> EpisodeResult:
        if marks:
            Path(marks, f"{key}.{os.getpid()}.{time.monotonic_ns()}").touch()
        turn = policy.next_turn([dict(SYSTEM), dict(USER)], AGENT_TOOL_SCHEMAS)
        valid = len(turn.content) % 2 == 0
        progress("validation", {"attempt": 1, "ok": valid})
        time.sleep(4.0 if key.startswith(slow) else 0.0)
        reward = SCHEME.compute(
            RewardInputs(
                valid, 1, valid, "succeeded" if valid else None, 0.4 if valid else None, 0.3, 60.0, "fast"
            )
        )
        return make_result(reward, 1, model="smollm2-135m" if valid else None)

    return run


def test_finished_episodes_are_served_after_a_restart_and_requeues_run_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("METATRAIN_TEST_MARKS", str(marks))
    settings = EpisodeSettings()
    builder = EpisodeGroupBuilder(
        "b0000-g00",
        "calc_chain",
        2,
        settings,
        str(tmp_path),
        "m",
        None,
        episode_factory=scripted_factory,
        codec_factory=tiny_codec,
    )
    strategy = PersistingRollouts(str(tmp_path / "trajectories"))
    first = run(strategy.execute(builder, Scripted(["ab", "abc"])))
    assert len(list(marks.iterdir())) == 2
    assert sorted(p.name for p in (tmp_path / "trajectories" / "b0000-g00").iterdir()) == ["0.pkl", "1.pkl"]
    again = run(strategy.execute(builder, Scripted(["x", "y"])))  # same process: a requeue runs afresh
    assert len(list(marks.iterdir())) == 4
    assert [t.transitions[0].ac.tokens for t in again.trajectories] != [
        t.transitions[0].ac.tokens for t in first.trajectories
    ]
    assert len(read_episode_log(tmp_path / "episodes.jsonl")) == 4


# ---------------------------------------------------------------------------------------------
# the local trainer: a real cookbook run on CPU with a tiny random model; kill -9 and resume
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-agent"), TOK)


TRAIN_SCRIPT = """
import sys
from metatrain.plugins import load_plugins
trainer = load_plugins().get("outer_trainers", "local")
trainer.train(dict(
    log_dir=sys.argv[1], agent_model=sys.argv[2], families=["calc_chain"], steps=int(sys.argv[3]),
    group_size=2, groups_per_batch=2, max_tokens=24, holdout_every=0, learning_rate=1e-3,
    max_steps_off_policy=int(sys.argv[4]), resume=sys.argv[5] == "1",
    episode_factory="test_outer_bridge:scripted_factory", device="cpu",
))
"""


def _train(
    log_dir: Path, model: Path, steps: int, off_policy: int, resume: bool, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-c",
        TRAIN_SCRIPT,
        str(log_dir),
        str(model),
        str(steps),
        str(off_policy),
        "1" if resume else "0",
    ]
    full_env = {**os.environ, "PYTHONPATH": str(TESTS), "HF_HUB_OFFLINE": "1", **env}
    out = (log_dir.parent / f"{log_dir.name}-{int(resume)}.log").open("wb")
    return subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT)


def _wait(proc: subprocess.Popen[bytes], log: Path, seconds: float = 150) -> None:
    try:
        rc = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert rc == 0, log.read_text()[-4000:]


def _metrics(log_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (log_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # two trainer processes: about 2 minutes and 65 s of CPU on a busy 2-core machine
def test_local_trainer_survives_kill_minus_nine_and_resumes_without_losing_episodes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A real cookbook run (local backend, tiny model, scripted episodes), killed mid-step, resumed."""
    log_dir = tmp_path / "run"
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"METATRAIN_TEST_MARKS": str(marks), "METATRAIN_TEST_SLOW": "b0001"}
    proc = _train(log_dir, tiny_model_dir, 3, 1, False, env)
    deadline = time.monotonic() + 200
    ckpt = log_dir / "checkpoints.jsonl"
    while time.monotonic() < deadline:  # kill while batch 1's slow episodes are in their "jobs"
        done = [json.loads(x).get("batch") for x in ckpt.read_text().splitlines()] if ckpt.is_file() else []
        if max(done, default=0) >= 1 and any(p.name.startswith("b0001") for p in marks.iterdir()):
            break
        assert proc.poll() is None, (tmp_path / "run-0.log").read_text(errors="ignore")[-4000:]
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = read_episode_log(log_dir / "episodes.jsonl")
    stored = [p for p in (log_dir / "trajectories").rglob("*.pkl")]
    assert before and stored
    proc = _train(log_dir, tiny_model_dir, 3, 1, True, env)
    _wait(proc, tmp_path / "run-1.log", 200)
    after = read_episode_log(log_dir / "episodes.jsonl")
    assert after[: len(before)] == before  # nothing finished before the kill was lost
    runs = [p.name.split(".")[0] for p in marks.iterdir()]
    for path in stored:  # an episode whose trajectory was stored did not run again after the restart
        assert runs.count(f"{path.parent.name}-e{path.stem}") == 1, path
    log = (tmp_path / "run-1.log").read_text(errors="ignore")
    assert "Resumed training from" in log
    ckpts = [json.loads(x) for x in ckpt.read_text().splitlines()]
    assert ckpts[-1]["name"] == "final" and ckpts[-1]["batch"] == 3
    steps = [m for m in _metrics(log_dir) if "env/all/reward/total" in m]
    assert steps and steps[-1]["step"] >= 1
    for m in steps:  # the cookbook's staleness bound, max_steps_off_policy=1
        assert m["step"] - m["sampling_client/step_min"] <= 1
        assert 0.0 <= m["env/all/valid"] <= 1.0 and "env/all/config_key/lr" in m
        assert m["env/all/reward/total"] == pytest.approx(m["env/all/episode/reward"])
    assert (log_dir / "outer-config.json").is_file()


def test_the_tinker_trainer_takes_the_key_out_of_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from metatrain_tinker import KEY_ENV, MissingKeyError, TinkerTrainer

    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(MissingKeyError, match=KEY_ENV):
        TinkerTrainer().train({"log_dir": tmp_path})
    secret = "tml-test-secret-0123456789"
    monkeypatch.setenv(KEY_ENV, secret)
    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake_client(**kw: Any) -> Any:
        seen["env_during_run"] = os.environ.get(KEY_ENV)
        seen["kw"] = kw
        raise Stop

    monkeypatch.setattr(tinker, "ServiceClient", fake_client)
    with pytest.raises(Stop):
        TinkerTrainer().train({"log_dir": tmp_path, "steps": 2})
    assert seen["env_during_run"] is None and seen["kw"]["api_key"] == secret
    assert os.environ[KEY_ENV] == secret  # restored for the caller afterwards
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="ignore"), path
    config = json.loads((tmp_path / "outer-config.json").read_text())
    assert config["agent_model"] == "Qwen/Qwen3.6-35B-A3B" and config["lora_rank"] == 8
    assert config["learning_rate"] == 4e-5 and config["group_size"] == 8
    assert config["loss_fn"] == "importance_sampling" and config["max_steps_off_policy"] == 2


def test_episodes_that_never_prompted_still_give_the_cookbook_a_masked_datum(tmp_path: Path) -> None:
    def broken(family: str, settings: EpisodeSettings, runs_root: Path, episode_id: str, seed: int):
        def run(policy: Policy, progress: ProgressFn) -> EpisodeResult:
            raise FileNotFoundError("no baselines")

        return run

    builder = EpisodeGroupBuilder(
        "b0000-g00",
        "calc_chain",
        2,
        EpisodeSettings(),
        str(tmp_path),
        "m",
        None,
        episode_factory=broken,
        codec_factory=tiny_codec,
    )
    result = run(PersistingRollouts(str(tmp_path / "t")).execute(builder, Scripted([])))
    group = TrajectoryGroup(result.trajectories, [0.0, 0.0], [{}, {}])
    assert group.get_total_rewards() == pytest.approx([-0.1, -0.1])
    data, _ = assemble_training_data([group], compute_advantages([group]))
    assert len(data) == 2 and all(d.loss_fn_inputs["mask"].to_torch().sum() == 0 for d in data)
