"""TRL's GRPOTrainer with the hidden eval's final-answer turn (``EvalInterface.final_answer_turn``).

Why: on an H200, calc_chain training rollouts spent every tool-calling iteration and never wrote
``<answer>``, so the correctness reward stayed 0, while the eval (which asks for the final answer in
a user message before its last turn) scored 0.10 before training. With ``final_answer_turn``, the
last loop iteration's tool-result suffix also carries ``user: FINAL_ANSWER_PROMPT`` (masked 0 like
tool results), and the completion messages get that user message too, as in the eval's message list.

With ``turn_max_tokens`` (the eval's per-turn cap, ``EvalInterface.max_tokens``), every generation
of the tool loop is capped at that many new tokens, as the eval caps each turn; ``max_completion_length``
still caps the rollout's turns together. Why: TRL gives each generation the whole rollout budget, so
one rambling rollout made every tool round of its batch decode the full budget; on an H200 a
512-token calc_chain job took 145-160 s for its first step where the eval lets a turn run 64 tokens.

This overrides private methods of TRL 1.16 (``_tool_call_loop``, ``_generate_single_turn``,
``_get_tool_suffix_ids``); tests/test_final_turn.py pins the behaviour. Import it only where TRL is
installed. Unlike the eval, the final turn keeps the tool list in the (already tokenized) prompt.
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

from metatrain.training.rollout import FINAL_ANSWER_PROMPT, turn_token_cap


class FinalTurnGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """GRPOTrainer whose turns play as the eval's: its per-turn token cap and its final-answer turn."""

    final_answer_turn: bool = False
    _tool_round: int | None = None  # generations made so far by the running tool loop; None outside it
    _final_anchors: list[dict[str, Any]] | None = None  # last tool message before each final turn

    def __init__(
        self, *args: Any, final_answer_turn: bool = False, turn_max_tokens: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.final_answer_turn = final_answer_turn
        self.cap_turns(turn_max_tokens)

    def cap_turns(self, turn_max_tokens: int | None) -> None:
        """Cap each generation at ``turn_max_tokens`` new tokens (never above the rollout budget)."""
        if turn_max_tokens is None:
            return
        if self.use_vllm:  # TRL's vLLM path sizes generations elsewhere; metatrain's TRL jobs never use it
            raise ValueError("turn_max_tokens needs TRL's transformers generation (use_vllm=False)")
        budget = self.max_completion_length
        cap = turn_max_tokens if budget is None else turn_token_cap(budget, turn_max_tokens)
        self.generation_config.max_new_tokens = cap
        self.generation_kwargs["max_new_tokens"] = cap

    def _tool_call_loop(self, *args: Any, **kwargs: Any) -> Any:
        self._tool_round = 0
        self._final_anchors = []
        try:
            out = super()._tool_call_loop(*args, **kwargs)
            anchors = self._final_anchors
        finally:
            self._tool_round = None
            self._final_anchors = None
        completions = out[1]
        for messages in completions:
            # Rollouts that got the final prompt still hold its anchor (rolled-back ones do not): the
            # prompt goes right after that round's tool results, i.e. before the final assistant turn.
            at = next((j for j, m in enumerate(messages) if any(m is a for a in anchors)), None)
            if at is not None:
                messages.insert(at + 1, {"role": "user", "content": FINAL_ANSWER_PROMPT})
        return out

    def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._generate_single_turn(*args, **kwargs)
        if self._tool_round is not None:
            self._tool_round += 1
        return out

    def _get_tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> Any:
        if (
            self.final_answer_turn
            and self._tool_round is not None
            and self._tool_round == self.max_tool_calling_iterations - 1
        ):
            if self._final_anchors is not None:
                self._final_anchors.append(tool_messages[-1])
            tool_messages = [*tool_messages, {"role": "user", "content": FINAL_ANSWER_PROMPT}]
        return super()._get_tool_suffix_ids(tool_messages)
