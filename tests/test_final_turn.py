"""Training rollouts play the eval's final-answer turn (``training.final_turn``; no model weights).

These tests pin the private TRL 1.16 methods that ``FinalTurnGRPOTrainer`` overrides: when TRL
changes ``_tool_call_loop``, ``_generate_single_turn`` or ``_get_tool_suffix_ids``, they fail.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tiny_tokenizer import save_tiny_model, tiny_tokenizer

import metatrain
from metatrain.jobs.bundle import load_bundle, make_bundle
from metatrain.specs import BundleManifest, JobFile, TaskSpec
from metatrain.training.dialect import install_parser
from metatrain.training.rollout import FINAL_ANSWER_PROMPT, start_turn

trl = pytest.importorskip("trl")
from trl import GRPOTrainer  # noqa: E402

from metatrain.training.final_turn import FinalTurnGRPOTrainer  # noqa: E402

MODELS = {"chatml": "smollm2-135m", "gemma": "gemma3-270m"}
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
ANSWER = "<answer>3</answer>"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def _tokenizer(style: str) -> Any:
    """The embedded model's own tokenizer when it is prepared, else a tiny one with its template."""
    from transformers import AutoTokenizer

    from metatrain.models import model_status

    status = model_status(MODELS[style])
    tok = AutoTokenizer.from_pretrained(status.path) if status.prepared else tiny_tokenizer(style)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return install_parser(tok)


@pytest.fixture(scope="module", params=["chatml", "gemma"])
def tok(request: pytest.FixtureRequest) -> Any:
    return _tokenizer(request.param)


def _trainer(tok: Any, final_answer_turn: bool = True, max_iter: int = 2) -> Any:
    """A FinalTurnGRPOTrainer with just the state ``_tool_call_loop`` reads (no model, no __init__)."""
    t: Any = object.__new__(FinalTurnGRPOTrainer)
    t.final_answer_turn = final_answer_turn
    t.processing_class = t._tokenizer = tok
    t._is_vlm = False
    t.chat_template = None
    t.chat_template_kwargs = {}
    t.max_tool_calling_iterations = max_iter
    t.use_vllm = False
    t.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8192))
    t.tools = [add]
    t.environment_factories = None
    t.max_completion_length = 2048
    return t


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False).input_ids)


def _end(tok: Any) -> str:
    """The end-of-turn token the model generates."""
    return "<|im_end|>" if "im_start" in tok.chat_template else "<end_of_turn>"


TOOL_MSGS = [{"role": "tool", "name": "add", "content": "3"}]
CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "What is 1+2?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}],
    },
    *TOOL_MSGS,
]


# ----- (a) the suffix is the eval's own rendering ---------------------------------------------------


def test_final_round_suffix_is_the_tail_of_the_eval_rendering(tok: Any) -> None:
    t = _trainer(tok)
    t._tool_round = 1  # the last of 2 iterations
    suffix = tok.decode(t._get_tool_suffix_ids(list(TOOL_MSGS)))
    eval_msgs = [dict(m) for m in CONVERSATION]
    assert start_turn(True, 3 - 1, 3, eval_msgs)  # the eval's final turn with max_turns = 3
    rendered = tok.apply_chat_template(eval_msgs, tools=None, add_generation_prompt=True, tokenize=False)
    assert suffix.count(FINAL_ANSWER_PROMPT) == 1
    assert rendered.endswith(suffix) and suffix.index("3") < suffix.index(FINAL_ANSWER_PROMPT)


def test_earlier_rounds_and_the_switch_off_add_no_prompt(tok: Any) -> None:
    stock = GRPOTrainer._get_tool_suffix_ids(_trainer(tok), list(TOOL_MSGS))
    assert FINAL_ANSWER_PROMPT not in tok.decode(stock)
    for final_answer_turn, round_ in ((True, 0), (True, None), (False, 1)):
        t = _trainer(tok, final_answer_turn=final_answer_turn)
        t._tool_round = round_
        assert t._get_tool_suffix_ids(list(TOOL_MSGS)) == stock


# ----- (b) a scripted tool loop -----------------------------------------------------------------


