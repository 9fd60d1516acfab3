"""ledger's eval tools. Each takes the example's mutable ``world`` first (hidden from the model).

The world is ``{"accounts": [{"name": str, "balance": int}, ...]}`` (a list of records, so it
survives a datasets/Arrow round trip). Names are matched after stripping and lower-casing.
"""

from __future__ import annotations

from typing import Any


def _name(account: Any) -> str:
    name = str(account).strip().lower()
    if not name:
        raise ValueError("the account name is empty")
    return name


def _find(world: dict[str, Any], account: Any) -> dict[str, Any]:
    name = _name(account)
    for record in world["accounts"]:
        if record["name"] == name:
            return record
    known = ", ".join(r["name"] for r in world["accounts"]) or "none"
    raise ValueError(f"no account named {name!r}; open accounts: {known}")


def _amount(amount: Any) -> int:
    if isinstance(amount, bool):
        raise ValueError("amount must be a positive whole number")
    try:
        value = int(str(amount).strip())
    except ValueError:
        raise ValueError(f"amount must be a positive whole number, got {amount!r}") from None
    if value <= 0:
        raise ValueError(f"amount must be a positive whole number, got {value}")
    return value


def _take(record: dict[str, Any], value: int, verb: str) -> None:
    if value > record["balance"]:
        raise ValueError(
            f"refused: account {record['name']!r} holds {record['balance']}, cannot {verb} {value} "
            "(it would overdraw); nothing changed"
        )
    record["balance"] -= value


def open_account(world: dict[str, Any], account: str) -> int:
    """Open a new, empty account.

    Args:
        account: The name of the new account.

    Returns:
        The new account's balance (always 0).
    """
    name = _name(account)
    if any(r["name"] == name for r in world["accounts"]):
        raise ValueError(f"account {name!r} already exists")
    world["accounts"].append({"name": name, "balance": 0})
    return 0


def deposit(world: dict[str, Any], account: str, amount: int) -> int:
    """Deposit money into an account.

    Args:
        account: The account to credit.
        amount: How much to deposit (a positive whole number).

    Returns:
        The account's new balance.
    """
    record = _find(world, account)
    record["balance"] += _amount(amount)
    return int(record["balance"])


def withdraw(world: dict[str, Any], account: str, amount: int) -> int:
    """Withdraw money from an account; refused (an error) if it would overdraw.

    Args:
        account: The account to debit.
        amount: How much to withdraw (a positive whole number).

    Returns:
        The account's new balance.
    """
    record = _find(world, account)
    _take(record, _amount(amount), "withdraw")
    return int(record["balance"])


def transfer(world: dict[str, Any], from_account: str, to_account: str, amount: int) -> int:
    """Move money between two accounts; refused (an error) if it would overdraw from_account.

    Args:
        from_account: The account to debit.
        to_account: The account to credit.
        amount: How much to move (a positive whole number).

    Returns:
        The new balance of from_account.
    """
    source = _find(world, from_account)
    target = _find(world, to_account)
    if source is target:
        raise ValueError("from_account and to_account are the same account")
    value = _amount(amount)
    _take(source, value, "transfer")
    target["balance"] += value
    return int(source["balance"])


def balance(world: dict[str, Any], account: str) -> int:
    """Look up an account's current balance.

    Args:
        account: The account to look up.

    Returns:
        The account's balance.
    """
    return int(_find(world, account)["balance"])


TOOLS = (open_account, deposit, withdraw, transfer, balance)
