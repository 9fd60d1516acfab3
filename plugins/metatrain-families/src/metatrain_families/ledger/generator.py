"""ledger's example generator: hidden opening balances, a list of instructions, one question.

The reference environment (reference_env.py.tmpl) mirrors this code call for call, so its training
set follows exactly this distribution (a test checks that both produce the same prompts).
"""

from __future__ import annotations

import copy
import random
from typing import Any

import attrs

from metatrain.specs import Example
from metatrain_families.ledger.tools import TOOLS

NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "wendy", "zoe",
)  # fmt: skip
RULE = (
    "Rule: a withdrawal or transfer that would take an account below zero is refused (the tool "
    "returns an error) and changes nothing; carry on with the next instruction."
)
QUESTIONS = {
    "balance": "What is the final balance of {account}?",
    "total": "What is the total balance across all accounts at the end (including any newly opened account)?",
}
"""Every question's answer is an integer that needs balances only the tools know."""
CLOSING = (
    "After the last instruction, reply with the answer, a whole number, inside <answer></answer> tags. "
    "Start now: call the tool for instruction 1."
)
"""The prompt's last lines ask for the first tool call and give the answer format without a
placeholder: with ``Reply with <answer>N</answer>.`` last, Qwen2.5-Coder copied the placeholder or
made up a number instead of calling a tool (docs/families.md, calibration)."""
BY_NAME = {fn.__name__: fn for fn in TOOLS}


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_existing: int
    n_steps: int
    balance: tuple[int, int]
    amount: tuple[int, int]
    refuse_p: float
    open_p: float
    questions: tuple[str, ...]

    @property
    def needed_calls(self) -> int:
        """Tool calls a competent solver needs at most: every instruction, then the balances it reads
        (a "total" reads every account, a newly opened one included; a "balance" reads one)."""
        accounts = self.n_existing + (1 if self.open_p > 0 else 0)
        reads = accounts if "total" in self.questions else 1 if "balance" in self.questions else 0
        return self.n_steps + reads


def _debit_amount(rng: random.Random, d: Difficulty, held: int) -> int:
    if rng.random() < d.refuse_p or held < d.amount[0]:
        return held + rng.randint(1, 30)
    return rng.randint(d.amount[0], min(d.amount[1], held))


def _held(state: dict[str, Any], name: str) -> int:
    return int(next(r["balance"] for r in state["accounts"] if r["name"] == name))


def _step(
    rng: random.Random, d: Difficulty, state: dict[str, Any], at_open: bool, credit_new: bool, new: str
) -> dict[str, Any]:
    names = [r["name"] for r in state["accounts"]]
    args: dict[str, Any]
    if at_open:
        op, args = "open_account", {"account": new}
    elif credit_new:
        if rng.random() < 0.5:
            op, args = "deposit", {"account": new, "amount": rng.randint(*d.amount)}
        else:
            src = rng.choice([n for n in names if n != new])
            op = "transfer"
            args = {
                "from_account": src,
                "to_account": new,
                "amount": _debit_amount(rng, d, _held(state, src)),
            }
    else:
        op = rng.choices(["deposit", "withdraw", "transfer"], weights=[1.0, 1.0, 1.2])[0]
        if op == "deposit":
            args = {"account": rng.choice(names), "amount": rng.randint(*d.amount)}
        elif op == "withdraw":
            name = rng.choice(names)
            args = {"account": name, "amount": _debit_amount(rng, d, _held(state, name))}
        else:
            src, dst = rng.sample(names, 2)
            args = {
                "from_account": src,
                "to_account": dst,
                "amount": _debit_amount(rng, d, _held(state, src)),
            }
    try:
        result: int | None = BY_NAME[op](state, **args)
        refused = False
    except ValueError:
        result, refused = None, True
    return {
        "op": op,
        "account": args.get("account", args.get("from_account", "")),
        "to": args.get("to_account", ""),
        "amount": args.get("amount", 0),
        "result": result,
        "refused": refused,
    }


def _instruction(step: dict[str, Any]) -> str:
    op, account, amount = step["op"], step["account"], step["amount"]
    if op == "open_account":
        return f"Open a new account named {account}."
    if op == "deposit":
        return f"Deposit {amount} into {account}."
    if op == "withdraw":
        return f"Withdraw {amount} from {account}."
    return f"Transfer {amount} from {account} to {step['to']}."


def _question(
    rng: random.Random, kind: str, world: dict[str, Any], state: dict[str, Any]
) -> tuple[dict[str, str], str] | None:
    """The question of ``kind`` and its answer, or None when this draw cannot ask it."""
    start = {r["name"]: r["balance"] for r in world["accounts"]}
    final = {r["name"]: r["balance"] for r in state["accounts"]}
    if kind == "balance":
        changed = [n for n, b in final.items() if b != start.get(n, 0)]
        if not changed:
            return None
        name = rng.choice(changed)
        return {"kind": kind, "account": name}, str(final[name])
    if kind == "total":
        return {"kind": kind, "account": ""}, str(sum(final.values()))
    raise ValueError(f"unknown question kind {kind!r}")


def generate_example(rng: random.Random, d: Difficulty, example_id: str) -> Example:
    """One example: its world (hidden opening balances), instructions in the prompt, and the answer."""
    kind = rng.choice(d.questions)
    while True:
        names = rng.sample(NAMES, d.n_existing + 1)
        existing, new = names[:-1], names[-1]
        world = {"accounts": [{"name": n, "balance": rng.randint(*d.balance)} for n in existing]}
        state = copy.deepcopy(world)
        open_at = rng.randint(0, d.n_steps - 2) if rng.random() < d.open_p else -1
        steps: list[dict[str, Any]] = []
        for i in range(d.n_steps):
            credited = any(s["to"] == new or (s["account"] == new and s["op"] == "deposit") for s in steps)
            credit_new = 0 <= open_at < i and not credited
            steps.append(_step(rng, d, state, i == open_at, credit_new, new))
        asked = _question(rng, kind, world, state)
        if asked is not None:
            break
    question, answer = asked
    lines = "\n".join(f"{i + 1}. {_instruction(s)}" for i, s in enumerate(steps))
    prompt = (
        f"Accounts on file: {', '.join(existing)} (their balances are known only to the bank's tools).\n"
        f"Question: {QUESTIONS[question['kind']].format(account=question['account'])}\n"
        f"Carry out these instructions in order, one tool call each:\n{lines}\n{RULE}\n{CLOSING}"
    )
    return Example(
        id=example_id,
        prompt=prompt,
        answer=answer,
        info={"world": world, "steps": steps, "question": question},
    )