def _script(tok: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace generation: "keep" rollouts call ``add`` until asked for the answer; "stop" ones answer.

    Returns a list that gets the batch size of every generation call.
    """
    calls: list[int] = []
    end = _end(tok)

    def generate(
        self: Any, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: int, **kw: Any
    ) -> Any:
        calls.append(len(prompt_ids))
        out = []
        for ids in prompt_ids:
            text = tok.decode(ids)
            answer = FINAL_ANSWER_PROMPT in text or "stop" in text
            out.append(_ids(tok, (ANSWER if answer else CALL) + end))
        return out, None

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", generate)
    return calls


def _run_loop(tok: Any, final_answer_turn: bool, questions: list[str]) -> tuple[Any, ...]:
    t = _trainer(tok, final_answer_turn=final_answer_turn)
    prompts = [[{"role": "user", "content": q}] for q in questions]
    prompt_ids = [
        list(
            tok.apply_chat_template(
                p, tools=[add], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for p in prompts
    ]
    first = _ids(tok, CALL + _end(tok))
    completion_ids = [list(first) for _ in questions]
    completions = [[tok.parse_response(first)] for _ in questions]
    t._sync_tool_dicts = [{"add": add} for _ in questions]
    t._async_tool_dicts = [{} for _ in questions]
    out = t._tool_call_loop(prompts, prompt_ids, completion_ids, completions, None, None, {})
    assert t._tool_round is None and t._final_anchors is None  # reset after the loop
    return t, prompts, out


@pytest.mark.parametrize("final_answer_turn", [True, False])
def test_scripted_loop_plays_the_final_answer_turn(
    tok: Any, monkeypatch: pytest.MonkeyPatch, final_answer_turn: bool
) -> None:
    calls = _script(tok, monkeypatch)
    t, _, out = _run_loop(tok, final_answer_turn, ["keep: what is 1+2?", "stop: what is 1+2?"])
    tool_mask, completions, completion_ids, logprobs, n_calls, n_failures, _ = out
    assert calls == [2, 1]  # two generations inside the loop; only the "keep" rollout reaches the last
    assert n_failures == 0 and logprobs is None

    # the exact token stream: c0 + s0 + g1 + s1 + g2, suffixes masked 0, generations masked 1
    end = _end(tok)
    c0 = g1 = _ids(tok, CALL + end)
    s0 = GRPOTrainer._get_tool_suffix_ids(t, list(TOOL_MSGS))
    t._tool_round = 1
    s1 = t._get_tool_suffix_ids(list(TOOL_MSGS))
    g2 = _ids(tok, (ANSWER if final_answer_turn else CALL) + end)
    assert completion_ids[0] == c0 + s0 + g1 + s1 + g2
    assert tool_mask[0] == [1] * len(c0) + [0] * len(s0) + [1] * len(g1) + [0] * len(s1) + [1] * len(g2)
    assert FINAL_ANSWER_PROMPT not in tok.decode(s0)
    text = tok.decode(completion_ids[0])
    assert text.count(FINAL_ANSWER_PROMPT) == (1 if final_answer_turn else 0)

    roles = [m["role"] for m in completions[0]]
    if final_answer_turn:
        assert s1 != s0 and FINAL_ANSWER_PROMPT in tok.decode(s1)
        assert roles == ["assistant", "tool", "assistant", "tool", "user", "assistant"]
        assert completions[0][-2] == {"role": "user", "content": FINAL_ANSWER_PROMPT}
        assert ANSWER in completions[0][-1]["content"] and not completions[0][-1].get("tool_calls")
        assert n_calls == 3  # keep: 2 rounds, stop: 1 round
    else:  # stock TRL: the last turn is another tool call that never runs, and no answer
        assert s1 == s0
        assert roles == ["assistant", "tool", "assistant", "tool", "assistant"]
        assert completions[0][-1].get("tool_calls") and ANSWER not in text
        assert n_calls == 3

    # the rollout that answered early never sees the prompt
    stop_text = tok.decode(completion_ids[1])
    assert FINAL_ANSWER_PROMPT not in stop_text and stop_text.endswith(ANSWER + end)
    assert [m["role"] for m in completions[1]] == ["assistant", "tool", "assistant"]
    assert completion_ids[1] == c0 + s0 + _ids(tok, ANSWER + end)
    assert tool_mask[1] == [1] * len(c0) + [0] * len(s0) + [1] * len(_ids(tok, ANSWER + end))


def test_scripted_completion_messages_match_the_eval(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reward functions see the eval's message list: prompt, rounds, final prompt, answer."""
    _script(tok, monkeypatch)
    question = "keep: what is 1+2?"
    _, _, out = _run_loop(tok, True, [question])
    completions = out[1]
    eval_msgs: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for turn in range(3):  # max_turns = 3 = max_tool_calling_iterations + 1
        final = start_turn(True, turn, 3, eval_msgs)
        eval_msgs.append(
            {"role": "assistant", "content": ANSWER} if final else tok.parse_response(_ids(tok, CALL))
        )
        if not final:
            eval_msgs.append({"role": "tool", "name": "add", "content": "3"})
    got = [{"role": "user", "content": question}, *completions[0]]
    assert [(m["role"], m.get("content")) for m in got] == [(m["role"], m.get("content")) for m in eval_msgs]


def test_a_rolled_back_final_round_gets_no_prompt(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollout whose final-round suffix would pass the budget leaves as in stock TRL, unprompted."""
    calls = _script(tok, monkeypatch)
    t = _trainer(tok)
    first = _ids(tok, CALL + _end(tok))
    s0 = GRPOTrainer._get_tool_suffix_ids(t, list(TOOL_MSGS))
    t.max_completion_length = 2 * len(first) + len(s0) + 1  # room for round 0, not for the final suffix
    prompt = [{"role": "user", "content": "keep"}]
    pids = list(tok.apply_chat_template(prompt, tools=[add], add_generation_prompt=True, return_dict=False))
    t._sync_tool_dicts, t._async_tool_dicts = [{"add": add}], [{}]
    out = t._tool_call_loop([prompt], [pids], [list(first)], [[tok.parse_response(first)]], None, None, {})
    tool_mask, completions, completion_ids = out[:3]
    assert calls == [1]
    assert [m["role"] for m in completions[0]] == ["assistant", "tool", "assistant"]
    assert FINAL_ANSWER_PROMPT not in tok.decode(completion_ids[0])
    assert len(tool_mask[0]) == len(completion_ids[0])


# ----- (c) the flag travels in the bundle manifest ----------------------------------------------


def _job() -> JobFile:
    return JobFile.model_validate(
        {
            "family": "calc_chain",
            "train": {
                "model": "smollm2-135m",
                "max_steps": 1,
                "rollouts_per_example": 2,
                "batch_size": 1,
                "max_tokens": 64,
                "lr": 1e-5,
            },
        }
    )


def test_old_manifests_default_to_no_final_answer_turn_and_no_turn_cap() -> None:
    manifest = BundleManifest(
        job_id="j",
        run_id="r",
        family="calc_chain",
        family_version="test",
        budget="fast",
        eval_n=8,
        job=_job(),
        files={},
        created_at=datetime.now().astimezone(),
        metatrain_version=metatrain.__version__,
    )
    old = json.loads(manifest.model_dump_json())
    del old["final_answer_turn"], old["turn_max_tokens"]
    parsed = BundleManifest.model_validate(old)
    assert parsed.final_answer_turn is False
    assert parsed.turn_max_tokens is None  # older bundles: TRL's own per-generation budget


@pytest.mark.parametrize("final_answer_turn", [True, False])
def test_bundles_carry_the_specs_final_answer_turn(
    fast_spec: TaskSpec, tmp_path: Path, final_answer_turn: bool
) -> None:
    spec = fast_spec.model_copy(
        update={"eval": fast_spec.eval.model_copy(update={"final_answer_turn": final_answer_turn})}
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "env.py").write_text("")
    bundle = make_bundle(tmp_path / "bundle", ws, _job(), spec, "j", "r")
    assert load_bundle(bundle).final_answer_turn is final_answer_turn
    assert load_bundle(bundle).turn_max_tokens == spec.eval.max_tokens


# ----- (c) the eval's per-turn token cap, on a real (tiny, random) model -----------------------


@pytest.mark.parametrize("turn_max_tokens", [None, 6, 500])
def test_each_generation_is_capped_at_the_evals_turn_tokens(
    tmp_path: Path, turn_max_tokens: int | None
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig

    tok = tiny_tokenizer("chatml")
    model_dir = save_tiny_model(tmp_path / "model", tok)
    prompt = [{"role": "user", "content": "what is 1+2?"}]
    trainer = FinalTurnGRPOTrainer(
        model=str(model_dir),
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        args=GRPOConfig(
            output_dir=str(tmp_path / "trl"),
            max_completion_length=40,
            num_generations=2,
            per_device_train_batch_size=2,
            use_cpu=True,
            bf16=False,
            report_to=[],
            seed=0,
        ),
        train_dataset=Dataset.from_list([{"prompt": prompt}] * 2),
        processing_class=tok,
        turn_max_tokens=turn_max_tokens,
    )
    ids = list(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
    completion_ids = trainer._generate_single_turn([ids, ids], None, {}, 2)[0]
    lengths = [len(c) for c in completion_ids]
    cap = 40 if turn_max_tokens is None else min(40, turn_max_tokens)
    assert trainer.generation_config.max_new_tokens == cap
    assert max(lengths) <= cap
    assert max(lengths) > 6 or turn_max_tokens == 6  # the random model runs on: the cap is what stops it


def test_turn_cap_refuses_trls_vllm_path() -> None:
    t: Any = object.__new__(FinalTurnGRPOTrainer)
    t.use_vllm = True
    t.cap_turns(None)  # nothing to cap: fine on any path
    with pytest.raises(ValueError, match="use_vllm=False"):
        t.cap_turns(64)
