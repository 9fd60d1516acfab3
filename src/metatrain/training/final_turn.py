"""TRL's GRPOTrainer with the hidden eval's final-answer turn (``EvalInterface.final_answer_turn``).

Why: on an H200, calc_chain training rollouts spent every tool-calling iteration and never wrote
``<answer>``, so the correctness reward stayed 0, while the eval (which asks for the final answer in
a user message before its last turn) scored 0.10 before training. With ``final_answer_turn``, the
last loop iteration's tool-result suffix also carries ``user: FINAL_ANSWER_PROMPT`` (masked 0 like
tool results), and the completion messages get that user message too, as in the eval's message list.

This overrides private methods of TRL 1.16 (``_tool_call_loop``, ``_generate_single_turn``,
``_get_tool_suffix_ids``); tests/test_final_turn.py pins the behaviour. Import it only where TRL is
installed. Unlike the eval, the final turn keeps the tool list in the (already tokenized) prompt.
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

from metatrain.training.rollout import FINAL_ANSWER_PROMPT


class FinalTurnGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """GRPOTrainer whose last tool-loop generation is the eval's final-answer turn."""

    final_answer_turn: bool = False
    _tool_round: int | None = None  # generations made so far by the running tool loop; None outside it
    _final_anchors: list[dict[str, Any]] | None = None  # last tool message before each final turn

    def __init__(self, *args: Any, final_answer_turn: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.final_answer_turn = final_answer_turn

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
